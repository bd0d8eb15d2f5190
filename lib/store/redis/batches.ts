// Files and batches in Redis (CONTRACT section 18; the interface is ../batches.ts), shared by
// every instance on the store. One key per record (P{bf}:ID a file's record, P{bfc}:ID its
// content, P{bb}:ID a batch); sets of ids: per owner (P{bfa}:ACCOUNT, P{bba}:ACCOUNT), of all
// files (P{bfall}), of all batches (P{bball}) and of those still running (P{bactive}); sorted
// sets for the retention sweep: files by expires_at (P{bfexp}), finished batches by when they
// ended (P{bbend}); each
// batch's outcomes as a hash by line (HSETNX: the first stands) with their counts (P{bc}:ID),
// and its lease (P{blease}:ID, SET NX PX). Every command names one key, so a cluster serves it
// whatever the slots.

import type { RedisClient } from './connect.js';
import { ACTIVE_STATUSES, endedAt, type BatchRecord, type BatchStore, type FileRecord, type LineOutcome } from '../batches.js';

export class RedisBatchStore implements BatchStore {
  readonly #r: RedisClient;
  readonly #p: string;

  constructor(redis: RedisClient, prefix: string) {
    this.#r = redis;
    this.#p = prefix;
  }

  async putFile(f: FileRecord, content: Buffer): Promise<void> {
    await this.#r.set(`${this.#p}bfc:${f.id}`, content);
    await this.#r.set(`${this.#p}bf:${f.id}`, JSON.stringify(f));
    await this.#r.sadd(`${this.#p}bfa:${f.account}`, f.id);
    await this.#r.sadd(`${this.#p}bfall`, f.id);
    await this.#r.zadd(`${this.#p}bfexp`, f.expires_at, f.id);
  }

  async expiredFiles(now: number, limit: number): Promise<string[]> {
    return this.#r.zrangebyscore(`${this.#p}bfexp`, '-inf', now, 'LIMIT', 0, limit);
  }

  async endedBatches(before: number, limit: number): Promise<string[]> {
    return this.#r.zrangebyscore(`${this.#p}bbend`, '-inf', before, 'LIMIT', 0, limit);
  }

  async deleteBatch(id: string): Promise<void> {
    const b = await this.getBatch(id);
    for (const key of [`bl:${id}`, `bc:${id}`, `blease:${id}`, `bb:${id}`]) await this.#r.del(`${this.#p}${key}`);
    if (b !== undefined) await this.#r.srem(`${this.#p}bba:${b.account}`, id);
    await this.#r.srem(`${this.#p}bball`, id);
    await this.#r.srem(`${this.#p}bactive`, id);
    await this.#r.zrem(`${this.#p}bbend`, id);
  }

  async getFile(id: string): Promise<FileRecord | undefined> {
    const v = await this.#r.get(`${this.#p}bf:${id}`);
    return v === null ? undefined : JSON.parse(v) as FileRecord;
  }

  async fileContent(id: string): Promise<Buffer | undefined> {
    return (await this.#r.getBuffer(`${this.#p}bfc:${id}`)) ?? undefined;
  }

  async listFiles(account: string): Promise<FileRecord[]> {
    const ids = await this.#r.smembers(`${this.#p}bfa:${account}`);
    const files = await Promise.all(ids.map((id) => this.getFile(id)));
    return files.filter((f): f is FileRecord => f !== undefined);
  }

  async deleteFile(id: string): Promise<boolean> {
    const f = await this.getFile(id);
    // A file whose record is gone leaves nothing to sweep.
    await this.#r.zrem(`${this.#p}bfexp`, id);
    if (f === undefined) return false;
    await this.#r.del(`${this.#p}bf:${id}`);
    await this.#r.del(`${this.#p}bfc:${id}`);
    await this.#r.srem(`${this.#p}bfa:${f.account}`, id);
    await this.#r.srem(`${this.#p}bfall`, id);
    return true;
  }

  async putBatch(b: BatchRecord): Promise<void> {
    await this.#r.set(`${this.#p}bb:${b.id}`, JSON.stringify(b));
    await this.#r.sadd(`${this.#p}bba:${b.account}`, b.id);
    await this.#r.sadd(`${this.#p}bball`, b.id);
    const ended = endedAt(b);
    if (ended === undefined) await this.#r.sadd(`${this.#p}bactive`, b.id);
    else {
      await this.#r.srem(`${this.#p}bactive`, b.id);
      await this.#r.zadd(`${this.#p}bbend`, ended, b.id);
    }
  }

  async activeBatches(): Promise<BatchRecord[]> {
    const ids = await this.#r.smembers(`${this.#p}bactive`);
    const batches = await Promise.all(ids.map((id) => this.getBatch(id)));
    return batches.filter((b): b is BatchRecord => b !== undefined && ACTIVE_STATUSES.has(b.status));
  }

  async getBatch(id: string): Promise<BatchRecord | undefined> {
    const v = await this.#r.get(`${this.#p}bb:${id}`);
    return v === null ? undefined : JSON.parse(v) as BatchRecord;
  }

  async listBatches(account?: string): Promise<BatchRecord[]> {
    const ids = await this.#r.smembers(account === undefined ? `${this.#p}bball` : `${this.#p}bba:${account}`);
    const batches = await Promise.all(ids.map((id) => this.getBatch(id)));
    return batches.filter((b): b is BatchRecord => b !== undefined);
  }

  async addOutcome(batch: string, o: LineOutcome): Promise<boolean> {
    const added = await this.#r.hsetnx(`${this.#p}bl:${batch}`, String(o.line), JSON.stringify(o));
    if (added === 0) return false;
    await this.#r.hincrby(`${this.#p}bc:${batch}`, o.ok ? 'completed' : 'failed', 1);
    return true;
  }

  async outcomes(batch: string): Promise<LineOutcome[]> {
    return (await this.#r.hvals(`${this.#p}bl:${batch}`)).map((v) => JSON.parse(v) as LineOutcome);
  }

  async counts(batch: string): Promise<{ completed: number; failed: number }> {
    const c = await this.#r.hgetall(`${this.#p}bc:${batch}`);
    return { completed: Number(c.completed ?? 0), failed: Number(c.failed ?? 0) };
  }

  async lease(batch: string, owner: string, ttlMs: number): Promise<boolean> {
    const key = `${this.#p}blease:${batch}`;
    if ((await this.#r.set(key, owner, 'PX', ttlMs, 'NX')) === 'OK') return true;
    if ((await this.#r.get(key)) !== owner) return false;
    await this.#r.pexpire(key, ttlMs);
    return true;
  }

  async close(): Promise<void> {}
}
