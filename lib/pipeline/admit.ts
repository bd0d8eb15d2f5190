// Admission of a metered request (every metered route comes through here): its credential and
// rate-limit gate, the request a content refusal spends, the limits' grant and concurrency
// slot, the worst-case credit hold, and the settle or release once its answer is done.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';
import type { GatewayState, Target } from '../state.js';
import { hold, type Charge } from '../billing/meter.js';
import type { Principal } from '../auth/principal.js';
import type { ChatRequest } from '../hub/chat.js';
import type { ModelConfig } from '../config/types.js';
import type { Exchange, RequestContext } from './context.js';
import { attributionOf } from '../auth/attribution.js';

/**
 * A hold lives for the attempt chain's budget (chainBudgetMs), then store.settle_wait_ms for a
 * settle whose outcome must be learned, then this: the rest of the settle and what follows it
 * (counting a cut stream's tokens, keeping a response). The chain's deadline is the hold's
 * start plus the budget, so no attempt outlives the hold, and neither does the settle.
 */
const HOLD_SLACK_MS = 60_000;

/**
 * Authenticates a request of a route that counts toward requests_per_minute. A principal whose
 * requests limit this instance saw spent is refused here, before its body is read (CONTRACT
 * section 16); should the request be refused for its content later, before admission, the
 * router spends a request for it (refusalSpends).
 */
export async function authenticateMetered(state: GatewayState, credential: string | undefined, req: IncomingMessage): Promise<Principal> {
  const principal = await state.auth.authenticate(credential, req);
  state.limits.gate(principal);
  return principal;
}

/** Statuses of refusals for a request's content (its body, model, size, time), which spend a request (CONTRACT section 16). */
const CONTENT_REFUSALS: ReadonlySet<number> = new Set([400, 403, 404, 408, 413, 415, 422]);

/**
 * When a metered route's request was refused for its content before its admission (which
 * counts every admitted request), it spends a request of its rate limits all the same; when
 * those were spent already, the answer is their 429 instead. Returns the error to answer with.
 */
export async function refusalSpends({ state, ctx }: Exchange, err: unknown): Promise<unknown> {
  if (ctx.principal === undefined || ctx.rateHeaders !== undefined) return err;
  if (!(err instanceof GatewayError) || !CONTENT_REFUSALS.has(err.status)) return err;
  const spent = await state.limits.spend(ctx.principal);
  ctx.rateHeaders = spent.headers;
  return spent.refusal ?? err;
}

type Grant = Awaited<ReturnType<GatewayState['limits']['admit']>>;

/**
 * Limits, then credits: the concurrency slot (held to the last byte of the answer, whatever
 * ends it) and the worst-case hold. Undefined when the client left while waiting. Every metered
 * route (generation, embeddings, rerank, audio) comes through here. `fixed`: a price known
 * before the call (audio's, by its length), held instead of the tokens' worst case.
 */
export async function admitAndHold(
  { state, ctx, res }: Exchange, model: ModelConfig, request: ChatRequest, prompt: number, fixed?: bigint,
): Promise<Admitted | undefined> {
  const principal = ctx.principal!;
  // Tags and end user (CONTRACT section 20), checked before anything is spent: a bad header is a 400.
  ctx.attribution = attributionOf(res.req.headers, request.user !== undefined ? request.user : request.body.user, principal.key);
  const budget = chainBudgetMs(state.targets(model));
  const ttl = budget + state.config.store.settle_wait_ms + HOLD_SLACK_MS;
  // Taken before the hold is asked for, so the chain ends within the hold's life.
  const deadline = performance.now() + budget;
  // The store's hold records the key's use at a time no earlier than this.
  const asked = Date.now();
  // Billing has its own id: x-request-id may come from the client, and must not collide.
  const holdNow = () => hold(state.store, principal, principal.batch?.billingId ?? randomUUID(), model, request, prompt, ttl, state.openMode, fixed, ctx.attribution?.endUser);
  // Where the limits had ample room at this principal's last request, the hold goes out with
  // them (one round trip to the store); a refusal by the limits then releases it at once.
  const early = state.limits.roomy(principal)
    ? holdNow().then((c) => ({ charge: c }), (err: unknown) => ({ err }))
    : undefined;
  const dropEarly = () => { void early?.then((r) => ('charge' in r ? r.charge.release() : undefined)).catch(() => undefined); };
  let grant: Grant;
  try {
    grant = await state.limits.admit(principal, prompt + (request.maxOutputTokens ?? model.max_output_tokens) * (request.answers ?? 1));
  } catch (err) {
    dropEarly();
    throw err;
  }
  ctx.rateHeaders = grant.headers;
  // Released with the answer's last writes (the usage record): one round trip after it.
  res.once('close', () => queueMicrotask(grant.release));
  // The client may have left while the slot was being acquired: 'close' has fired already.
  if (res.destroyed) {
    grant.release();
    grant.correct(0);
    dropEarly();
    return undefined;
  }
  let charge: Charge;
  try {
    if (early === undefined) {
      charge = await holdNow();
    } else {
      const r = await early;
      if ('err' in r) throw r.err;
      charge = r.charge;
    }
  } catch (err) {
    // Refused by the wallet, the key's budget or a quota: it takes nothing from the limits.
    grant.cancel();
    throw err;
  }
  ctx.charge = charge;
  charge.alerts = state.alerts;
  if (charge.held) state.auth.held(principal, asked);
  return { grant, charge, deadline };
}

/** An admitted request: its limits' grant, its credit hold, and when its attempt chain must end. */
export interface Admitted {
  grant: Grant;
  charge: Charge;
  /** performance.now() by which every attempt is over (Attempts): the hold outlives it. */
  deadline: number;
}

/**
 * The whole attempt chain's time: each target's timeout_ms once. A target's replicas share its
 * timeout (one that stalls leaves no time for another, though one that fails fast does), so a
 * fleet of stalled replicas costs its timeout_ms, not a multiple of it, and each fallback still
 * gets its own. A target behind a queue adds its max_wait_ms: its timeout starts once it has a
 * replica, and the hold must outlive both.
 */
function chainBudgetMs(targets: readonly Target[]): number {
  let ms = 0;
  for (const t of targets) ms += t.provider.config.timeout_ms + (t.provider.fleet.queue?.config.max_wait_ms ?? 0);
  return ms;
}

/**
 * Runs the answer through `attempts`; then a target's circuit left mid-way is settled
 * (Attempts.leave), whatever the answer did not settle is released, and the rate limit
 * corrected. One async frame for the three (no wrapper per step).
 */
export async function settleAfter(admitted: Admitted, ctx: RequestContext, attempts: { leave(): void }, work: () => Promise<void>): Promise<void> {
  const { grant, charge } = admitted;
  try {
    await work();
  } finally {
    try {
      attempts.leave();
    } finally {
      // Whatever did not settle (a failure before any output, a client gone before the answer)
      // is charged nothing; a store that cannot answer lets the hold expire.
      if (!charge.settled) await charge.release().catch(() => undefined);
      grant.correct(charge.settled && ctx.usage !== undefined ? ctx.usage.total_tokens : 0);
    }
  }
}
