// Teams in the memory store: every call of the Store interface about them, for MemoryStore
// (./store.ts), over the tables of ./tables.ts.

import { TEAM_ID, applyTeamPatch, requireId, toTeamSettings } from '../rules.js';
import type { AuditEvent, TeamCreated, TeamDeleted, TeamPatch, TeamRecord, TeamSettings } from '../types.js';
import type { MemoryHost, MemoryTables } from './tables.js';

export class MemoryTeams {
  readonly #t: MemoryTables;
  readonly #host: MemoryHost;

  constructor(tables: MemoryTables, host: MemoryHost) {
    this.#t = tables;
    this.#host = host;
  }

  async createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated> {
    await this.#host.begin();
    requireId('account id', account);
    if (typeof id !== 'string' || !TEAM_ID.test(id)) throw new TypeError('team id must match TEAM_ID');
    if (toTeamSettings(settings) === null) throw new TypeError('team settings are malformed');
    let outcome: TeamCreated = 'created';
    if (!this.#t.accounts.has(account)) outcome = 'account_not_found';
    else if (this.#t.teams.has(id)) outcome = 'team_exists';
    if (outcome !== 'created') {
      await this.#host.settled();
      return outcome;
    }
    await this.#host.change({ op: 'team', id, account, created_at: Date.now(), settings: structuredClone(settings) }, audit);
    return outcome;
  }

  async getTeam(id: string): Promise<TeamRecord | undefined> {
    await this.#host.begin();
    const t = this.#t.teams.get(id);
    const copy = t === undefined ? undefined : structuredClone(t);
    await this.#host.settled();
    return copy;
  }

  async listTeams(account: string): Promise<TeamRecord[] | undefined> {
    await this.#host.begin();
    const list = this.#t.accounts.has(account)
      ? [...this.#t.accountTeams.get(account) ?? []].map((id) => structuredClone(this.#t.teams.get(id)!)).sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1))
      : undefined;
    await this.#host.settled();
    return list;
  }

  async updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined> {
    await this.#host.begin();
    const team = this.#t.teams.get(id);
    if (team === undefined) {
      await this.#host.settled();
      return undefined;
    }
    const { id: _id, account: _a, created_at: _c, spent: _s, ...current } = team;
    const settings = applyTeamPatch(current, patch);
    const written = this.#host.change({ op: 'teamupdate', id, settings }, audit);
    const copy = structuredClone(team);
    // The team's keys' cached principals carry its limits and models: drop them everywhere.
    for (const k of this.#t.teamKeys(team.account, id)) this.#host.notifyKey(k, 'key-changed');
    await written;
    return copy;
  }

  async deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted> {
    await this.#host.begin();
    const team = this.#t.teams.get(id);
    let outcome: TeamDeleted = 'deleted';
    if (team === undefined) outcome = 'not_found';
    else if (this.#t.teamKeys(team.account, id).length > 0) outcome = 'in_use';
    if (outcome !== 'deleted') {
      await this.#host.settled();
      return outcome;
    }
    await this.#host.change({ op: 'teamdelete', id }, audit);
    return outcome;
  }
}
