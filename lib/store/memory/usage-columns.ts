// One UTC day of usage records held in memory column by column (the memory store without a
// path keeps every record for usage.retention_days, 90 by default, in its heap). As objects, a
// record cost about 600 bytes of heap, all of it traced by every major GC; here it costs under
// 200: its eight numbers in a Float64Array, its seven repeated strings (account, key, model,
// provider, target, route, usage source) as indices into the day's table of distinct values,
// and its request id, made flat, as the one string of its own. Records are rebuilt as objects
// only when read (admin queries), with the contract's fields in their order, as the other
// stores return them: a record reads back exactly as written (numbers are kept as float64, so
// every safe integer and every duration is exact); fields outside the contract are not kept.

import { flattened } from '../../strings.js';
import type { UsageRecord } from '../types.js';

const SOURCES: readonly UsageRecord['usage_source'][] = ['upstream', 'counted', 'none'];

/** Numbers per record, in this order; ttft_ms null is NaN. */
const NUMS = 8;
/** Strings per record held as table indices, in this order; null (key_id, target) is 0. */
const REFS = 6;
const FIRST_CAPACITY = 256;

export class DayColumns {
  #length = 0;
  #ids: string[] = [];
  #nums = new Float64Array(FIRST_CAPACITY * NUMS);
  #refs = new Uint32Array(FIRST_CAPACITY * REFS);
  #sources = new Uint8Array(FIRST_CAPACITY);
  /** Index 0 stands for null; each distinct string of the day is stored once. */
  readonly #table: string[] = [''];
  readonly #index = new Map<string, number>();

  get length(): number {
    return this.#length;
  }

  /** Appends `r` (a record validateUsageRecord accepts). */
  push(r: UsageRecord): void {
    const source = SOURCES.indexOf(r.usage_source);
    if (source < 0) throw new TypeError('a usage record needs a usage_source');
    const i = this.#length;
    if (i === this.#sources.length) this.#grow();
    this.#ids.push(flattened(r.request_id));
    const n = i * NUMS;
    const nums = this.#nums;
    nums[n] = r.at;
    nums[n + 1] = r.status;
    nums[n + 2] = r.prompt_tokens;
    nums[n + 3] = r.cached_tokens;
    nums[n + 4] = r.completion_tokens;
    nums[n + 5] = r.units;
    nums[n + 6] = r.duration_ms;
    nums[n + 7] = r.ttft_ms ?? Number.NaN;
    const s = i * REFS;
    const refs = this.#refs;
    refs[s] = this.#ref(r.account);
    refs[s + 1] = r.key_id === null ? 0 : this.#ref(r.key_id);
    refs[s + 2] = this.#ref(r.model);
    refs[s + 3] = this.#ref(r.provider);
    refs[s + 4] = r.target === null ? 0 : this.#ref(r.target);
    refs[s + 5] = this.#ref(r.route);
    this.#sources[i] = source;
    this.#length = i + 1;
  }

  /** Record `i` (0 <= i < length), rebuilt. */
  get(i: number): UsageRecord {
    const n = i * NUMS;
    const nums = this.#nums;
    const s = i * REFS;
    const refs = this.#refs;
    const table = this.#table;
    const ttft = nums[n + 7]!;
    return {
      request_id: this.#ids[i]!,
      at: nums[n]!,
      account: table[refs[s]!]!,
      key_id: refs[s + 1] === 0 ? null : table[refs[s + 1]!]!,
      model: table[refs[s + 2]!]!,
      provider: table[refs[s + 3]!]!,
      target: refs[s + 4] === 0 ? null : table[refs[s + 4]!]!,
      route: table[refs[s + 5]!]!,
      status: nums[n + 1]!,
      prompt_tokens: nums[n + 2]!,
      cached_tokens: nums[n + 3]!,
      completion_tokens: nums[n + 4]!,
      units: nums[n + 5]!,
      usage_source: SOURCES[this.#sources[i]!]!,
      duration_ms: nums[n + 6]!,
      ttft_ms: Number.isNaN(ttft) ? null : ttft,
    };
  }

  #ref(text: string): number {
    let i = this.#index.get(text);
    if (i === undefined) {
      i = this.#table.push(text) - 1;
      this.#index.set(text, i);
    }
    return i;
  }

  #grow(): void {
    const capacity = this.#sources.length * 2;
    const nums = new Float64Array(capacity * NUMS);
    nums.set(this.#nums);
    this.#nums = nums;
    const refs = new Uint32Array(capacity * REFS);
    refs.set(this.#refs);
    this.#refs = refs;
    const sources = new Uint8Array(capacity);
    sources.set(this.#sources);
    this.#sources = sources;
  }
}
