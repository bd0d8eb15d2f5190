// Credits are money: every request is priced, held, settled and recorded exactly once.
// Before the upstream call the worst case is held (estimated prompt x input price + requested
// output x output price); after it the actual cost is debited, keyed by the request id so a
// retried settle never charges twice, and the hold released. A request that fails before any
// output is charged nothing.

import type { Principal } from '../auth/principal.js';
import type { ChatRequest, Usage } from '../hub/chat.js';
import type { ModelConfig, PriceConfig } from '../config/types.js';
import { GatewayError, retryAfterHeaders } from '../errors.js';
import { periodId, type BudgetPeriod, type BudgetPeriods, type HoldResult, type Store } from '../store/types.js';
import { budgetPeriods, budgetResetsAt } from '../auth/controls.js';
import { perUtcDay } from '../utc-day.js';
import type { Alerts } from '../alerts/alerts.js';

const MTOK = 1_000_000n;
const MAX_UNITS = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * ceil((prompt x input_per_mtok + completion x output_per_mtok) / 1,000,000), exact at any
 * magnitude the config accepts: prices are uncapped integers (1e300 is one), so a product can
 * pass 2^53 long before a balance could; BigInt keeps every digit. Token counts and prices are
 * non-negative integers (the config schema and the providers' usage readers see to it).
 */
export function cost(promptTokens: number, completionTokens: number, price: PriceConfig): bigint {
  const n = BigInt(promptTokens) * BigInt(price.input_per_mtok) + BigInt(completionTokens) * BigInt(price.output_per_mtok);
  return (n + MTOK - 1n) / MTOK;
}

/**
 * What `usage` costs (CONTRACT section 8): the prompt tokens read from the upstream's cache at
 * cached_input_per_mtok, those written to it at cache_write_per_mtok (each defaulting to
 * input_per_mtok), the rest of the prompt at input_per_mtok and the completion (reasoning
 * included) at output_per_mtok; one sum, rounded up once. The providers' usage readers
 * guarantee cached + written <= prompt.
 */
export function usageCost(usage: Usage, price: PriceConfig): bigint {
  const cached = usage.cached_tokens ?? 0;
  const written = usage.cache_write_tokens ?? 0;
  const input = BigInt(price.input_per_mtok);
  const n = BigInt(usage.prompt_tokens - cached - written) * input +
    BigInt(cached) * (price.cached_input_per_mtok === undefined ? input : BigInt(price.cached_input_per_mtok)) +
    BigInt(written) * (price.cache_write_per_mtok === undefined ? input : BigInt(price.cache_write_per_mtok)) +
    BigInt(usage.completion_tokens) * BigInt(price.output_per_mtok);
  return (n + MTOK - 1n) / MTOK;
}

/**
 * What `seconds` of audio cost at price.audio_per_minute (CONTRACT section 14): every second
 * started, then ceil(seconds x audio_per_minute / 60), rounded up once, exact at any price.
 */
export function audioCost(seconds: number, price: PriceConfig): bigint {
  const whole = BigInt(Math.ceil(seconds));
  return (whole * BigInt(price.audio_per_minute ?? 0) + 59n) / 60n;
}

/**
 * The price a hold assumes for prompt tokens: the dearest of the input, cached and cache-write
 * prices, since the upstream decides which of them each prompt token is charged (a cache write
 * usually costs more than plain input).
 */
function holdPrice(price: PriceConfig): PriceConfig {
  let input = price.input_per_mtok;
  for (const p of [price.cached_input_per_mtok, price.cache_write_per_mtok]) if (p !== undefined && p > input) input = p;
  return input === price.input_per_mtok ? price : { input_per_mtok: input, output_per_mtok: price.output_per_mtok };
}

/**
 * A cost as the stores take it. Balances never exceed 2^53-1 (the admin API and the config
 * refuse more), so a cost above that is "more than any balance": debiting it takes what the
 * balance has, exactly as debiting the true figure would.
 */
/**
 * A batch line's price (CONTRACT section 18): `units` less `percent` of it, rounded up to a
 * whole unit; `units` itself when there is no discount.
 */
export function discounted(units: bigint, percent: number): bigint {
  if (percent <= 0) return units;
  return (units * BigInt(100 - percent) + 99n) / 100n;
}

function storeUnits(units: bigint): number {
  return units > MAX_UNITS ? Number.MAX_SAFE_INTEGER : Number(units);
}

/** The UTC day and month a moment falls in: quota and usage windows. */
export function windows(now = new Date()): { day: string; month: string } {
  // Every request asks; the strings change once a UTC day.
  return { ...windowsOfDay(now.getTime()) };
}

const windowsOfDay = perUtcDay((t) => {
  const iso = new Date(t).toISOString();
  return { day: iso.slice(0, 10), month: iso.slice(0, 7) };
});

function unavailable(err: unknown): GatewayError {
  return new GatewayError('service_unavailable', 'The account store is unavailable; retry shortly.', {
    headers: retryAfterHeaders(1000), cause: err,
  });
}

/** store.on_error: open — tells the operator once per outage that requests go unmetered. */
export class OpenMode {
  #down = false;
  readonly #log: (msg: string, err?: unknown) => void;

  constructor(log: (msg: string, err?: unknown) => void) {
    this.#log = log;
  }

  get isDown(): boolean {
    return this.#down;
  }

  down(err: unknown): void {
    if (this.#down) return;
    this.#down = true;
    this.#log('store unreachable: store.on_error is open, so requests are served UNMETERED until it is back', err);
  }

  up(): void {
    if (!this.#down) return;
    this.#down = false;
    this.#log('store reachable again: metering resumed');
  }
}

/** One request's reservation: settle it with the actual usage, or release it. */
export class Charge {
  readonly #store: Store | null;
  readonly #account: string;
  readonly #requestId: string;
  readonly #price: PriceConfig;
  readonly #day: string;
  readonly #month: string;
  readonly #key: { id: string; periods: BudgetPeriods; team?: string } | undefined;
  /** A batch line's discount in percent (0: none). */
  readonly #discount: number;
  /** Settled, or released: the hold is gone. */
  #done = false;
  /** A settle was sent: whatever came of it, no other is (its figures are the only ones). */
  #sent = false;
  /** Told of the settlement (alert thresholds, the wallet's low mark): set by the pipeline. */
  alerts: Alerts | null = null;
  /** The end user's hold (CONTRACT section 20), when the key caps its end users: settled and released with the wallet's. */
  endUser: { keyId: string; endUser: string; period: string } | undefined;
  /** Units debited and the available balance after, once settled. */
  charged: number | undefined;
  /** The team whose budget the hold counted against (CONTRACT section 15); null when none. */
  readonly team: string | null;
  available: number | undefined;

  /** `store` null: an unmetered request (store.on_error: open while the store is down). */
  constructor(
    store: Store | null, account: string, requestId: string, price: PriceConfig, w: { day: string; month: string }, key?: { id: string; periods: BudgetPeriods },
    team?: string, discount = 0,
  ) {
    this.#discount = discount;
    // The settlement names the team the hold counted against: each debit lands on it once.
    this.#key = key === undefined ? undefined : team === undefined ? key : { ...key, team };
    this.team = team ?? null;
    this.#store = store;
    this.#account = account;
    this.#requestId = requestId;
    this.#price = price;
    this.#day = w.day;
    this.#month = w.month;
  }

  /** Held in the store (false: unmetered, the store down with store.on_error: open). */
  get held(): boolean {
    return this.#store !== null;
  }

  get settled(): boolean {
    return this.#done && this.#sent;
  }

  /** Neither settled nor released, and no settle tried: settle() would debit. */
  get pending(): boolean {
    return !this.#sent && !this.#done;
  }

  /**
   * Debits the actual cost of `usage`, durably, before it resolves; `charged` is then what the
   * store applied. Only the first call does anything: a settle that failed is not tried again
   * with other figures (the store resolved its outcome: store/guard.ts), and its request is
   * answered 503, with nothing debited and its hold left for release(). `cost`, when given, is
   * the request's price instead of its tokens' (audio, by its length); `usage` is still recorded.
   */
  async settle(usage: Usage, cost?: bigint): Promise<void> {
    if (this.#sent || this.#done) return;
    this.#sent = true;
    const units = storeUnits(discounted(cost ?? usageCost(usage, this.#price), this.#discount));
    if (this.#store === null) {
      this.#done = true;
      this.charged = 0;
      return;
    }
    let result;
    try {
      result = await this.#store.settle({
        account: this.#account, requestId: this.#requestId, units,
        promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens,
        day: this.#day, month: this.#month, ...(this.#key === undefined ? {} : { key: this.#key }),
      });
    } catch (err) {
      throw unavailable(err);
    }
    this.#done = true;
    // The account is gone from the store mid-request (a Redis restarted without persistence,
    // before the config's accounts were seeded again): nothing can be debited; the client is
    // told to retry rather than given an answer nobody paid for.
    if (result === undefined) {
      throw new GatewayError('service_unavailable', 'The account store lost this account mid-request; retry shortly.', { headers: retryAfterHeaders(1000) });
    }
    // A repeat (the first attempt's answer was lost) reports what that one debited.
    if (result.applied) this.alerts?.settled(this.#account, this.#key?.id, this.#key?.periods, result);
    this.charged = result.charged_units;
    this.available = result.available_units;
    // The end user's spend takes what the wallet was debited, once per request id. Its store
    // fault does not undo the debit, which stands: the end user's spend is then short by it.
    const eu = this.endUser;
    if (eu !== undefined) await this.#store.endUsers.settle({ ...eu, requestId: this.#requestId, units: result.charged_units }).catch(() => undefined);
  }

  /** Drops the hold without charging; safe to call on any path, any number of times. */
  async release(): Promise<void> {
    if (this.#done) return;
    this.#done = true;
    await this.#store?.release(this.#account, this.#requestId);
    if (this.endUser !== undefined) await this.#store?.endUsers.release(this.endUser.keyId, this.endUser.endUser, this.#requestId);
  }
}

/**
 * Holds the worst case for a request, or refuses it: 402 insufficient_credits or
 * quota_exceeded (with wallet_balance_units = the available balance). `fixed`, when given, is
 * the request's whole price, known before the call (audio, by its length), held instead.
 */
export async function hold(
  store: Store, principal: Principal, requestId: string, model: ModelConfig, request: ChatRequest,
  promptTokens: number, ttlMs: number, open: OpenMode | null, fixed?: bigint, endUser?: string | null,
): Promise<Charge> {
  // Every answer asked for (completions' n per prompt) may run to the output limit.
  const output = (request.maxOutputTokens ?? model.max_output_tokens) * (request.answers ?? 1);
  // A batch line's worst case less the plan's discount (CONTRACT section 18).
  const units = discounted(fixed ?? cost(promptTokens, output, holdPrice(model.price)), principal.batch?.discountPercent ?? 0);
  return holdUnits(store, principal, requestId, units, model.price, ttlMs, open, endUser);
}

/**
 * Holds `units` for a request whose price is known before the call (an MCP tool call's
 * per_call_units, CONTRACT section 17), or refuses it exactly as hold() does. `price` is what
 * a settle without a cost of its own would charge by.
 */
export async function holdUnits(
  store: Store, principal: Principal, requestId: string, units: bigint, price: PriceConfig, ttlMs: number, open: OpenMode | null, endUser?: string | null,
): Promise<Charge> {
  // A worst case above 2^53-1 is more than any balance holds; the store still runs its quota
  // checks (a quota refusal comes first) and reports the available balance for the 402.
  const unpayable = units > MAX_UNITS;
  const now = new Date();
  const w = windows(now);
  // A developer key's budget is held with the wallet; its spend counts in the period of the hold.
  const key = principal.key === undefined ? undefined : { id: principal.key.id, periods: budgetPeriods(now.getTime()) };
  let result: HoldResult | undefined;
  try {
    result = await store.hold({
      account: principal.accountId, requestId, units: storeUnits(units), ttlMs, day: w.day, month: w.month, quotas: principal.plan.quotas,
      ...(key === undefined ? {} : { key }),
    });
  } catch (err) {
    // store.on_error: open — serve unmetered rather than refuse; said loudly, once per outage.
    if (open !== null) {
      open.down(err);
      return new Charge(null, principal.accountId, requestId, price, w, key, undefined, principal.batch?.discountPercent ?? 0);
    }
    throw unavailable(err);
  }
  open?.up();
  if (result === undefined) throw new GatewayError('invalid_api_key', 'The account behind this credential no longer exists.');
  if (result.ok && unpayable) {
    // Only a balance of exactly 2^53-1 with nothing held gets here: still short by the rest.
    await store.release(principal.accountId, requestId).catch(() => undefined);
    result = { ok: false, code: 'insufficient_credits', available_units: Number.MAX_SAFE_INTEGER };
  }
  if (!result.ok) {
    if (result.code === 'insufficient_credits') {
      throw new GatewayError('insufficient_credits', `This request may cost up to ${units} units; ${result.available_units} are available.`, {
        extras: { wallet_balance_units: result.available_units },
      });
    }
    if (result.code === 'budget_exceeded') {
      // The first budget that refuses, the key's before its team's (CONTRACT section 15).
      const whose = result.budget_scope === 'team' ? "this API key's team's" : "this API key's";
      throw new GatewayError('budget_exceeded', `This request may cost up to ${units} units; ${whose} budget has ${result.budget_remaining_units} left.`, {
        extras: {
          budget_scope: result.budget_scope, budget_remaining_units: result.budget_remaining_units,
          budget_resets_at: budgetResetsAt(result.budget_period, now.getTime()),
        },
      });
    }
    throw new GatewayError('quota_exceeded', `The plan's ${result.quota_code} quota is used up.`, {
      extras: { quota_code: result.quota_code, wallet_balance_units: result.available_units },
    });
  }
  const charge = new Charge(store, principal.accountId, requestId, price, w, key, result.team, principal.batch?.discountPercent ?? 0);
  const eub = principal.key?.endUserBudget;
  if (eub != null && endUser != null && key !== undefined) await holdEndUser(store, charge, principal.accountId, { keyId: key.id, endUser, period: periodId(eub.period, key.periods) }, eub, requestId, units, ttlMs, now);
  return charge;
}

/**
 * The end user's part of a hold (CONTRACT section 20), after the wallet's: refused, the wallet's
 * hold is released and the answer is 402 budget_exceeded with budget_scope "end_user".
 */
async function holdEndUser(
  store: Store, charge: Charge, account: string, eu: NonNullable<Charge['endUser']>, budget: { units: number; period: BudgetPeriod }, requestId: string, units: bigint,
  ttlMs: number, now: Date,
): Promise<void> {
  let r;
  try {
    r = await store.endUsers.hold({ ...eu, account, requestId, units: storeUnits(units), cap: budget.units, ttlMs });
  } catch (err) {
    await charge.release().catch(() => undefined);
    throw unavailable(err);
  }
  if (!r.ok) {
    await charge.release().catch(() => undefined);
    throw new GatewayError('budget_exceeded', `This request may cost up to ${units} units; this end user's budget on this API key has ${r.remaining_units} left.`, {
      extras: { budget_scope: 'end_user', budget_remaining_units: r.remaining_units, budget_resets_at: budgetResetsAt(budget.period, now.getTime()) },
    });
  }
  charge.endUser = eu;
}
