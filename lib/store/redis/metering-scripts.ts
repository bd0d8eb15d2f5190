// The Lua of the Redis store's metering (./metering.ts, whose header gives the key layout and
// the atomicity of each script): hold, settle, unsettle, release and the account's usage, each
// over keys of one account's hash tag, registered by RedisStore (./store.ts) with defineCommand.

type Reply = Promise<unknown>;

/** The metering scripts, registered by RedisStore with defineCommand. */
export interface MeteringScripts {
  tgHold(acct: string, holds: string, day: string, month: string, key: string,
    requestId: string, units: string, expiresAt: string, now: string, rpd: string, tpd: string, upm: string, keepMs: string,
    keyId: string, dpid: string, wpid: string, mpid: string, keepUntil: string): Reply;
  tgSettle(acct: string, holds: string, settled: string, settledAt: string, day: string, month: string, key: string,
    requestId: string, units: string, tokens: string, now: string, settledWindowMs: string, settledTtlMs: string,
    keyId: string, dpid: string, wpid: string, mpid: string, team: string): Reply;
  tgUnsettle(acct: string, settled: string, settledAt: string, day: string, month: string, key: string,
    requestId: string, tokens: string, settledTtlMs: string, keyId: string, dpid: string, wpid: string, mpid: string, team: string): Reply;
  tgAccountUsage(holds: string, day: string, month: string, now: string): Reply;
  tgRelease(holds: string, requestId: string): Reply;
}

/**
 * The holds hash maps each open hold's request id to "units:expires[:key id]", and keeps beside
 * them, in reserved fields (request ids never begin with '#'), the sums over the holds it holds:
 * '#u' their units, '#n' their number, '#k:<key id>' the units held with each developer key, and
 * '#e' a time at or before every hold's expiry (and '#x', not a sum: the latest time a hold
 * asked the key to live to, which the rebuild keeps). Every script that adds or removes a hold
 * updates them (HINCRBY: integers Redis computes, no digit lost). While now < '#e' no hold has
 * expired, and the sums are the open holds': a hold or a settle costs the same however many
 * holds the account has open. Once now reaches '#e' (or on a hash written before the sums) the
 * hash is read whole, its expired holds dropped and the sums made again (rebuild): about once
 * per hold lifetime, not twice per request. The sums are written before any deletion, so the
 * hash never empties: on a cluster, while the slot migrates, a script that touches a key it
 * emptied (deleted) fails right there, with its earlier writes applied. Every key a script
 * touches exists when it starts (Redis answers TRYAGAIN or ASK otherwise).
 * holdsOf returns the units held, the number of holds, the units held with keyId, '#e',
 * whether there is no hash at all (then it writes nothing: a settle makes no key), the units
 * held with teamId, the hold of request `id` (false for none) and '#x' (tgHold: the latest
 * time a hold asked the key to live to), read in the same HMGET as the sums (after the expired
 * holds were dropped, when they were).
 * dropHold removes one hold, whose value is v, and its part of the sums (unsum). A hold of 0
 * units adds nothing to the units' sums (Redis takes no '-0').
 */
const OPEN_HOLDS = `
local NEVER = '9007199254740991'
-- Units and expiry as this store writes them (a safe integer's decimal digits, no leading zero):
-- anything else is unreadable, and never reaches HINCRBY.
local function canonical(d)
  return d ~= nil and #d <= 16 and (d == '0' or string.sub(d, 1, 1) ~= '0')
end
-- "units:expires[:key id[<tab>team id]]": a hold made with a key of a team names the team too.
local function parseHold(v)
  local u, e, k, t = string.match(v, '^(%d+):(%d+):?([^\t]*)\t?(.*)$')
  if not canonical(u) or not canonical(e) then return nil end
  return u, e, k, t
end
local function hdelAll(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end
local function rebuild(key, now)
  local h = redis.call('HGETALL', key)
  if #h == 0 then return end
  local drop, sums, earliest = {}, {}, nil
  -- '#e' 0 until the sums are whole: a rebuild cut short is made again, never trusted.
  redis.call('HSET', key, '#u', '0', '#n', '0', '#e', '0')
  for i = 1, #h, 2 do
    local p = string.sub(h[i], 1, 3)
    if p == '#k:' or p == '#t:' then sums[#sums + 1] = h[i] end
  end
  hdelAll(key, sums)
  for i = 1, #h, 2 do
    local f = h[i]
    if string.sub(f, 1, 1) ~= '#' then
      local u, e, k, t = parseHold(h[i + 1])
      if u == nil or tonumber(e) <= now then
        drop[#drop + 1] = f
      else
        redis.call('HINCRBY', key, '#n', '1')
        if u ~= '0' then
          redis.call('HINCRBY', key, '#u', u)
          if k ~= '' then redis.call('HINCRBY', key, '#k:' .. k, u) end
          if t ~= '' then redis.call('HINCRBY', key, '#t:' .. t, u) end
        end
        if earliest == nil or tonumber(e) < tonumber(earliest) then earliest = e end
      end
    end
  end
  redis.call('HSET', key, '#e', earliest or NEVER)
  hdelAll(key, drop)
end
local function holdsOf(key, now, keyId, teamId, id)
  local s = redis.call('HMGET', key, '#u', '#n', '#e', '#k:' .. keyId, '#t:' .. teamId, id, '#x')
  if s[1] == false or s[2] == false or s[3] == false or now >= tonumber(s[3]) then
    rebuild(key, now)
    s = redis.call('HMGET', key, '#u', '#n', '#e', '#k:' .. keyId, '#t:' .. teamId, id, '#x')
    -- No hash (no hold, or its key expired): nothing held, and nothing written.
    if s[3] == false then return 0, 0, 0, NEVER, true, 0, false, false end
  end
  local keyHeld, teamHeld = 0, 0
  if keyId ~= '' and s[4] ~= false then keyHeld = tonumber(s[4]) end
  if teamId ~= '' and s[5] ~= false then teamHeld = tonumber(s[5]) end
  return tonumber(s[1]), tonumber(s[2]), keyHeld, s[3], false, teamHeld, s[6], s[7]
end
local function unsum(key, u, k, t)
  redis.call('HINCRBY', key, '#n', '-1')
  if u == '0' then return end
  redis.call('HINCRBY', key, '#u', '-' .. u)
  if k ~= '' and redis.call('HINCRBY', key, '#k:' .. k, '-' .. u) == 0 then redis.call('HDEL', key, '#k:' .. k) end
  if t ~= nil and t ~= '' and redis.call('HINCRBY', key, '#t:' .. t, '-' .. u) == 0 then redis.call('HDEL', key, '#t:' .. t) end
end
-- Takes the hold whose value is v out of the sums; an unreadable one was never in them, but has
-- the sums made again (its value is not this store's writing).
local function forget(key, v)
  local u, _, k, t = parseHold(v)
  if u == nil then redis.call('HSET', key, '#e', '0') else unsum(key, u, k, t) end
end
local function dropHold(key, id, v)
  forget(key, v)
  redis.call('HDEL', key, id)
end
-- The budget state of a key hash: {units or false, period or false, spent in pid, pid, exists,
-- stored period}. With a prefix (t:<team id>:), of a team in its account's hash (./teams.ts),
-- whose existence is its field c. budgetFrom: the same of the fields read already, in the
-- order budgetOf reads them (bu, bp, sp, su, then account or c).
local function budgetFrom(b, dpid, wpid, mpid)
  local pid = 'n'
  if b[2] == 'day' then pid = dpid elseif b[2] == 'week' then pid = wpid elseif b[2] == 'month' then pid = mpid end
  local spent = 0
  if b[3] == pid then spent = tonumber(b[4] or '0') end
  return b[1], b[2], spent, pid, b[5] ~= false, b[3]
end
local function budgetOf(key, dpid, wpid, mpid, prefix)
  if prefix == nil then
    return budgetFrom(redis.call('HMGET', key, 'bu', 'bp', 'sp', 'su', 'account'), dpid, wpid, mpid)
  end
  return budgetFrom(redis.call('HMGET', key, prefix .. 'bu', prefix .. 'bp', prefix .. 'sp', prefix .. 'su', prefix .. 'c'), dpid, wpid, mpid)
end
-- Adds a settled charge to a budget's spend in period pid (the rule of addSpend in ../rules.ts).
local function addSpend(key, prefix, sp, pid, charged)
  if sp == pid then
    redis.call('HINCRBY', key, prefix .. 'su', charged)
  elseif not (sp ~= false and string.sub(sp, 1, 1) == string.sub(pid, 1, 1) and sp > pid) then
    redis.call('HSET', key, prefix .. 'sp', pid, prefix .. 'su', charged)
  end
end
`;

export const METERING_SCRIPTS: Record<keyof MeteringScripts, { keys: number; lua: string }> = {
  // nil: no account; {1, '', available after} or {0, code, available[, budget left, period]}. A
  // hold of the same request id that is still open is replaced (it counts neither against the
  // balance nor the quota). Quota arguments are '' for unlimited. Order as in the memory store:
  // quotas, then the key's budget, then credits. Expired holds are dropped either way (see
  // OPEN_HOLDS).
  tgHold: { keys: 5, lua: `${OPEN_HOLDS}
local bal = redis.call('HGET', KEYS[1], 'balance_units')
if bal == false then return false end
local units = tonumber(ARGV[2])
-- With a key: its hash's fields this script reads, in one HMGET (nothing here writes them
-- before the last use at the end): its team, its budget (as budgetOf reads it), its last use.
-- The team the key names now, when its account has it (its fields are in the account's hash,
-- read as budgetOf reads them: its budget, then its field c, there while the team is).
local team, kb, tb = '', nil, nil
if ARGV[9] ~= '' then
  kb = redis.call('HMGET', KEYS[5], 'bu', 'bp', 'sp', 'su', 'account', 'lu', 'tm')
  local tm = kb[7]
  if tm then
    local p = 't:' .. tm .. ':'
    tb = redis.call('HMGET', KEYS[1], p .. 'bu', p .. 'bp', p .. 'sp', p .. 'su', p .. 'c')
    if tb[5] ~= false then team = tm end
  end
end
local held, open, keyHeld, earliest, fresh, teamHeld, prev, keep = holdsOf(KEYS[2], tonumber(ARGV[4]), ARGV[9], team, ARGV[1])
local pu, pk, pt
if prev ~= false then
  local _
  pu, _, pk, pt = parseHold(prev)
  if pu ~= nil then
    held = held - tonumber(pu)
    open = open - 1
    if ARGV[9] ~= '' and pk == ARGV[9] then keyHeld = keyHeld - tonumber(pu) end
    if team ~= '' and pt == team then teamHeld = teamHeld - tonumber(pu) end
  end
end
local available = tonumber(bal) - held
local function used(key, field) return tonumber(redis.call('HGET', key, field) or '0') end
local refused, remaining, period, scope
if ARGV[5] ~= '' and used(KEYS[3], 'requests') + open >= tonumber(ARGV[5]) then refused = 'requests_per_day'
elseif ARGV[6] ~= '' and used(KEYS[3], 'tokens') >= tonumber(ARGV[6]) then refused = 'tokens_per_day'
elseif ARGV[7] ~= '' and used(KEYS[4], 'units') >= tonumber(ARGV[7]) then refused = 'units_per_month' end
-- A budget (the key's, then its team's) refuses when what it has left beside its open holds is
-- less than this hold.
local function budget(bu, bp, spent, heldBy, sc)
  if bu == false then return end
  local left = tonumber(bu) - spent - heldBy
  if left < units then
    if left < 0 then left = 0 end
    refused, remaining, period, scope = 'budget_exceeded', left, bp or '', sc
  end
end
if refused == nil and ARGV[9] ~= '' then
  local bu, bp, spent = budgetFrom(kb, ARGV[10], ARGV[11], ARGV[12])
  budget(bu, bp, spent, keyHeld, 'key')
end
if refused == nil and team ~= '' then
  local bu, bp, spent = budgetFrom(tb, ARGV[10], ARGV[11], ARGV[12])
  budget(bu, bp, spent, teamHeld, 'team')
end
if refused == nil and available < units then refused = 'insufficient_credits' end
if refused then
  if refused == 'budget_exceeded' then return {0, refused, available, remaining, period, scope} end
  return {0, refused, available}
end
if prev ~= false then forget(KEYS[2], prev) end
local tag = ''
if ARGV[9] ~= '' then tag = ':' .. ARGV[9] end
if team ~= '' then tag = tag .. '\t' .. team end
-- The hold, and in the same HSET: the sums of a new hash, '#e' when this hold expires first,
-- and '#x' when it asks the key to live longer than any hold did (see the key's expiry below).
local f = {ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. tag}
if fresh then f[3], f[4], f[5], f[6] = '#u', '0', '#n', '0' end
if tonumber(ARGV[3]) < tonumber(earliest) then f[#f + 1] = '#e'; f[#f + 1] = ARGV[3] end
local extend = keep == false or tonumber(ARGV[13]) > tonumber(keep)
if extend then f[#f + 1] = '#x'; f[#f + 1] = ARGV[13] end
redis.call('HSET', KEYS[2], unpack(f))
redis.call('HINCRBY', KEYS[2], '#n', '1')
if ARGV[2] ~= '0' then
  redis.call('HINCRBY', KEYS[2], '#u', ARGV[2])
  if ARGV[9] ~= '' then redis.call('HINCRBY', KEYS[2], '#k:' .. ARGV[9], ARGV[2]) end
  if team ~= '' then redis.call('HINCRBY', KEYS[2], '#t:' .. team, ARGV[2]) end
end
-- The key outlives its longest hold by a minute (ARGV[8] ms from now), never shortened: '#x' is
-- the latest such time a hold asked for (ARGV[13], the gateways' clock, read with the sums), so
-- only a hold that asks for later sets the expiry (no PTTL to read it first).
if extend then redis.call('PEXPIRE', KEYS[2], ARGV[8]) end
-- The key's last use, as tgKeyTouch records it (a later time only ever wins; a key with no
-- hash of its own, from before per-key controls, gets none; an unreadable time is replaced,
-- never an error after the hold is written): a held request needs no touch.
if ARGV[9] ~= '' then
  local was = tonumber(kb[6] or '')
  if kb[5] ~= false and (was == nil or was < tonumber(ARGV[4])) then redis.call('HSET', KEYS[5], 'lu', ARGV[4]) end
end
return {1, team, available - units}` },

  // nil: no account; {applied, charged, balance, available}, and after an applied settlement
  // with a key its budget and spend (bu, bp, sp, su), then its team's when there is one (see
  // the end of the script). The charge is min(units, balance),
  // and nothing when the balance is not positive; it is kept as a string Redis or the caller
  // wrote, so no digit is lost. A repeat (applied 0) writes nothing but the holds' upkeep (see
  // OPEN_HOLDS). With a key (ARGV[7]), the charge is also capped at what its budget has left in
  // the period of the hold, and added to the key's spend in the same step (see addSpend in
  // ../rules.ts). Deletions come last: the request's hold, then settled ids past an hour (never
  // this one, just added), at most 100 per settlement (expired holds are dropped first, when
  // the sums are made again: OPEN_HOLDS). The settled index is scored by Redis's own clock
  // (TIME), not the gateway's: a gateway whose clock runs ahead must not prune the ids other
  // instances just settled (ARGV[5] is the window, in ms).
  tgSettle: { keys: 7, lua: `${OPEN_HOLDS}
local WINDOW_TTL = {'3456000', '34560000'}
local bal = redis.call('HGET', KEYS[1], 'balance_units')
if bal == false then return false end
local charged = redis.call('HGET', KEYS[3], ARGV[1])
-- Undone (tgUnsettle): a settlement arriving after that applies nothing, and debited nothing.
if charged == 'x' then charged = '0' end
local applied = 0
if charged == false then applied = 1 end
local held, _, _, _, _, _, own = holdsOf(KEYS[2], tonumber(ARGV[4]), '', '', ARGV[1])
if applied == 0 then own = false end
if own ~= false then
  local ou = parseHold(own)
  if ou ~= nil then held = held - tonumber(ou) end
end
-- The team the hold counted against (ARGV[11]), while its account still has it (texists).
local tprefix, texists = 't:' .. ARGV[11] .. ':', false
if applied == 1 then
  local b, u, ustr = tonumber(bal), tonumber(ARGV[2]), ARGV[2]
  -- The charge is capped at what a budget (the key's, then its team's) has left in the period.
  local function cap(bu, spent)
    local left = tonumber(bu) - spent
    if left < 0 then left = 0 end
    if left < u then u, ustr = left, string.format('%d', left) end
  end
  local bu, spent, pid, exists, sp = false, 0, nil, false, false
  if ARGV[7] ~= '' then
    local _
    bu, _, spent, pid, exists, sp = budgetOf(KEYS[7], ARGV[8], ARGV[9], ARGV[10])
    if bu ~= false then cap(bu, spent) end
  end
  local tpid, tsp = nil, false
  if ARGV[7] ~= '' and ARGV[11] ~= '' then
    local tbu, tspent, _
    tbu, _, tspent, tpid, texists, tsp = budgetOf(KEYS[1], ARGV[8], ARGV[9], ARGV[10], tprefix)
    if tbu ~= false and texists then cap(tbu, tspent) end
  end
  if b <= 0 or u == 0 then
    charged = '0'
  elseif b <= u then
    charged = bal
    bal = '0'
    redis.call('HSET', KEYS[1], 'balance_units', '0')
  else
    charged = ustr
    bal = redis.call('HINCRBY', KEYS[1], 'balance_units', '-' .. ustr)
  end
  if exists then addSpend(KEYS[7], '', sp, pid, charged) end
  if texists then addSpend(KEYS[1], tprefix, tsp, tpid, charged) end
  -- A window's expiry is set by the settlement that makes it (its first request): 40 days
  -- (a month's 400) from the window's first settlement, not from each one.
  for i, key in ipairs({KEYS[5], KEYS[6]}) do
    if redis.call('HINCRBY', key, 'requests', '1') == 1 then redis.call('EXPIRE', key, WINDOW_TTL[i]) end
    redis.call('HINCRBY', key, 'tokens', ARGV[3])
    redis.call('HINCRBY', key, 'units', charged)
  end
  local clock = redis.call('TIME')
  local serverMs = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  redis.call('HSET', KEYS[3], ARGV[1], charged)
  redis.call('ZADD', KEYS[4], serverMs, ARGV[1])
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  if own ~= false then dropHold(KEYS[2], ARGV[1], own) end
  local old = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. (serverMs - tonumber(ARGV[5])), 'LIMIT', '0', '100')
  if #old > 0 then
    redis.call('HDEL', KEYS[3], unpack(old))
    redis.call('ZREM', KEYS[4], unpack(old))
  end
end
-- With a key, after an applied settlement: its budget and spend now, then its team's ('' where
-- there is none), read here at no extra round trip (alerts detect crossings).
if applied == 1 and ARGV[7] ~= '' then
  local r = {applied, tonumber(charged), tonumber(bal), tonumber(bal) - held}
  local kb = redis.call('HMGET', KEYS[7], 'bu', 'bp', 'sp', 'su')
  if kb[3] then
    r[5], r[6], r[7], r[8] = kb[1] or '', kb[2] or '', kb[3], kb[4] or '0'
  else
    r[5], r[6], r[7], r[8] = '', '', '', ''
  end
  if texists then
    local tb = redis.call('HMGET', KEYS[1], tprefix .. 'bu', tprefix .. 'bp', tprefix .. 'sp', tprefix .. 'su')
    if tb[3] then r[9], r[10], r[11], r[12] = tb[1] or '', tb[2] or '', tb[3], tb[4] or '0' end
  end
  if #r > 4 then return r end
end
return {applied, tonumber(charged), tonumber(bal), tonumber(bal) - held}` },

  // nil: no account; {outcome, refunded}: 2 the settlement had landed and is given back
  // (balance, both windows, the key's spend when still in the same period), 1 it had not and
  // is fenced, 0 undone before. Either way the id's settled entry becomes 'x', so a
  // settlement that still arrives (one a stalled Redis runs late, or one sent on a connection
  // lost since) applies nothing: tgSettle reads 'x' as settled with 0. A fence is indexed and
  // aged like a settlement (ARGV[3]: the keys' TTL). Holds are left to tgRelease. Nothing is
  // added or taken at 0 (Redis takes no '-0').
  tgUnsettle: { keys: 6, lua: `${OPEN_HOLDS}
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local charged = redis.call('HGET', KEYS[2], ARGV[1])
if charged == 'x' then return {0, 0} end
if charged == false then
  local clock = redis.call('TIME')
  redis.call('HSET', KEYS[2], ARGV[1], 'x')
  redis.call('ZADD', KEYS[3], tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000), ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  return {1, 0}
end
if charged ~= '0' then redis.call('HINCRBY', KEYS[1], 'balance_units', charged) end
for _, key in ipairs({KEYS[4], KEYS[5]}) do
  redis.call('HINCRBY', key, 'requests', '-1')
  if ARGV[2] ~= '0' then redis.call('HINCRBY', key, 'tokens', '-' .. ARGV[2]) end
  if charged ~= '0' then redis.call('HINCRBY', key, 'units', '-' .. charged) end
end
if ARGV[4] ~= '' and charged ~= '0' then
  local _, _, _, pid, exists, sp = budgetOf(KEYS[6], ARGV[5], ARGV[6], ARGV[7])
  if exists and sp == pid then redis.call('HINCRBY', KEYS[6], 'su', '-' .. charged) end
  if ARGV[8] ~= '' then
    local tprefix = 't:' .. ARGV[8] .. ':'
    local _, _, _, tpid, texists, tsp = budgetOf(KEYS[1], ARGV[5], ARGV[6], ARGV[7], tprefix)
    if texists and tsp == tpid then redis.call('HINCRBY', KEYS[1], tprefix .. 'su', '-' .. charged) end
  end
end
redis.call('HSET', KEYS[2], ARGV[1], 'x')
return {2, tonumber(charged)}` },

  // 1 when the request's hold was there (and is dropped), else 0. Always a write, even with no
  // hold to drop: on a replica (a demoted primary a connection still reaches mid-failover) the
  // script must fail with READONLY, so that the release is retried on the primary, and never
  // answer 0 from a replica's copy that does not have the hold yet.
  tgRelease: { keys: 1, lua: `${OPEN_HOLDS}
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v == false then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
if redis.call('HEXISTS', KEYS[1], '#e') == 1 then
  dropHold(KEYS[1], ARGV[1], v)
else
  redis.call('HDEL', KEYS[1], ARGV[1]) -- a hash written before the sums: summed when next read
end
return 1` },

  // {held, day requests, tokens, units, month requests, tokens, units}; reads only.
  tgAccountUsage: { keys: 3, lua: `${OPEN_HOLDS}
local held = 0
local s = redis.call('HMGET', KEYS[1], '#u', '#e')
if s[1] ~= false and s[2] ~= false and tonumber(ARGV[1]) < tonumber(s[2]) then
  held = tonumber(s[1])
else
  local h = redis.call('HGETALL', KEYS[1])
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 1) ~= '#' then
      local u, e = parseHold(h[i + 1])
      if u ~= nil and tonumber(e) > tonumber(ARGV[1]) then held = held + tonumber(u) end
    end
  end
end
local d = redis.call('HMGET', KEYS[2], 'requests', 'tokens', 'units')
local m = redis.call('HMGET', KEYS[3], 'requests', 'tokens', 'units')
local r = {held}
for i = 1, 3 do r[i + 1] = tonumber(d[i] or '0') end
for i = 1, 3 do r[i + 4] = tonumber(m[i] or '0') end
return r` },
};
