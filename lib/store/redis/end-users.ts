// Budgets per end user in Redis (../end-users.ts): one hash per key and end user, in the key's
// slot ({eu:KEY}), so each script is atomic on a Cluster too:
//   P{eu:K}:U        hash    s:<period> -> units spent; h:<request id> -> "units expires-ms"
//   P{eu:K}:U:d:<id> string  the request's settlement was applied (SETTLED_MARK_MS)
// U is the SHA-256 of the end user (any printable text, of any length up to 128). The hash
// expires 400 days after its last write (a yearly budget's end user who stopped calling).

import { createHash } from 'node:crypto';
import type { RedisClient } from './connect.js';
import { SETTLED_MARK_MS, type EndUserHold, type EndUserHoldResult, type EndUserLedger, type EndUserSettlement } from '../end-users.js';

const KEEP_MS = 400 * 86_400_000;

export interface EndUserScripts {
  tgEndUserHold(hash: string, requestId: string, units: string, cap: string, period: string, now: string, expires: string, keepMs: string): Promise<unknown>;
  tgEndUserSettle(hash: string, mark: string, requestId: string, units: string, period: string, markMs: string, keepMs: string): Promise<unknown>;
}

export const END_USER_SCRIPTS: Record<keyof EndUserScripts, { keys: number; lua: string }> = {
  // Open holds (expired ones dropped; this request's own not counted twice) plus the period's
  // spend plus the request's units within the cap: hold it, {1}; else {0, what is left}.
  tgEndUserHold: { keys: 1, lua: `
local spent = tonumber(redis.call('HGET', KEYS[1], 's:' .. ARGV[4]) or '0')
local now = tonumber(ARGV[5])
local held = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'h:' then
    local units, exp = string.match(all[i + 1], '^(%d+) (%d+)$')
    if tonumber(exp) <= now then redis.call('HDEL', KEYS[1], f)
    elseif f ~= 'h:' .. ARGV[1] then held = held + tonumber(units) end
  end
end
local left = tonumber(ARGV[3]) - spent - held
if tonumber(ARGV[2]) > left then
  if left < 0 then left = 0 end
  return {0, string.format('%.0f', left)}
end
redis.call('HSET', KEYS[1], 'h:' .. ARGV[1], ARGV[2] .. ' ' .. ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return {1, '0'}` },
  // Once per request id (the mark): the hold dropped and its units added to the period's spend.
  tgEndUserSettle: { keys: 2, lua: `
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[4]) then return 0 end
redis.call('HDEL', KEYS[1], 'h:' .. ARGV[1])
redis.call('HINCRBY', KEYS[1], 's:' .. ARGV[3], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1` },
};

export class RedisEndUsers implements EndUserLedger {
  readonly #redis: RedisClient & EndUserScripts;
  readonly #prefix: string;

  constructor(redis: RedisClient & EndUserScripts, prefix: string) {
    this.#redis = redis;
    this.#prefix = prefix;
  }

  #hash(keyId: string, endUser: string): string {
    return `${this.#prefix}{eu:${keyId}}:${createHash('sha256').update(endUser).digest('hex')}`;
  }

  async hold(h: EndUserHold): Promise<EndUserHoldResult> {
    const now = Date.now();
    const out = await this.#redis.tgEndUserHold(this.#hash(h.keyId, h.endUser), h.requestId, String(h.units), String(h.cap), h.period, String(now),
      String(now + h.ttlMs), String(KEEP_MS));
    if (!Array.isArray(out) || out.length !== 2) throw new Error('unexpected answer of tgEndUserHold');
    return Number(out[0]) === 1 ? { ok: true } : { ok: false, remaining_units: Number(out[1]) };
  }

  async settle(s: EndUserSettlement): Promise<void> {
    const hash = this.#hash(s.keyId, s.endUser);
    await this.#redis.tgEndUserSettle(hash, `${hash}:d:${s.requestId}`, s.requestId, String(s.units), s.period, String(SETTLED_MARK_MS), String(KEEP_MS));
  }

  async release(keyId: string, endUser: string, requestId: string): Promise<void> {
    await this.#redis.hdel(this.#hash(keyId, endUser), `h:${requestId}`);
  }

  async spent(keyId: string, endUser: string, period: string): Promise<number> {
    return Number((await this.#redis.hget(this.#hash(keyId, endUser), `s:${period}`)) ?? 0);
  }
}
