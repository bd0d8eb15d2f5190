// POST {base_url}/audio/transcriptions and /audio/translations on a server that serves them
// (vLLM's Whisper, whisper.cpp's and speaches' OpenAI routes, OpenAI itself): the client's form
// re-sent as multipart (undici's FormData, imported at the first transcription: undici's index
// loads all of undici, which a gateway that forwards no audio never needs; test/cli/idle-modules), its fields in order and as sent but the model, which
// is the upstream's; the answer passed back in the format the client asked for.

import type { Dispatcher } from 'undici';
import { GatewayError } from '../../errors.js';
import { forwardedHeaders, transportError } from '../../upstream/http.js';
import type { HttpProvider } from '../http-provider.js';
import type { ProviderCall, TranscribeInput, TranscribeResult } from '../types.js';

/** Largest answer read: a verbose_json of hours of speech, with its words, fits. */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** The whole answer, or provider_error when it is larger than the cap (never a truncated transcript). */
async function readAll(body: Dispatcher.ResponseData['body']): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > MAX_ANSWER_BYTES) {
      body.destroy();
      throw new GatewayError('provider_error', 'The model provider sent an audio answer larger than the gateway reads.');
    }
    parts.push(chunk as Buffer);
  }
  return Buffer.concat(parts, size);
}

export async function transcribeOpenAI(
  provider: HttpProvider, headers: Record<string, string>, call: ProviderCall, a: TranscribeInput,
): Promise<TranscribeResult> {
  const { FormData } = await import('undici');
  const form = new FormData();
  for (const [name, value] of a.fields) form.append(name, name === 'model' ? call.upstreamModel : value);
  form.append(a.file.field, new Blob([a.file.data], { type: a.file.contentType }), a.file.filename);
  // The form sets its own multipart content type (with its boundary).
  const { 'content-type': _json, ...own } = headers;
  const res = await provider.post(call, `/audio/${a.task}`, form, own);
  let body: Buffer;
  try {
    body = await readAll(res.body);
  } catch (err) {
    throw transportError(err, call.signal, provider.name);
  }
  const json = a.responseFormat === 'json' || a.responseFormat === 'verbose_json';
  if (json) {
    let ok = false;
    try {
      const v: unknown = JSON.parse(body.toString('utf8'));
      ok = v !== null && typeof v === 'object' && typeof (v as { text?: unknown }).text === 'string';
    } catch { /* not JSON */ }
    if (!ok) throw new GatewayError('provider_error', 'The model provider sent an invalid transcription answer.');
  }
  const type = res.headers['content-type'];
  const contentType = json ? 'application/json' : typeof type === 'string' && type.startsWith('text/') ? type : 'text/plain; charset=utf-8';
  return { body, contentType, headers: forwardedHeaders(res.headers) };
}
