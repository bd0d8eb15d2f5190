// The parts of undici the gateway uses on every upstream call: Pool (with the request API
// undici's index puts on Dispatcher.prototype), its error classes and its header parser.
// undici's index also loads fetch, WebSocket, the cache and mock agents, cookies, EventSource
// and every other dispatcher: about 3 MB of heap that an idle gateway never touches. The
// modules here are the very ones the index re-exports (one module cache), so `errors.X` is the
// class `import { errors } from 'undici'` gives, and test/upstream/undici.test.ts checks it.

import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const require = createRequire(import.meta.url);

const Dispatcher = require('undici/lib/dispatcher/dispatcher.js') as typeof Undici.Dispatcher;
// What undici's index does: request(), stream(), pipeline(), upgrade(), connect() on every dispatcher.
Object.assign(Dispatcher.prototype, require('undici/lib/api/index.js'));


export const Pool = require('undici/lib/dispatcher/pool.js') as typeof Undici.Pool;
export type Pool = Undici.Pool;
export const errors = require('undici/lib/core/errors.js') as typeof Undici.errors;
export const parseHeaders = (require('undici/lib/core/util.js') as typeof Undici.util).parseHeaders;
