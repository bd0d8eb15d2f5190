// The whole answer of an admitted generation, through its attempt chain (./attempts.ts): one
// JSON body (completeAnswer; an event stream is ./stream.ts). It settles the hold with the
// usage before the answer reports it.

import { sendJson } from '../http/respond.js';
import type { Renderer } from '../dialects/types.js';
import type { Charge } from '../billing/meter.js';
import type { Attempts } from './attempts.js';
import { answerHeaders, type Exchange } from './context.js';

/** A dialect's keep step failing costs the client nothing more: the answer is paid and goes out. */
export async function keep(work: Promise<void>, { ctx, state }: Exchange): Promise<void> {
  try {
    await work;
  } catch (err) {
    state.logger.warn({ request_id: ctx.id, err: (err as Error).message }, 'the answer was not kept (store)');
  }
}

export async function completeAnswer(x: Exchange, attempts: Attempts, charge: Charge, renderer: Renderer): Promise<void> {
  const { metrics, ctx, res } = x;
  for (;;) {
    // No promise unless the attempt waits in a queue.
    const next = attempts.attempt();
    const attempt = next instanceof Promise ? await next : next;
    const { target } = attempt;
    try {
      const started = performance.now();
      const result = await attempts.run(attempt, (call) => target.provider.complete(call));
      let usage = result.usage;
      ctx.usageSource = 'upstream';
      if (usage === undefined) {
        usage = await attempts.counted(result.choices.map((c) => (c.message.reasoning_content ?? '') + (c.message.content ?? '')).join(''));
        ctx.usageSource = 'counted';
      }
      ctx.usage = usage;
      ctx.ttfcMs = performance.now() - started;
      // A client that left after the answer arrived is charged its usage all the same; the
      // debit is durable before the answer reports it.
      await charge.settle(usage);
      if (res.destroyed) return;
      const answer = renderer.complete({ choices: result.choices, usage, native: result.native, chatJson: result.chatJson });
      if (renderer.keep !== undefined) await keep(renderer.keep(), x);
      ctx.ttftMs = performance.now() - ctx.start;
      sendJson(res, 200, answer, answerHeaders(ctx, result.headers));
      metrics.observe(metrics.timeToFirstChunk, target.provider.name, ctx.ttfcMs / 1000);
      return;
    } catch (err) {
      if (!attempts.canFallBack(err)) throw err;
    }
  }
}
