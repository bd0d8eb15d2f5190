// Stored responses for the Redis store (Responses API, `store: true`), as chains (see
// ../response-chains.ts).
//
// Key layout (P = the store's prefix, A = the account):
//   P{resp:A}:r:ID  hash  one response: v (its value), p (the id it continues; absent for the
//                         first), n (stored responses that continue it), x (its expiry, Unix ms,
//                         also the key's PEXPIREAT), d ('1' once deleted while continued)
//   P{resp:A}:m     hash  the account's accounting: ID -> "BYTES:PARENT" per stored response,
//                         '#' -> their total bytes
//   P{resp:A}:x     zset  ID scored by its expiry: what to take out of the accounting when due
// The hash tag is the account's own `{resp:A}`, so an account's responses sit on one cluster
// slot apart from its metering keys, and a lookup by another account can never find them. Each
// operation is one script on those keys; the scripts walk a chain by the ids it holds (keys of
// the same tag, so of the same slot). Each first frees (up to 100 of) the account's responses
// whose expiry passed, so the byte count holds only live ones. The accounting keys expire with
// the account's latest response. Time comes from the caller (Date.now()), as in the metering.
// Responses stored by an earlier Tollgate (P{resp:A}:ID strings) are not read; they expire.

import type { RedisClient } from './connect.js';
import { ancestorExpiry, type ResponseChain } from '../response-chains.js';

type Reply = Promise<unknown>;

interface ResponseScripts {
  tgRespPut(record: string, meta: string, expiries: string, id: string, value: string, parent: string, now: string, expiresAt: string, ancestors: string, prefix: string): Reply;
  tgRespChain(record: string, meta: string, expiries: string, now: string, maxDepth: string, prefix: string): Reply;
  tgRespBytes(meta: string, expiries: string, now: string, prefix: string): Reply;
  tgRespDelete(record: string, meta: string, expiries: string, id: string, prefix: string): Reply;
}

// free(): drops a response (record, bytes, expiry), then each deleted ancestor that no stored
// response continues any more. expire(): frees what is due.
const FREE = `
local function free(meta, exp, rec, id)
  for _ = 1, 100000 do
    local m = redis.call('HGET', meta, id)
    local parent = ''
    if m then
      local colon = string.find(m, ':', 1, true)
      local bytes = string.sub(m, 1, colon - 1)
      if bytes ~= '0' then redis.call('HINCRBY', meta, '#', '-' .. bytes) end
      parent = string.sub(m, colon + 1)
      redis.call('HDEL', meta, id)
    end
    redis.call('ZREM', exp, id)
    redis.call('DEL', rec .. id)
    if parent == '' then return end
    local up = redis.call('HMGET', rec .. parent, 'n', 'd')
    if up[1] == false then return end
    if redis.call('HINCRBY', rec .. parent, 'n', -1) > 0 or up[2] ~= '1' then return end
    id = parent
  end
end
local function expire(meta, exp, rec, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, 100)) do free(meta, exp, rec, id) end
end
`;

const SCRIPTS: Record<keyof ResponseScripts, { keys: number; lua: string }> = {
  // ARGV: id, value, parent ('' for none), now, expiresAt, the ancestors' expiry, record prefix.
  // Ancestors are moved up to ARGV[6] until one is already as late (the rest are then too).
  tgRespPut: { keys: 3, lua: `${FREE}
expire(KEYS[2], KEYS[3], ARGV[7], ARGV[4])
if redis.call('EXISTS', KEYS[1]) == 1 then free(KEYS[2], KEYS[3], ARGV[7], ARGV[1]) end
local bytes = string.len(ARGV[2])
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'n', '0', 'x', ARGV[5])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'p', ARGV[3]) end
redis.call('PEXPIREAT', KEYS[1], ARGV[5])
redis.call('HSET', KEYS[2], ARGV[1], bytes .. ':' .. ARGV[3])
redis.call('HINCRBY', KEYS[2], '#', bytes)
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
if ARGV[3] ~= '' and redis.call('EXISTS', ARGV[7] .. ARGV[3]) == 1 then
  redis.call('HINCRBY', ARGV[7] .. ARGV[3], 'n', 1)
  local id = ARGV[3]
  local target = tonumber(ARGV[6])
  for _ = 1, 100000 do
    local key = ARGV[7] .. id
    local r = redis.call('HMGET', key, 'x', 'p')
    if r[1] == false or tonumber(r[1]) >= target then break end
    redis.call('HSET', key, 'x', ARGV[6])
    redis.call('PEXPIREAT', key, ARGV[6])
    redis.call('ZADD', KEYS[3], ARGV[6], id)
    if r[2] == false then break end
    id = r[2]
  end
end
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[2], last)
redis.call('PEXPIREAT', KEYS[3], last)
return 1` },
  // ARGV: now, maxDepth, record prefix. {account bytes, value, parent's value, ...}, or nil.
  tgRespChain: { keys: 3, lua: `${FREE}
expire(KEYS[2], KEYS[3], ARGV[3], ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'v', 'p', 'd')
if r[1] == false or r[3] == '1' then return false end
local out = { redis.call('HGET', KEYS[2], '#') or '0', r[1] }
local parent = r[2]
local max = tonumber(ARGV[2])
while parent do
  if #out - 1 >= max then return false end
  local up = redis.call('HMGET', ARGV[3] .. parent, 'v', 'p')
  if up[1] == false then return false end
  out[#out + 1] = up[1]
  parent = up[2]
end
return out` },
  // ARGV: now, record prefix.
  tgRespBytes: { keys: 2, lua: `${FREE}
expire(KEYS[1], KEYS[2], ARGV[2], ARGV[1])
return redis.call('HGET', KEYS[1], '#') or '0'` },
  // ARGV: id, record prefix. 1 deleted (freed, or kept for the responses that continue it), 0 none.
  tgRespDelete: { keys: 3, lua: `${FREE}
local r = redis.call('HMGET', KEYS[1], 'n', 'd')
if r[1] == false or r[2] == '1' then return 0 end
if tonumber(r[1]) > 0 then
  redis.call('HSET', KEYS[1], 'd', '1')
  return 1
end
free(KEYS[2], KEYS[3], ARGV[2], ARGV[1])
return 1` },
};

export class RedisResponses {
  readonly #redis: RedisClient & ResponseScripts;
  readonly #prefix: string;

  /** Registers its scripts on `redis` (EVALSHA, falling back to EVAL, as the store's others). */
  constructor(redis: RedisClient, prefix: string) {
    for (const [name, s] of Object.entries(SCRIPTS)) redis.defineCommand(name, { numberOfKeys: s.keys, lua: s.lua });
    this.#redis = redis as RedisClient & ResponseScripts;
    this.#prefix = prefix;
  }

  #tag(account: string): string {
    return `${this.#prefix}{resp:${account}}`;
  }

  async put(account: string, id: string, value: string, parent: string | null, ttlMs: number): Promise<void> {
    const tag = this.#tag(account);
    const now = Date.now();
    const expiresAt = now + Math.max(1, Math.ceil(ttlMs));
    await this.#redis.tgRespPut(`${tag}:r:${id}`, `${tag}:m`, `${tag}:x`, id, value, parent ?? '', String(now),
      String(expiresAt), String(ancestorExpiry(expiresAt, ttlMs)), `${tag}:r:`);
  }

  async get(account: string, id: string): Promise<string | undefined> {
    const [value, deleted] = await this.#redis.hmget(`${this.#tag(account)}:r:${id}`, 'v', 'd');
    return value === null || deleted === '1' ? undefined : value;
  }

  async chain(account: string, id: string, maxDepth: number): Promise<ResponseChain | undefined> {
    const tag = this.#tag(account);
    const reply = await this.#redis.tgRespChain(`${tag}:r:${id}`, `${tag}:m`, `${tag}:x`, String(Date.now()), String(maxDepth), `${tag}:r:`);
    if (!Array.isArray(reply)) return undefined;
    const [bytes, ...values] = reply as string[];
    return { values: values.reverse(), accountBytes: Number(bytes) };
  }

  async bytes(account: string): Promise<number> {
    const tag = this.#tag(account);
    return Number(await this.#redis.tgRespBytes(`${tag}:m`, `${tag}:x`, String(Date.now()), `${tag}:r:`));
  }

  async delete(account: string, id: string): Promise<boolean> {
    const tag = this.#tag(account);
    return (await this.#redis.tgRespDelete(`${tag}:r:${id}`, `${tag}:m`, `${tag}:x`, id, `${tag}:r:`)) === 1;
  }
}
