// The Lua scripts of the Redis store's accounts, keys and sessions (./keys.ts runs them),
// registered on the command connection by ./store.ts with those of metering (./metering.ts) and
// of usage records (./records.ts), which stay beside their callers. Every script follows the
// rules in ./store.ts's header (one hash tag each; deletions only as a key's last access).
// The scripts of the admin API's writes record the write's audit event in the same step
// (audited(...), ./audit.ts): their last key is the outbox, their first argument the event.

import { audited } from './audit.js';
import type { MeteringScripts } from './metering-scripts.js';
import type { UsageScripts } from './records.js';

export type Reply = Promise<unknown>;

/** The Lua scripts, registered with defineCommand (EVALSHA, falling back to EVAL). */
export interface Scripts extends MeteringScripts, UsageScripts {
  tgCreateAccount(acct: string, outbox: string, event: string, id: string, plan: string, balance: string, now: string): Reply;
  tgAddCredits(acct: string, credits: string, outbox: string, event: string, units: string, idempotencyKey: string): Reply;
  tgClaimKeyId(index: string, digest: string): Reply;
  tgReleaseKeyId(index: string, digest: string): Reply;
  tgCreateKey(record: string, id: string, account: string, digest: string, now: string, own: string): Reply;
  tgDropKeyRecord(record: string, id: string): Reply;
  tgRevokeKey(record: string, outbox: string, event: string, id: string, now: string, channel: string, message: string): Reply;
  tgRevokeSession(session: string, outbox: string, event: string, now: string, channel: string, message: string): Reply;
  tgKeyInit(hash: string, set: string, acct: string, outbox: string, event: string, id: string, account: string, digest: string, createdAt: string, last4: string, controls: string,
    bu: string, bp: string, team: string): Reply;
  tgKeyPatch(hash: string, acct: string, outbox: string, event: string, channel: string, instance: string, team: string, version: string, pairs: string, ...fields: string[]): Reply;
  tgKeyRotate(hash: string, outbox: string, event: string, digest: string, last4: string, until: string, channel: string, m1: string, m2: string): Reply;
  tgKeyRevoke(hash: string, outbox: string, event: string, now: string): Reply;
  tgKeyTouch(hash: string, at: string): Reply;
  tgKeyAndAccount(hash: string, acct: string): Reply;
  tgTeamCreate(acct: string, outbox: string, event: string, team: string, createdAt: string, ...fields: string[]): Reply;
  tgTeamPatch(acct: string, outbox: string, event: string, team: string, pairs: string, ...fields: string[]): Reply;
  tgTeamMark(acct: string, team: string, on: string): Reply;
  tgTeamDrop(acct: string, outbox: string, event: string, team: string): Reply;
  tgTeamClaim(index: string, value: string, expect: string): Reply;
  tgTeamUnclaim(index: string, account: string): Reply;
}

export const SCRIPTS: Record<Exclude<keyof Scripts, keyof MeteringScripts | keyof UsageScripts>, { keys: number; lua: string }> = {
  // 1 created, 0 exists (unchanged).
  tgCreateAccount: audited({ keys: 1, lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'plan', ARGV[2], 'balance_units', ARGV[3], 'created_at', ARGV[4])
audited()
return 1` }),
  // nil: no account; {applied, balance}: 1 applied, 0 key used before, -1 refused (below 0),
  // -2 refused (above 2^53-1); a refusal changes nothing and leaves the key unused (the rule
  // of creditRefusal in ../rules.ts). Balance and units are at most 2^53-1 in size, so the Lua
  // doubles are exact, and a sum that rounds can only round to above the limit, never below.
  // HINCRBY runs before SADD: if it fails, nothing changed. (The balance goes back as Redis
  // gave it, text or an integer reply: Lua's tostring keeps only 14 digits.) A repeated key
  // changes nothing but is answered as done: audited too.
  tgAddCredits: audited({ keys: 2, lua: `
local current = redis.call('HGET', KEYS[1], 'balance_units')
if current == false then return false end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then audited() return {0, current} end
local balance, units = tonumber(current), tonumber(ARGV[1])
if units < 0 and balance + units < 0 then return {-1, current} end
if units > 0 and balance + units > 9007199254740991 then return {-2, current} end
local after = redis.call('HINCRBY', KEYS[1], 'balance_units', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
audited()
return {1, after}` }),
  // 1 claimed, 0 already this digest's, -1 taken by another digest.
  tgClaimKeyId: { keys: 1, lua: `
local cur = redis.call('GET', KEYS[1])
if cur == false then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
if cur == ARGV[1] then return 0 end
return -1` },
  tgReleaseKeyId: { keys: 1, lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0` },
  // 1 created, 0 exists with this id, -1 exists with another id. ARGV[5] '1': the record is
  // valid only once its key's account-side hash exists (`own`; see ./keys.ts's header).
  tgCreateKey: { keys: 1, lua: `
local cur = redis.call('HGET', KEYS[1], 'id')
if cur == false then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'account', ARGV[2], 'digest', ARGV[3], 'created_at', ARGV[4])
  if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'own', '1') end
  return 1
end
if cur == ARGV[1] then return 0 end
return -1` },
  // Deletes a digest record of key ARGV[1] that has no use without its account-side hash (a
  // creation refused after it was written): 1 deleted, 0 not such a record.
  tgDropKeyRecord: { keys: 1, lua: `
local r = redis.call('HMGET', KEYS[1], 'id', 'own')
if r[1] ~= ARGV[1] or r[2] ~= '1' then return 0 end
redis.call('DEL', KEYS[1])
return 1` },
  // nil: unknown (or another id's record); {newly, id, account, digest, created_at, revoked_at}.
  // Audited here only for a key without an account-side hash (the caller passes no event else).
  tgRevokeKey: audited({ keys: 1, lua: `
local r = redis.call('HMGET', KEYS[1], 'id', 'account', 'digest', 'created_at', 'revoked_at')
if r[1] ~= ARGV[1] then return false end
local newly = 0
if r[5] == false then
  redis.call('HSET', KEYS[1], 'revoked_at', ARGV[2])
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  r[5] = ARGV[2]
  newly = 1
end
audited()
return {newly, r[1], r[2], r[3], r[4], r[5]}` }),
  // A key's hash and its account's (one slot), read at once: {fields, values, ...} of the key,
  // of the account (its own fields, not its teams'), and {member, value, ...} of the team the
  // key names (./teams.ts: its fields in the account's hash, t:<id>:<member>; empty when none).
  tgKeyAndAccount: { keys: 2, lua: `
local function pairs_of(key, fields)
  local v = redis.call('HMGET', key, unpack(fields))
  local out = {}
  for i = 1, #fields do
    if v[i] then out[#out + 1] = fields[i]; out[#out + 1] = v[i] end
  end
  return out
end
local k = redis.call('HGETALL', KEYS[1])
local a = pairs_of(KEYS[2], {'id', 'plan', 'balance_units', 'created_at'})
local t = {}
local tm = redis.call('HGET', KEYS[1], 'tm')
if tm then
  local names = {'c', 'n', 'm', 'rpm', 'tpm', 'mc', 'bu', 'bp', 'sp', 'su', 'mt'}
  local full = {}
  for i, n in ipairs(names) do full[i] = 't:' .. tm .. ':' .. n end
  local v = redis.call('HMGET', KEYS[2], unpack(full))
  for i, n in ipairs(names) do
    if v[i] then t[#t + 1] = n; t[#t + 1] = v[i] end
  end
end
return {k, a, t}` },
  // 1 created, 0 exists (unchanged), -2 its team (ARGV[9], '' for none) is not the account's
  // (KEYS[3]), or is being deleted: nothing written. Adds the id to the account's key set otherwise.
  tgKeyInit: audited({ keys: 3, lua: `
if ARGV[9] ~= '' then
  local t = redis.call('HMGET', KEYS[3], 't:' .. ARGV[9] .. ':c', 't:' .. ARGV[9] .. ':del')
  if t[1] == false or t[2] ~= false then return -2 end
end
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'account', ARGV[2], 'digest', ARGV[3], 'created_at', ARGV[4], 'last4', ARGV[5], 'c', ARGV[6], 'sp', 'n', 'su', '0')
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'bu', ARGV[7], 'bp', ARGV[8]) end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'tm', ARGV[9]) end
audited()
return 1` }),
  // A PATCH, merged here (see "Changes of controls" above): ARGV[3] field/value pairs to set
  // (ARGV[4..]), then fields to delete. Announced for the digest and the rotated-out one the
  // hash names now (a rotation may have run since the caller read the key). The hash after the
  // change (HGETALL), or nil when unknown or revoked.
  // ARGV[3] is the key's team: '' unchanged, '-' none, else a team id that must be the
  // account's (KEYS[2]) and not being deleted (else -2, nothing written). ARGV[4], when not '',
  // is the version (field v, counting changes; none: '0') the caller checked the patch
  // against: another one is -3, nothing written (the caller reads the key again).
  tgKeyPatch: audited({ keys: 2, lua: `
local r = redis.call('HMGET', KEYS[1], 'digest', 'ra', 'pd', 'v')
if r[1] == false or r[2] ~= false then return false end
if ARGV[4] ~= '' and (r[4] or '0') ~= ARGV[4] then return -3 end
if ARGV[3] ~= '' and ARGV[3] ~= '-' then
  local t = redis.call('HMGET', KEYS[2], 't:' .. ARGV[3] .. ':c', 't:' .. ARGV[3] .. ':del')
  if t[1] == false or t[2] ~= false then return -2 end
end
local last = 5 + 2 * tonumber(ARGV[5])
if last > 5 then redis.call('HSET', KEYS[1], unpack(ARGV, 6, last)) end
if ARGV[3] == '-' then redis.call('HDEL', KEYS[1], 'tm') elseif ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'tm', ARGV[3]) end
if #ARGV > last then redis.call('HDEL', KEYS[1], unpack(ARGV, last + 1)) end
redis.call('HINCRBY', KEYS[1], 'v', 1)
audited()
redis.call('PUBLISH', ARGV[1], cjson.encode({ from = ARGV[2], r = { kind = 'key-changed', digest = r[1] } }))
if r[3] then redis.call('PUBLISH', ARGV[1], cjson.encode({ from = ARGV[2], r = { kind = 'key-changed', digest = r[3] } })) end
return redis.call('HGETALL', KEYS[1])` }),
  // {1, digest rotated out, previous digest dropped or ''}, or 0 when unknown or revoked.
  tgKeyRotate: audited({ keys: 1, lua: `
local r = redis.call('HMGET', KEYS[1], 'digest', 'ra', 'pd')
if r[1] == false or r[2] ~= false then return 0 end
redis.call('HSET', KEYS[1], 'pd', r[1], 'pu', ARGV[3], 'digest', ARGV[1], 'last4', ARGV[2])
audited()
redis.call('PUBLISH', ARGV[4], ARGV[5])
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[6]) end
return {1, r[1], r[3] or ''}` }),
  // The revocation time (the first one stands: a second revocation is answered as done, and
  // audited), or false for no such hash.
  tgKeyRevoke: audited({ keys: 1, lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local at = redis.call('HGET', KEYS[1], 'ra')
if at then audited() return at end
redis.call('HSET', KEYS[1], 'ra', ARGV[1])
audited()
return ARGV[1]` }),
  tgKeyTouch: { keys: 1, lua: `
local lu = redis.call('HMGET', KEYS[1], 'account', 'lu')
if lu[1] == false then return 0 end
local was = tonumber(lu[2] or '')
if was == nil or was < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'lu', ARGV[1]) end
return 1` },
  // ---- teams (./teams.ts): a team's fields live in its account's hash, t:<id>:<member> ----
  // 1 created, 0 no account, -1 the account has the team already. ARGV[3..]: member, value pairs.
  tgTeamCreate: audited({ keys: 1, lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local p = 't:' .. ARGV[1] .. ':'
if redis.call('HEXISTS', KEYS[1], p .. 'c') == 1 then return -1 end
local f = {p .. 'c', ARGV[2], p .. 'sp', 'n', p .. 'su', '0'}
for i = 3, #ARGV, 2 do f[#f + 1] = p .. ARGV[i]; f[#f + 1] = ARGV[i + 1] end
redis.call('HSET', KEYS[1], unpack(f))
audited()
return 1` }),
  // ARGV[2] member/value pairs to set (ARGV[3..]), then members to delete; the team's fields
  // after the change ({member, value, ...}), or nil when the account has no such team.
  tgTeamPatch: audited({ keys: 1, lua: `
local p = 't:' .. ARGV[1] .. ':'
if redis.call('HEXISTS', KEYS[1], p .. 'c') == 0 then return false end
audited()
local last = 2 + 2 * tonumber(ARGV[2])
local f = {}
for i = 3, last, 2 do f[#f + 1] = p .. ARGV[i]; f[#f + 1] = ARGV[i + 1] end
if #f > 0 then redis.call('HSET', KEYS[1], unpack(f)) end
local d = {}
for i = last + 1, #ARGV do d[#d + 1] = p .. ARGV[i] end
if #d > 0 then redis.call('HDEL', KEYS[1], unpack(d)) end
local names = {'c', 'n', 'm', 'rpm', 'tpm', 'mc', 'bu', 'bp', 'sp', 'su', 'mt'}
local out = {}
for _, n in ipairs(names) do
  local v = redis.call('HGET', KEYS[1], p .. n)
  if v then out[#out + 1] = n; out[#out + 1] = v end
end
return out` }),
  // Marks a team as being deleted (ARGV[2] '1'; keys can no longer be given it) or unmarks it
  // ('0'); 0 when the account has no such team.
  tgTeamMark: { keys: 1, lua: `
local p = 't:' .. ARGV[1] .. ':'
if redis.call('HEXISTS', KEYS[1], p .. 'c') == 0 then return 0 end
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], p .. 'del', '1') else redis.call('HDEL', KEYS[1], p .. 'del') end
return 1` },
  // Deletes a team's fields (the account's own fields keep its hash from emptying).
  tgTeamDrop: audited({ keys: 1, lua: `
local p = 't:' .. ARGV[1] .. ':'
audited()
return redis.call('HDEL', KEYS[1], p .. 'c', p .. 'n', p .. 'm', p .. 'rpm', p .. 'tpm', p .. 'mc', p .. 'bu', p .. 'bp', p .. 'sp', p .. 'su', p .. 'mt', p .. 'del')` }),
  // The team id's index, P{team:ID} = "<ms>|<account>": set to ARGV[1] when it holds ARGV[2]
  // ('' for absent): 1; else its value.
  tgTeamClaim: { keys: 1, lua: `
local cur = redis.call('GET', KEYS[1])
if (cur or '') == ARGV[2] then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
return cur` },
  // Deletes the index while it names account ARGV[1].
  tgTeamUnclaim: { keys: 1, lua: `
local cur = redis.call('GET', KEYS[1])
local bar = cur and string.find(cur, '|', 1, true)
if bar and string.sub(cur, bar + 1) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0` },
  // 1 newly revoked, 0 already (answered as done: audited either way).
  tgRevokeSession: audited({ keys: 1, lua: `
audited()
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0` }),
};
