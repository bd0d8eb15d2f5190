// POST /v1/audio/transcriptions and /v1/audio/translations, for `type: transcription` models:
// the multipart body read whole within server.max_audio_bytes (413 from a declared length
// before any of it is read), the form parsed (dialects/audio), the audio's length read from the
// file before the upstream is called, and the request held and charged by it:
// ceil(ceil(seconds) x price.audio_per_minute / 60) units. The settle is the hold: the gateway's
// measure is the price, whatever the upstream reports (most formats report no length at all).
// Otherwise metered as every unary route (pipeline/unary.ts): plan gating, content policy on
// the prompt, limits, the model's targets with fallbacks and circuits, one debit.

import { authenticateMetered } from '../pipeline/admit.js';
import type { Exchange } from '../pipeline/context.js';
import { unaryCall, unaryModel, unaryRequest } from '../pipeline/unary.js';
import { audioCost } from '../billing/meter.js';
import { GatewayError } from '../errors.js';
import { readBody } from '../http/body.js';
import type { TranscribeInput } from '../providers/types.js';
import { isMultipart, parseAudioForm } from '../dialects/audio/form.js';
import { audioSeconds } from '../dialects/audio/duration.js';

export async function serveAudio(task: TranscribeInput['task'], x: Exchange): Promise<void> {
  const { state, ctx, req } = x;
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const contentType = req.headers['content-type'];
  if (!isMultipart(contentType)) {
    throw new GatewayError('unsupported_media_type', 'The request body must be multipart/form-data (a `file` part and the fields).');
  }
  const server = state.config.server;
  const form = await parseAudioForm(await readBody(req, server.max_audio_bytes, server.body_timeout_ms), contentType!);
  const model = unaryModel(x, form.model, 'transcription');
  // No tokens are held: the price is the audio's length.
  const request = unaryRequest(x, form.model, form.prompt === undefined ? [] : [form.prompt]);
  const seconds = await audioSeconds(form.file.data);
  const input: TranscribeInput = { task, fields: form.fields, file: form.file, responseFormat: form.responseFormat, seconds };
  await unaryCall(x, model, {
    request, prompt: 0, units: audioCost(seconds, model.price), verb: 'transcribe',
    serve: (provider, call) => provider.transcribe?.(call, input),
    // The settle is the hold: the gateway's measure is the price, whatever the upstream reports.
    tokens: () => undefined,
    answer: (result) => ({
      body: result.body, type: result.contentType, headers: result.headers, own: { 'x-tollgate-audio-seconds': String(Math.ceil(seconds)) },
    }),
  });
}
