// The Redis admission in one script (lib/limits/admission.ts) and the token correction riding in
// the account lease's release (lib/limits/slots.ts) answer and count as the limiters and the
// slots did on their own: two Limits on one Redis, one through the scripts, one through
// rate-limiter-flexible's own consume, penalty and reward and the slots' own acquire and
// release (its slots not a RedisSlots), run the same admissions, refusals, corrections and
// releases under two prefixes, and must give the same answers and leave the same counters.

import t from 'tap';
import pino from 'pino';
import { setTimeout as sleep } from 'node:timers/promises';
import { Limits } from '../../lib/limits/limits.js';
import { RedisSlots, type Slots } from '../../lib/limits/slots.js';
import { validateConfig } from '../../lib/config/load.js';
import { connect, retire } from '../../lib/store/redis/connect.js';
import { GatewayError } from '../../lib/errors.js';
import type { Principal } from '../../lib/auth/principal.js';
import type { PlanConfig } from '../../lib/config/types.js';
import type { Grant } from '../../lib/limits/grant.js';
import { startRedis } from '../helpers/redis.js';
import { DEMO_KEY, baseConfig } from '../helpers/gateway.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const client = connect({ kind: 'url', url: redis.url }, { connectionName: 'admission-test', connectTimeout: 2000, commandTimeout: 2000 });
t.teardown(() => { retire(client); client.disconnect(); });
await new Promise((r) => client.once('ready', r));

const quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const plan: PlanConfig = { paid: false, requests_per_minute: 6, tokens_per_minute: 2000, max_concurrent: 2, priority: 'normal', fair_weight: 1, quotas };
const limitsOf = (rpm: number | null, tpm: number | null, mc: number | null) => ({ requests_per_minute: rpm, tokens_per_minute: tpm, max_concurrent: mc });

function principal(withTeam: boolean): Principal {
  return {
    accountId: 'acct', planName: 'free', plan, credentialId: 'key_k1',
    key: {
      id: 'key_k1', expiresAt: null, models: null, patterns: null, ips: null, limits: limitsOf(5, 1500, null), priority: null,
      team: withTeam ? { id: 'team_t1', limits: limitsOf(4, 1200, 3) } : null, tags: [], tagsLocked: false, endUserBudget: null,
    },
  };
}

/** A Limits on `prefix`: through the scripts, or (own: false) through the limiters' and slots' own commands. */
function limits(prefix: string, scripts: boolean): { l: Limits; slots: RedisSlots } {
  const c = baseConfig();
  c.store = { kind: 'redis', url: redis.url, prefix };
  c.accounts = [{ id: 'demo', plan: 'free', keys: [DEMO_KEY] }];
  const log = pino({ level: 'silent' });
  const slots = new RedisSlots(client, prefix, false, log);
  // Not a RedisSlots: the Limits take the limiters' own path.
  const plain: Slots = { acquire: (a, m) => slots.acquire(a, m), inUse: (a) => slots.inUse(a) };
  return { l: new Limits(validateConfig(c), client, scripts ? slots : plain, log), slots };
}

/** An admission's answer, less what moves with the clock (reset times). */
async function outcome(p: Promise<Grant>): Promise<{ grant?: Grant; said: unknown }> {
  const timeless = (h: Record<string, string> | undefined) => Object.fromEntries(Object.entries(h ?? {}).filter(([k]) => !/reset|retry-after/.test(k)));
  try {
    const grant = await p;
    return { grant, said: { ok: timeless(grant.headers) } };
  } catch (err) {
    if (!(err instanceof GatewayError)) throw err;
    return { said: { code: err.code, message: err.message.replace(/Retry after .*$/, ''), headers: timeless(err.headers) } };
  }
}

/** Every counter and lease set under `prefix`: value (or members' count) and whether it expires within its window. */
async function state(prefix: string): Promise<Record<string, string>> {
  const keys = (await client.keys(`${prefix}*`) as string[]).sort();
  const out: Record<string, string> = {};
  for (const k of keys) {
    const type = await client.type(k);
    const ttl = await client.pttl(k);
    const value = type === 'zset' ? `${await client.zcard(k)} leases` : String(await client.get(k));
    out[k.slice(prefix.length)] = `${value}, ${ttl > 0 && ttl <= 60_000 ? 'expiring' : `ttl ${ttl}`}`;
  }
  return out;
}

for (const withTeam of [false, true]) {
  t.test(`the scripts answer and count as the limiters and slots did (${withTeam ? 'a key of a team' : 'a key'})`, async (t) => {
    const tag = `${withTeam ? 'team' : 'key'}-${process.pid}`;
    const a = limits(`adm-own-${tag}:`, false);
    const b = limits(`adm-scripts-${tag}:`, true);
    const p = principal(withTeam);
    /** Runs `step` on both, compares what they said, and gives back both grants. */
    const both = async (what: string, step: (l: Limits) => Promise<Grant>) => {
      const x = await outcome(step(a.l));
      const y = await outcome(step(b.l));
      t.strictSame(y.said, x.said, `${what}: ${JSON.stringify(x.said)}`);
      return [x.grant, y.grant] as const;
    };
    const first = await both('admitted', (l) => l.admit(p, 300));
    const second = await both('admitted again', (l) => l.admit(p, 400));
    await both('a third at once: over a concurrency cap', (l) => l.admit(p, 100));
    // Corrections: fewer tokens than the estimate, more, and none (a cancel gives all back).
    for (const g of first) { g!.correct(120); g!.release(); }
    for (const g of second) { g!.correct(900); g!.release(); }
    await sleep(100);
    t.strictSame(await state(`adm-scripts-${tag}:`), await state(`adm-own-${tag}:`), 'the same counters and leases after the corrections');
    const third = await both('admitted after the releases', (l) => l.admit(p, 50));
    for (const g of third) g!.cancel();
    // Until a limit refuses: the refusal's message and headers alike.
    for (let i = 0; i < 6; i++) {
      const grants = await both(`admission ${i + 4}`, (l) => l.admit(p, 10));
      for (const g of grants) if (g !== undefined) { g.correct(10); g.release(); }
    }
    await sleep(100);
    t.strictSame(await state(`adm-scripts-${tag}:`), await state(`adm-own-${tag}:`), 'the same counters and leases at the end');
    const keys = Object.keys(await state(`adm-scripts-${tag}:`));
    t.ok(keys.length > 0 && keys.every((k) => k.startsWith('{acct:acct}')), `every counter under the account's hash tag: ${keys.join(', ')}`);
    t.equal(await b.slots.inUse('acct'), 0, 'no lease left');
  });
}

t.test("the account's counters and lease: one script to admit, one to release with the correction", async (t) => {
  const prefix = `adm-count-${process.pid}:`;
  const { l } = limits(prefix, true);
  const p: Principal = { ...principal(false), key: undefined };
  const info = async () => {
    const s = await client.info('commandstats');
    const n = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(s)?.[1] ?? 0);
    return { evalsha: n('evalsha') + n('eval'), zrem: n('zrem'), incrby: n('incrby') };
  };
  (await l.admit(p, 10)).release(); // the scripts loaded
  await sleep(50);
  const before = await info();
  const g = await l.admit(p, 300);
  g.correct(120);
  g.release();
  await sleep(50);
  const after = await info();
  t.strictSame({ evalsha: after.evalsha - before.evalsha, zrem: after.zrem - before.zrem, incrby: after.incrby - before.incrby },
    { evalsha: 2, zrem: 1, incrby: 3 }, 'two scripts: the admission (two counters, the lease) and the release (the correction, the lease)');
});
