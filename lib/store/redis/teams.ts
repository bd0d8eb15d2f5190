// Teams in Redis (CONTRACT section 15), for RedisStore (./store.ts); the Lua is in ./scripts.ts.
//
// A team's fields live in its account's hash, P{acct:A}, as t:<team id>:<member> (team ids have
// no ':'): c (created at, ms: the team exists while it is there), n (name, JSON), m (models,
// JSON), rpm / tpm / mc (its limits, JSON), bu / bp (budget units / period; no bu: no budget),
// sp / su (spend: period id, units, as a key's), del (being deleted). So the metering scripts,
// which already name the account's hash, read and charge a team's budget in the same step as
// the key's and the wallet, with no key of their own, in the account's one Cluster slot; and the
// key lookup (tgKeyAndAccount) reads the team the key names with the key and its account, in
// the same round trip. A key names its team in its own hash's field tm.
//
// Team ids are unique across the gateway: P{team:ID} = "<ms>|<account>" leads an id to its
// account. Creation runs in steps: (1) the account exists; (2) the index is claimed (set if
// absent; an index naming an account without the team, left by a creation that crashed between
// its steps, is taken over once it is TAKEOVER_MS old, or at once when it names this account);
// (3) the team's fields are written if the account has no such team. Deletion: (1) the team is
// marked (tgKeyInit and tgKeyPatch refuse to give a key a marked team); (2) the account's keys
// are read: a live key naming the team unmarks it (409 team_in_use); (3) its fields go, then the
// index. A key given the team before the mark is seen by (2); none can be given it after.
// The audit event of a creation, PATCH or deletion is recorded by the script that writes the
// team's fields (creation (3), the PATCH, deletion (3)), in the account's slot (./audit.ts).

import type { RedisClient } from './connect.js';
import { outboxOf, type RedisAudit } from './audit.js';
import type { RedisKeys } from './keys.js';
import type { RedisRevocations } from './revocations.js';
import type { Scripts } from './scripts.js';
import { TEAM_ID, requireId, toTeamSettings } from '../rules.js';
import { hashOf } from './key-records.js';
import { teamFromFields } from './team-records.js';
import type { AuditEvent, KeyRecord, TeamCreated, TeamDeleted, TeamPatch, TeamRecord, TeamSettings } from '../types.js';

/** An index left by a creation that did not finish is taken over after this long. */
const TAKEOVER_MS = 10_000;

export class RedisTeams {
  readonly #redis: RedisClient & Scripts;
  readonly #prefix: string;
  readonly #keys: RedisKeys;
  readonly #revocations: RedisRevocations;
  readonly #audit: RedisAudit;

  constructor(redis: RedisClient & Scripts, prefix: string, keys: RedisKeys, revocations: RedisRevocations, audit: RedisAudit) {
    this.#redis = redis;
    this.#prefix = prefix;
    this.#keys = keys;
    this.#revocations = revocations;
    this.#audit = audit;
  }

  async createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated> {
    requireId('account id', account);
    requireTeamId(id);
    if (toTeamSettings(settings) === null) throw new TypeError('team settings are malformed');
    const acct = this.#acct(account);
    if ((await this.#redis.exists(acct)) !== 1) return 'account_not_found';
    const index = this.#index(id);
    const now = Date.now();
    const mine = `${now}|${account}`;
    let claimed = await this.#redis.tgTeamClaim(index, mine, '');
    if (claimed !== 1) {
      const cur = String(claimed);
      const bar = cur.indexOf('|');
      const owner = cur.slice(bar + 1);
      const since = Number(cur.slice(0, bar));
      if ((await this.#redis.hexists(this.#acct(owner), `t:${id}:c`)) === 1) return 'team_exists';
      // Left by a creation that did not finish: ours, or one old enough to be over.
      if (owner !== account && !(now - since > TAKEOVER_MS)) return 'team_exists';
      claimed = await this.#redis.tgTeamClaim(index, mine, cur);
      if (claimed !== 1) return 'team_exists';
    }
    const outbox = outboxOf(acct);
    const r = await this.#audit.around(outbox, audit, (event) => this.#redis.tgTeamCreate(acct, outbox, event, id, String(now), ...settingsFields(settings)));
    if (r === 1) return 'created';
    if (r === 0) {
      await this.#redis.tgTeamUnclaim(index, account);
      return 'account_not_found';
    }
    return 'team_exists';
  }

  /** The account a team id's index names, when that account has the team. */
  async #owner(id: string): Promise<string | undefined> {
    if (typeof id !== 'string' || !TEAM_ID.test(id)) return undefined;
    const cur = await this.#redis.get(this.#index(id));
    if (cur === null) return undefined;
    return cur.slice(cur.indexOf('|') + 1);
  }

  async getTeam(id: string): Promise<TeamRecord | undefined> {
    const account = await this.#owner(id);
    if (account === undefined) return undefined;
    const p = `t:${id}:`;
    const values = await this.#redis.hmget(this.#acct(account), ...MEMBERS.map((m) => p + m));
    const fields: Record<string, string> = {};
    MEMBERS.forEach((m, i) => { const v = values[i]; if (v !== null && v !== undefined) fields[m] = v; });
    return teamFromFields(id, account, fields);
  }

  async listTeams(account: string): Promise<TeamRecord[] | undefined> {
    requireId('account id', account);
    const h = await this.#redis.hgetall(this.#acct(account));
    if (h.id === undefined) return undefined;
    const byTeam = new Map<string, Record<string, string>>();
    for (const [field, value] of Object.entries(h)) {
      if (!field.startsWith('t:')) continue;
      const end = field.lastIndexOf(':');
      const id = field.slice(2, end);
      let f = byTeam.get(id);
      if (f === undefined) byTeam.set(id, (f = {}));
      f[field.slice(end + 1)] = value;
    }
    const teams: TeamRecord[] = [];
    for (const [id, f] of byTeam) {
      const t = teamFromFields(id, account, f);
      if (t !== undefined) teams.push(t);
    }
    return teams.sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1));
  }

  async updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined> {
    const { set, del } = patchFields(patch);
    const account = await this.#owner(id);
    if (account === undefined) return undefined;
    const acct = this.#acct(account);
    const outbox = outboxOf(acct);
    const reply = await this.#audit.around(outbox, audit, (event) => this.#redis.tgTeamPatch(acct, outbox, event, id, String(set.length / 2), ...set, ...del));
    if (reply === null) return undefined;
    const team = teamFromFields(id, account, hashOf(reply as string[]));
    // The team's keys' cached principals carry its limits and models: dropped on every instance
    // (the cache's TTL bounds the delay should an announcement be lost).
    for (const k of await this.#teamKeys(account, id)) await this.#announce(k);
    return team;
  }

  async deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted> {
    const account = await this.#owner(id);
    if (account === undefined) return 'not_found';
    const acct = this.#acct(account);
    if ((await this.#redis.tgTeamMark(acct, id, '1')) !== 1) return 'not_found';
    if ((await this.#teamKeys(account, id)).length > 0) {
      await this.#redis.tgTeamMark(acct, id, '0');
      return 'in_use';
    }
    const outbox = outboxOf(acct);
    await this.#audit.around(outbox, audit, (event) => this.#redis.tgTeamDrop(acct, outbox, event, id));
    await this.#redis.tgTeamUnclaim(this.#index(id), account);
    return 'deleted';
  }

  async #teamKeys(account: string, id: string): Promise<KeyRecord[]> {
    return (await this.#keys.listKeys(account) ?? []).filter((k) => k.controls.team === id);
  }

  async #announce(k: KeyRecord): Promise<void> {
    for (const digest of k.previous === null ? [k.digest] : [k.digest, k.previous.digest]) {
      await this.#redis.publish(this.#revocations.channel, this.#revocations.message({ kind: 'key-changed', digest }));
      this.#revocations.emit({ kind: 'key-changed', digest });
    }
  }

  #acct(id: string): string { return `${this.#prefix}{acct:${id}}`; }
  #index(id: string): string { return `${this.#prefix}{team:${id}}`; }
}

/** A team's members, as the suffixes of its fields. */
const MEMBERS = ['c', 'n', 'm', 'rpm', 'tpm', 'mc', 'bu', 'bp', 'sp', 'su', 'mt'] as const;

function requireTeamId(id: unknown): void {
  if (typeof id !== 'string' || !TEAM_ID.test(id)) throw new TypeError('team id must match TEAM_ID');
}

function integer(n: number, what: string): string {
  if (!Number.isSafeInteger(n)) throw new RangeError(`${what} must be a safe integer`);
  return String(n);
}

function limitJson(n: number | null | undefined, what: string): string {
  return n === null || n === undefined ? 'null' : integer(n, what);
}

/** A new team's members as the fields tgTeamCreate writes (member, value, ...). */
function settingsFields(s: TeamSettings): string[] {
  const f = ['n', JSON.stringify(s.name), 'm', JSON.stringify(s.models),
    'rpm', limitJson(s.limits.requests_per_minute, 'limits.requests_per_minute'),
    'tpm', limitJson(s.limits.tokens_per_minute, 'limits.tokens_per_minute'),
    'mc', limitJson(s.limits.max_concurrent, 'limits.max_concurrent')];
  if (s.budget !== null) f.push('bu', integer(s.budget.units, 'budget.units'), 'bp', s.budget.period ?? '');
  if (s.mcp_tools != null) f.push('mt', JSON.stringify(s.mcp_tools));
  return f;
}

/** A patch as tgTeamPatch's members to set and delete. A budget's spend (sp/su) is kept. */
function patchFields(patch: TeamPatch): { set: string[]; del: string[] } {
  const set: string[] = [];
  const del: string[] = [];
  if (patch.name !== undefined) set.push('n', JSON.stringify(patch.name));
  if (patch.models !== undefined) set.push('m', JSON.stringify(patch.models));
  if (patch.mcp_tools !== undefined) set.push('mt', JSON.stringify(patch.mcp_tools));
  const l = patch.limits;
  if (l?.requests_per_minute !== undefined) set.push('rpm', limitJson(l.requests_per_minute, 'limits.requests_per_minute'));
  if (l?.tokens_per_minute !== undefined) set.push('tpm', limitJson(l.tokens_per_minute, 'limits.tokens_per_minute'));
  if (l?.max_concurrent !== undefined) set.push('mc', limitJson(l.max_concurrent, 'limits.max_concurrent'));
  if (patch.budget === null) del.push('bu', 'bp');
  else if (patch.budget !== undefined) set.push('bu', integer(patch.budget.units, 'budget.units'), 'bp', patch.budget.period ?? '');
  return { set, del };
}
