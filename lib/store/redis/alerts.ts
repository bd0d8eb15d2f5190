// The alerts outbox in Redis (../alerts.ts). Every key but the wallet flags shares the one hash
// tag {alerts}, so each script stays atomic on a Cluster (alerts are rare: one slot holds them):
//   P{alerts}:e:ID      hash    ev (the event, JSON), seq, d:URL (one webhook's delivery, JSON);
//                               expires ALERT_KEEP_MS after it was appended
//   P{alerts}:seq       string  the last sequence number given (list order: newest first)
//   P{alerts}:log       zset    event ids scored by seq (trimmed to the newest LOG_MAX)
//   P{alerts}:due       zset    ids of events with a pending delivery, scored by the earliest next_at
//   P{alerts}:due:H     zset    per webhook (H: a hash of its URL), ids of events whose delivery to
//                               it is pending, scored by that delivery's next_at (its lane reads it)
//   P{alerts}:l:ID      string  an event's delivery lease: its owner, with a PX expiry (SET NX PX)
//   P{alerts}:l:ID:H    string  the lease of its delivery to one webhook (what the lanes take)
//   P{alerts}:exp       zset    "ACCOUNT\0KEY_ID" scored by the key's expires_at (kept by
//                               createKey/updateKey; read back against the key itself)
//   P{acct:ID}:walarm   string  '0' while the account's wallet.low alert is disarmed (absent: armed)

import { createHash } from 'node:crypto';
import type { RedisClient } from './connect.js';
import {
  ALERT_KEEP_MS, alertCursor, fromAlertCursor, isDelivery, type AlertDelivery, type AlertEvent, type AlertOutbox, type AlertPage, type ExpiringKey,
  type StoredAlert,
} from '../alerts.js';
import type { KeyRecord } from '../types.js';

/** The log keeps this many newest ids; older events are also gone with their hash's expiry. */
const LOG_MAX = 100_000;

export interface AlertScripts {
  /** Called with its count of keys first (one due set per webhook). */
  tgAlertAppend(numberOfKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
  tgAlertUpdate(e: string, due: string, hookDue: string, id: string, field: string, delivery: string): Promise<unknown>;
  tgAlertLease(lease: string, owner: string, ttl: string): Promise<unknown>;
  tgAlertUnlease(lease: string, owner: string): Promise<unknown>;
  tgWalletArm(flag: string, armed: string): Promise<unknown>;
}

/** The scripts called with their count of keys first. */
export const ALERT_KEYED_SCRIPTS: Record<'tgAlertAppend', { lua: string }> = {
  // 1 appended, 0 there already (nothing changed). ARGV[6..]: delivery JSONs, each pending and
  // due at ARGV[3]; the field is d: + its webhook (decoded here to name it); KEYS[5..]: each
  // one's webhook due set, in the same order, where it is scored a fraction of a millisecond
  // before ARGV[3] by its sequence number, so that a lane takes events appended within one
  // millisecond in the order they were (equal scores would order them by id).
  tgAlertAppend: { lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'ev', ARGV[2], 'seq', seq)
local first = string.format('%.4f', tonumber(ARGV[3]) - 1 + (seq % 1024 + 1) / 1024)
for i = 6, #ARGV do
  local d = cjson.decode(ARGV[i])
  redis.call('HSET', KEYS[1], 'd:' .. d.webhook, ARGV[i])
  redis.call('ZADD', KEYS[i - 1], first, ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[3], seq, ARGV[1])
if #ARGV >= 6 then redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1]) end
local n = redis.call('ZCARD', KEYS[3])
if n > tonumber(ARGV[5]) then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, n - tonumber(ARGV[5]) - 1) end
return 1` },
};

export const ALERT_SCRIPTS: Record<Exclude<keyof AlertScripts, 'tgAlertAppend'>, { keys: number; lua: string }> = {
  // Sets one delivery (when the event is still there), then the event's place in its webhook's
  // due set (its next_at while pending) and in the due set: the earliest next_at of its pending
  // deliveries, or out of it when none is pending.
  tgAlertUpdate: { keys: 3, lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 0
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
local mine = cjson.decode(ARGV[3])
if mine.state == 'pending' then
  redis.call('ZADD', KEYS[3], string.format('%d', mine.next_at), ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
local all = redis.call('HGETALL', KEYS[1])
local soonest = nil
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'd:' then
    local d = cjson.decode(all[i + 1])
    if d.state == 'pending' and (soonest == nil or d.next_at < soonest) then soonest = d.next_at end
  end
end
if soonest == nil then redis.call('ZREM', KEYS[2], ARGV[1]) else redis.call('ZADD', KEYS[2], string.format('%d', soonest), ARGV[1]) end
return 1` },
  // 1: the caller holds the lease now (taken, or its own extended); 0: another owner's.
  tgAlertLease: { keys: 1, lua: `
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0` },
  tgAlertUnlease: { keys: 1, lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0` },
  // The flag before (1 armed, 0 disarmed), then set to ARGV[1].
  tgWalletArm: { keys: 1, lua: `
local was = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], '0') end
if was == '0' then return 0 end
return 1` },
};

export class RedisAlerts implements AlertOutbox {
  readonly #redis: RedisClient & AlertScripts;
  readonly #p: string;
  readonly #prefix: string;
  readonly #getKey: (id: string) => Promise<KeyRecord | undefined>;

  constructor(redis: RedisClient & AlertScripts, prefix: string, getKey: (id: string) => Promise<KeyRecord | undefined>) {
    this.#redis = redis;
    this.#p = `${prefix}{alerts}`;
    this.#prefix = prefix;
    this.#getKey = getKey;
  }

  async append(event: AlertEvent, webhooks: readonly string[], now: number): Promise<boolean> {
    const deliveries = webhooks.map((webhook): string => JSON.stringify({ webhook, state: 'pending', attempts: 0, last_status: null, next_at: now } satisfies AlertDelivery));
    const keys = [this.#e(event.id), `${this.#p}:seq`, `${this.#p}:log`, `${this.#p}:due`, ...webhooks.map((w) => this.#hookDue(w))];
    const r = await this.#redis.tgAlertAppend(keys.length, ...keys,
      event.id, JSON.stringify(event), String(now), String(ALERT_KEEP_MS), String(LOG_MAX), ...deliveries);
    return r === 1;
  }

  async due(now: number, limit: number, webhook?: string): Promise<string[]> {
    const set = webhook === undefined ? `${this.#p}:due` : this.#hookDue(webhook);
    return this.#redis.zrangebyscore(set, '-inf', String(now), 'LIMIT', 0, limit);
  }

  async get(id: string): Promise<StoredAlert | undefined> {
    return parseAlert(await this.#redis.hgetall(this.#e(id)));
  }

  async lease(id: string, owner: string, ttlMs: number, _now: number, webhook?: string): Promise<boolean> {
    return (await this.#redis.tgAlertLease(this.#lease(id, webhook), owner, String(Math.max(1, Math.ceil(ttlMs))))) === 1;
  }

  async unlease(id: string, owner: string, webhook?: string): Promise<void> {
    await this.#redis.tgAlertUnlease(this.#lease(id, webhook), owner);
  }

  async update(id: string, delivery: AlertDelivery): Promise<void> {
    await this.#redis.tgAlertUpdate(this.#e(id), `${this.#p}:due`, this.#hookDue(delivery.webhook), id, `d:${delivery.webhook}`, JSON.stringify(delivery));
  }

  async list(limit: number, cursor?: string): Promise<AlertPage> {
    const before = cursor === undefined ? undefined : fromAlertCursor(cursor);
    let top = before === undefined ? '+inf' : `(${before}`;
    let last = 0;
    const alerts: StoredAlert[] = [];
    // Ids whose events expired are skipped: more are read until the page is full.
    while (alerts.length < limit) {
      const want = limit - alerts.length;
      const rows = await this.#redis.zrevrangebyscore(`${this.#p}:log`, top, '-inf', 'WITHSCORES', 'LIMIT', 0, want);
      if (rows.length === 0) return { alerts, next_cursor: null };
      const pipeline = this.#redis.pipeline();
      for (let i = 0; i < rows.length; i += 2) pipeline.hgetall(this.#e(rows[i]!));
      for (const [err, row] of (await pipeline.exec()) ?? []) {
        if (err !== null) throw err;
        const a = parseAlert(row as Record<string, string>);
        if (a !== undefined) alerts.push(a);
      }
      last = Number(rows[rows.length - 1]);
      top = `(${last}`;
      if (rows.length / 2 < want) return { alerts, next_cursor: null };
    }
    const more = await this.#redis.zrevrangebyscore(`${this.#p}:log`, top, '-inf', 'LIMIT', 0, 1);
    return { alerts, next_cursor: more.length === 0 ? null : alertCursor(last) };
  }

  async armWallet(account: string, armed: boolean): Promise<boolean> {
    return (await this.#redis.tgWalletArm(`${this.#prefix}{acct:${account}}:walarm`, armed ? '1' : '0')) === 1;
  }

  async expiringKeys(from: number, until: number): Promise<ExpiringKey[]> {
    const members = await this.#redis.zrangebyscore(`${this.#p}:exp`, `(${from}`, String(until), 'LIMIT', 0, 10_000);
    const out: ExpiringKey[] = [];
    for (const m of members) {
      const id = m.slice(m.indexOf('\u0000') + 1);
      const key = await this.#getKey(id);
      const at = key?.controls.expires_at;
      if (key === undefined || key.revoked_at !== null || at === null || at === undefined || at <= from || at > until) continue;
      out.push({ id: key.id, account: key.account, expires_at: at });
    }
    return out;
  }

  /** Indexes a key's expiry for expiringKeys (the key is read back there, so a stale entry is harmless). */
  async indexExpiry(account: string, id: string, at: number | null): Promise<void> {
    const member = `${account}\u0000${id}`;
    if (at === null) await this.#redis.zrem(`${this.#p}:exp`, member);
    else await this.#redis.zadd(`${this.#p}:exp`, String(at), member);
  }

  #e(id: string): string { return `${this.#p}:e:${id}`; }

  #hookDue(webhook: string): string { return `${this.#p}:due:${hookHash(webhook)}`; }

  #lease(id: string, webhook: string | undefined): string {
    return webhook === undefined ? `${this.#p}:l:${id}` : `${this.#p}:l:${id}:${hookHash(webhook)}`;
  }
}

/** A webhook URL's short name in keys (URLs are long and may hold braces). */
function hookHash(webhook: string): string {
  return createHash('sha256').update(webhook).digest('hex').slice(0, 24);
}

function parseAlert(h: Record<string, string>): StoredAlert | undefined {
  if (h.ev === undefined) return undefined;
  let event: AlertEvent;
  try {
    event = JSON.parse(h.ev) as AlertEvent;
  } catch {
    return undefined;
  }
  const deliveries: AlertDelivery[] = [];
  for (const [field, value] of Object.entries(h)) {
    if (!field.startsWith('d:')) continue;
    try {
      const d: unknown = JSON.parse(value);
      if (isDelivery(d)) deliveries.push(d);
    } catch {
      // An unreadable delivery is left out.
    }
  }
  deliveries.sort((a, b) => (a.webhook < b.webhook ? -1 : a.webhook > b.webhook ? 1 : 0));
  return { event, deliveries };
}
