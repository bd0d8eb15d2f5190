// One metered generation, whatever dialect the client speaks, in order: authenticate, read the
// body and let the dialect parse it, resolve the model, check images, policy and context, admit
// (limits), hold (./admit.ts), then call the model's targets (./attempts.ts: its provider, then
// its fallbacks) and let the dialect render the answer as one JSON body or as an event stream
// (./answer.ts, ./stream.ts). Each step throws a GatewayError; the router writes it in the dialect's shape
// (./finish.ts).

import { readJsonBody } from '../http/json.js';
import type { Dialect } from '../dialects/types.js';
import { admitAndHold, authenticateMetered, settleAfter } from './admit.js';
import { completeAnswer } from './answer.js';
import { StreamAnswer } from './stream.js';
import { Attempts } from './attempts.js';
import { checkContext, checkImages, checkModelType, checkProvider, contextFit, promptRoom } from './checks.js';
import type { Exchange } from './context.js';

export async function handleGeneration(dialect: Dialect, x: Exchange): Promise<void> {
  const { state, ctx, req } = x;
  ctx.principal = await authenticateMetered(state, dialect.credential(req), req);
  const body = await readJsonBody(req, state.config.server);
  const request = dialect.parse(body, req);
  ctx.stream = request.stream;
  ctx.requestModel = request.model;
  if (dialect.prepare !== undefined) await dialect.prepare(request, { store: state.store, account: ctx.principal.accountId, config: state.config });
  const fit = request.model === 'auto' ? await contextFit(request, state.catalog.autoModels) : undefined;
  const model = state.catalog.resolve(request.model, ctx.principal.plan, request.imageCount > 0, (m) => {
    if (!state.healthy(m)) return 'unhealthy';
    return fit === undefined || fit(m) ? null : 'context';
  }, ctx.principal.key);
  ctx.model = model.id;
  checkModelType(model, 'chat');
  checkProvider(state.targets(model), request, model);
  checkImages(request, model);
  state.policy.check(request.messages);
  // Counted no further than the model could take: a prompt past that is refused all the same.
  // Plain-text prompts are each answered on their own: the context check takes the longest,
  // the hold all of them.
  const room = promptRoom(request, model);
  let prompt: number;
  if (request.prompts === undefined) {
    prompt = await state.promptTokens(request, model, room);
    checkContext(request, model, prompt);
  } else {
    const counted = await state.plainTokens(request.prompts, model, room);
    checkContext(request, model, counted.longest);
    prompt = counted.total;
  }

  const admitted = await admitAndHold(x, model, request, prompt);
  if (admitted === undefined) return;
  const attempts = new Attempts(x, request, model, prompt, admitted.deadline);
  const renderer = dialect.renderer(request, model.id, prompt);
  await settleAfter(admitted, ctx, attempts, request.stream
    ? () => new StreamAnswer(x, attempts, admitted.charge, renderer).run()
    : () => completeAnswer(x, attempts, admitted.charge, renderer));
}
