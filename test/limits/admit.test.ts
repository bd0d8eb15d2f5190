// Limits.admit on its own (memory store): the headers of a refusal when a plan's limit and a
// key's are equal but have counted differently, and what is said about a store outage when
// part of the store fails.

import t from 'tap';
import pino from 'pino';
import { Writable } from 'node:stream';
import { Limits } from '../../lib/limits/limits.js';
import { MemorySlots, type Slots } from '../../lib/limits/slots.js';
import { validateConfig } from '../../lib/config/load.js';
import { GatewayError, StoreUnavailableError } from '../../lib/errors.js';
import type { Principal } from '../../lib/auth/principal.js';
import type { PlanConfig } from '../../lib/config/types.js';
import { DEMO_KEY, baseConfig } from '../helpers/gateway.js';

const quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const plan = (rpm: number | null): PlanConfig => ({ paid: false, requests_per_minute: rpm, tokens_per_minute: null, max_concurrent: null, priority: 'normal', fair_weight: 1, quotas });

function principal(planName: string, p: PlanConfig, keyRpm: number | null): Principal {
  return {
    accountId: 'acct', planName, plan: p, credentialId: 'key_k1',
    key: { id: 'key_k1', expiresAt: null, models: null, patterns: null, ips: null, limits: { requests_per_minute: keyRpm, tokens_per_minute: null, max_concurrent: null }, priority: null, team: null, tags: [], tagsLocked: false, endUserBudget: null },
  };
}

function limits(lines: string[] = [], slots: Slots = new MemorySlots()): Limits {
  const c = baseConfig();
  c.accounts = [{ id: 'demo', plan: 'free', keys: [DEMO_KEY] }];
  const sink = new Writable({ write(chunk, _enc, cb) { lines.push(String(chunk)); cb(); } });
  return new Limits(validateConfig(c), null, slots, pino({ level: 'info' }, sink));
}

t.test("a key's limit refuses while the plan's equal limit took a point: the 429 shows the key's 0 left", async (t) => {
  const l = limits();
  // Five requests under plan a: the key's count is 5, plan a's 5.
  for (let i = 0; i < 5; i++) (await l.admit(principal('a', plan(5), 5), 0)).release();
  // The account is now on plan b (limit 5 too, nothing counted): plan b takes a point, the key refuses.
  const err = await l.admit(principal('b', plan(5), 5), 0).then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof GatewayError && err.code === 'rate_limit_exceeded', String(err));
  const e = err as GatewayError;
  t.match(e.message, /^Rate limit reached: 5 requests per minute for this API key\./);
  t.equal(e.headers?.['x-ratelimit-limit-requests'], '5');
  t.equal(e.headers?.['x-ratelimit-remaining-requests'], '0', "the key's limit, which refused: none left");
  // Plan b's point was given back: the next admission under plan b sees the key refuse again, and plan b untouched.
  const again = await l.admit(principal('b', plan(5), null), 0);
  t.equal(again.headers['x-ratelimit-remaining-requests'], '4', "plan b's point came back (this one took 1 of 5)");
  again.release();
});

t.test('the slots\' store down while the limiters answer: the outage said once, its end once (no flapping)', async (t) => {
  const lines: string[] = [];
  let failing = true;
  const slots: Slots = {
    acquire: async () => { if (failing) throw new Error('connection refused'); return () => undefined; },
    inUse: async () => 0,
  };
  const l = limits(lines, slots);
  const p: Principal = { ...principal('a', { ...plan(100), max_concurrent: 10 }, null) };
  for (let i = 0; i < 3; i++) {
    const err = await l.admit(p, 0).then(() => undefined, (e: unknown) => e);
    t.ok(err instanceof StoreUnavailableError, `503 while the slots' store is down (${String(err)})`);
  }
  const said = () => lines.map((x) => JSON.parse(x).msg as string);
  t.same(said(), ['rate-limit store unreachable'], 'the outage said once');
  failing = false;
  (await l.admit(p, 0)).release();
  t.same(said(), ['rate-limit store unreachable', 'rate-limit store reachable again'], 'and its end, once');
});
