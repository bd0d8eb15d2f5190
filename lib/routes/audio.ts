// POST /v1/audio/transcriptions and /v1/audio/translations, for `type: transcription` models:
// the multipart body read whole within server.max_audio_bytes (413 from a declared length
// before any of it is read), the form parsed (dialects/audio), the audio's length read from the
// file before the upstream is called, and the request held and charged by it:
// ceil(ceil(seconds) x price.audio_per_minute / 60) units. The settle is the hold: the gateway's
// measure is the price, whatever the upstream reports (most formats report no length at all).
// Otherwise metered as every route: authentication, plan gating, content policy on the prompt,
// limits, the model's targets with fallbacks and circuits, one debit.

import { admitAndHold, authenticateMetered, settleAfter } from '../pipeline/admit.js';
import { Attempts } from '../pipeline/attempts.js';
import { checkModelType } from '../pipeline/checks.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';
import type { ChatRequest } from '../schema/chat.js';
import { audioCost } from '../billing/meter.js';
import { GatewayError } from '../errors.js';
import { readBody } from '../http/body.js';
import { sendWhole } from '../http/respond.js';
import type { TranscribeInput } from '../providers/types.js';
import { isMultipart, parseAudioForm } from '../dialects/audio/form.js';
import { audioSeconds } from '../dialects/audio/duration.js';

export async function serveAudio(task: TranscribeInput['task'], x: Exchange): Promise<void> {
  const { state, ctx, req, res } = x;
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const contentType = req.headers['content-type'];
  if (!isMultipart(contentType)) {
    throw new GatewayError('unsupported_media_type', 'The request body must be multipart/form-data (a `file` part and the fields).');
  }
  const server = state.config.server;
  const form = await parseAudioForm(await readBody(req, server.max_audio_bytes, server.body_timeout_ms), contentType!);
  ctx.requestModel = form.model;
  const model = state.catalog.resolve(form.model, ctx.principal.plan, false, (m) => (state.healthy(m) ? null : 'unhealthy'), ctx.principal.key);
  ctx.model = model.id;
  checkModelType(model, 'transcription');
  // The internal request the shared pieces take: the prompt, if any, as a user turn (content
  // policy); no tokens are held: the price is the audio's length.
  const request: ChatRequest = {
    model: form.model, messages: form.prompt === undefined ? [] : [{ role: 'user', content: form.prompt }], stream: false,
    includeUsage: false, maxOutputTokens: 0, imageCount: 0, body: {},
  };
  state.policy.check(request.messages);
  const seconds = await audioSeconds(form.file.data);
  const units = audioCost(seconds, model.price);
  const input: TranscribeInput = { task, fields: form.fields, file: form.file, responseFormat: form.responseFormat, seconds };
  const admitted = await admitAndHold(x, model, request, 0, units);
  if (admitted === undefined) return;
  const attempts = new Attempts(x, request, model, 0, admitted.deadline);
  await settleAfter(admitted, ctx, () => attempts.using(async () => {
    for (;;) {
      const attempt = await attempts.next();
      const { target } = attempt;
      try {
        const transcribe = target.provider.transcribe;
        // Inside the attempt: its replica is begun already, and run() ends it.
        const result = await attempts.run(attempt, (call) => {
          if (transcribe === undefined) throw new GatewayError('model_unavailable', `The model '${model.id}' cannot transcribe on this provider.`, { fault: false });
          return transcribe.call(target.provider, call, input);
        });
        ctx.usageSource = 'counted';
        ctx.usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
        await admitted.charge.settle(ctx.usage, units);
        if (res.destroyed) return;
        ctx.ttftMs = performance.now() - ctx.start;
        const headers = answerHeaders(ctx, result.headers);
        headers['content-type'] = result.contentType;
        headers['x-tollgate-audio-seconds'] = String(Math.ceil(seconds));
        sendWhole(res, 200, result.body, headers);
        return;
      } catch (err) {
        if (!attempts.canFallBack(err)) throw err;
      }
    }
  }));
}
