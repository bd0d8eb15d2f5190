// The Anthropic Messages dialect (POST /v1/messages, CONTRACT section 6): the credential from
// x-api-key or a Bearer token, the request parsed into the internal form (parse.ts), answers and
// events rendered back (render.ts), errors in Anthropic's shape (errors.ts). anthropic-version
// is accepted whatever its value: Tollgate answers one version of the format.

import type { IncomingMessage } from 'node:http';
import type { Dialect } from '../types.js';
import { errorJson } from './errors.js';
import { parseMessages } from './parse.js';
import { MessagesRenderer } from './render.js';
import { MESSAGES_DIALECT } from '../../hub/anthropic.js';

/** x-api-key as Anthropic's SDKs send it, else the Authorization header as any client does. */
function credential(req: IncomingMessage): string | undefined {
  const key = req.headers['x-api-key'];
  if (typeof key === 'string' && key !== '') return `Bearer ${key}`;
  return req.headers.authorization;
}

export const messagesDialect: Dialect = {
  name: MESSAGES_DIALECT,
  credential,
  parse: (body, req) => {
    const request = parseMessages(body);
    // Kept for an upstream that speaks Messages itself: the body as the client sent it.
    const beta = req.headers['anthropic-beta'];
    const headers: Record<string, string> = typeof beta === 'string' ? { 'anthropic-beta': beta } : {};
    request.native = { dialect: MESSAGES_DIALECT, body: body as Record<string, unknown>, headers };
    return request;
  },
  renderer: (request, model, prompt) => new MessagesRenderer(request, model, prompt),
  errorBody: errorJson,
};
