// The usage records and what is read of them (CONTRACT sections 5, 8, 12, 15 and 21): a record,
// its pages, a report, the totals kept as records are written and the reads of them. Part of the
// store's interface (./types.ts re-exports every one).

/**
 * One metered request, kept for usage reports and exports (CONTRACT section 8): written once,
 * after its debit, with the debited figures; kept at least `usage.retention_days`.
 */
export interface UsageRecord {
  request_id: string;
  /** Unix milliseconds when the request finished (the API shows it as ISO-8601). */
  at: number;
  account: string;
  /** The developer key's id; null for a dashboard JWT (sessions are not keys). */
  key_id: string | null;
  /** The team the request's hold counted against (CONTRACT section 15); null when none. */
  team: string | null;
  /** The catalog slug served. */
  model: string;
  /** The configured provider name of the target that answered (or was tried last). */
  provider: string;
  /** The replica the request went to (its URL), or null when none applies (echo). */
  target: string | null;
  /** The route path, e.g. /v1/chat/completions. */
  route: string;
  /** The HTTP status the client got (499: it left before any was sent). */
  status: number;
  prompt_tokens: number;
  /** Prompt tokens the upstream read from its prompt cache (part of prompt_tokens or not, as it reports). */
  cached_tokens: number;
  completion_tokens: number;
  /** Units debited. */
  units: number;
  usage_source: 'upstream' | 'counted' | 'none';
  duration_ms: number;
  /** Until the first byte of the answer's content; null when none was sent. */
  ttft_ms: number | null;
  /**
   * Whole milliseconds the request waited in providers' queues (CONTRACT section 13): 0 when
   * it did not wait or its provider has no queue; a refused wait (503 model_overloaded) counts.
   */
  queue_ms: number;
  /** The request's tags, its key's first (CONTRACT section 20); [] for none. */
  tags: string[];
  /** The end user the request was made for (x-tollgate-end-user, else the body's user); null: none. */
  end_user: string | null;
  /** An MCP tools/call's tool, `<server>__<tool>` (CONTRACT section 17); absent for every other request. */
  tool?: string;
  /** A batch line's (CONTRACT section 18): its batch and custom_id. */
  batch_id?: string;
  custom_id?: string;
}

/** Totals of a set of records. */
export interface UsageSums { requests: number; prompt_tokens: number; completion_tokens: number; units: number }

export interface UsageReport extends UsageSums {
  by_model: Record<string, UsageSums>;
  /** Per key id; requests of dashboard sessions (key_id null) count in the totals only. */
  by_key: Record<string, UsageSums>;
  /** Per team id; requests of keys without a team count in the totals only. */
  by_team: Record<string, UsageSums>;
}

/** Which records a page holds. Times are Unix ms; `since` inclusive, `until` exclusive. */
export interface UsageQuery {
  account?: string;
  keyId?: string;
  team?: string;
  model?: string;
  /** Only records carrying this tag, or made for this end user (CONTRACT section 20). */
  tag?: string;
  endUser?: string;
  /** Only the records of this batch's lines (CONTRACT section 18). */
  batchId?: string;
  since: number;
  until?: number;
  limit: number;
  /** From a previous page's next_cursor; undefined for the first page. */
  cursor?: string;
}

export interface UsagePage {
  records: UsageRecord[];
  /** Null on the last page (as of this read: records written later go to a new query). */
  next_cursor: string | null;
}

/** Totals of one UTC hour (or of a range), kept as records are written (../store/usage-totals.ts). */
export interface HourTotals {
  /** Unix ms of the hour's start. */
  hour: number;
  requests: number;
  /** Records with status >= 400. */
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  units: number;
}

/** Which hours usageHourly answers: those starting in [since, until) (Unix ms), of one account or all. */
export interface HourlyQuery { since: number; until: number; account?: string }

/** The dimensions totals are kept by (one more here, e.g. 'tag', with its line in ./usage-totals.ts). */
export type TotalsDimension = 'account' | 'key' | 'model' | 'team' | 'tag' | 'end_user';

/**
 * A read of the totals kept as records are written (Store.usageTotals, ./usage-totals.ts): the
 * sums per value of `by` over whole hours [since, until) (Unix ms, multiples of an hour; whole
 * UTC days when `daily`), of the records of `account` (and of its `key`) when given.
 */
export interface TotalsQuery {
  /** The dimensions of a row ([]: one row for all the records read). */
  by: readonly TotalsDimension[];
  account?: string;
  /** Only this key's records (with its `account`). */
  key?: string;
  /** Only the records carrying this tag ('' : those with none; CONTRACT section 20). */
  tag?: string;
  /** Only the records of this end user ('' : those with none). */
  end_user?: string;
  since: number;
  until: number;
  /** One row per UTC day and value (else one per value over the range). */
  daily?: boolean;
}

/** One row of a totals read: the values of the query's `by`, in its order, and their sums. */
export interface TotalsRow {
  /** Unix ms of the UTC day's start, for a `daily` read; null otherwise. */
  day: number | null;
  values: string[];
  requests: number;
  /** Records with status >= 400. */
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  units: number;
}

/** Top ids of a dimension by units over the hours starting in [since, until), optionally within one account. */
export interface TopQuery { by: TotalsDimension; since: number; until: number; limit: number; account?: string }

export interface TopRow { id: string; requests: number; units: number }
