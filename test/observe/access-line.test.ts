// The access line written without pino's walk (lib/observe/access-line.ts) is the line pino
// writes for the same fields, byte for byte (where pino loses a lone surrogate, the line keeps it); a logger the gateway did not make
// still gets its line through pino; the level still silences it.

import t from 'tap';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import { accessLine, ownLogger, writeAccessLine, type AccessFields } from '../../lib/observe/access-line.js';
import { holds } from '../property/arbitraries.js';

/** A pino logger as createLogger configures it, writing into `lines`. */
function logger(lines: string[], level = 'info'): pino.Logger {
  const sink = new Writable({ write(chunk, _enc, cb) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); cb(); } });
  return pino({
    level,
    base: { service: 'tollgate' },
    redact: { paths: ['authorization', 'headers.authorization', 'headers["x-api-key"]', 'api_key', 'token', 'key'], censor: '[redacted]' },
  }, sink);
}

/** Counts the calls of `l.info` (they still log). */
function countInfo(l: pino.Logger): { calls: number } {
  const seen = { calls: 0 };
  const info = l.info.bind(l);
  l.info = ((...args: Parameters<typeof info>) => { seen.calls++; return info(...args); }) as typeof l.info;
  return seen;
}

const text = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.constantFrom('', '"', '\\', '\u2028', '\ud800', 'key_abc', '</script>'));
const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });
const number = fc.oneof(fc.integer(), fc.double(), fc.constantFrom(0, -0, 1e21, 1.5e-7, Number.MAX_SAFE_INTEGER));
const fields: fc.Arbitrary<AccessFields> = fc.record({
  request_id: text,
  route: text,
  account: maybe(text),
  credential: maybe(text),
  model: maybe(text),
  provider: maybe(text),
  stream: maybe(fc.boolean()),
  status: fc.integer({ min: 100, max: 599 }),
  code: maybe(text),
  duration_ms: number,
  upstream_ms: maybe(number),
  queue_ms: maybe(number),
  ttfc_ms: maybe(number),
  prompt_tokens: maybe(fc.nat()),
  completion_tokens: maybe(fc.nat()),
  usage_source: maybe(text),
  units: maybe(number),
});

t.test('the line is the one pino writes for the same fields', async (t) => {
  await holds(t, 'access line = pino line', fc.property(fields, (f) => {
    const lines: string[] = [];
    const l = logger(lines);
    l.info(f, 'request');
    const fromPino = lines[0]!;
    const time = (JSON.parse(fromPino) as { time: number }).time;
    const ours = accessLine(f, time, (l as unknown as Record<symbol, string>)[pino.symbols.chindingsSym]!);
    const wellFormed = Object.values(f).every((v) => typeof v !== 'string' || (v as string & { isWellFormed(): boolean }).isWellFormed());
    if (wellFormed) assert.equal(ours, fromPino);
    // pino writes a lone surrogate raw (it reaches the file as U+FFFD); the line keeps it, escaped.
    else assert.deepEqual(JSON.parse(ours), { level: 30, time, service: 'tollgate', ...JSON.parse(JSON.stringify(f)), msg: 'request' });
  }), 400);
});

t.test('a logger createLogger made is written to directly; the level silences it', async (t) => {
  const f: AccessFields = {
    request_id: 'req_1', route: 'chat', account: 'acct_1', credential: 'key_1', model: 'm', provider: 'p', stream: false, status: 200,
    code: undefined, duration_ms: 1.25, upstream_ms: 0.5, queue_ms: undefined, ttfc_ms: undefined, prompt_tokens: 3, completion_tokens: 4,
    usage_source: 'upstream', units: 7,
  };
  const lines: string[] = [];
  const own = ownLogger(logger(lines));
  const viaPino = countInfo(own);
  writeAccessLine(own, f);
  t.equal(viaPino.calls, 0, 'not through pino');
  t.equal(lines.length, 1);
  t.same(JSON.parse(lines[0]!), { level: 30, time: JSON.parse(lines[0]!).time, service: 'tollgate', ...JSON.parse(JSON.stringify(f)), msg: 'request' });
  own.level = 'warn';
  writeAccessLine(own, f);
  t.equal(lines.length, 1, 'level warn: no access line');

  const other: string[] = [];
  const foreign = logger(other);
  const foreignCalls = countInfo(foreign);
  writeAccessLine(foreign, f);
  t.equal(foreignCalls.calls, 1, 'a logger handed in gets logger.info');
  t.equal(other.length, 1);
  t.equal(other[0], lines[0]!.replace(/"time":\d+/, `"time":${JSON.parse(other[0]!).time}`));
});
