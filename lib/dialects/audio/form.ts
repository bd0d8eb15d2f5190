// The audio routes' wire format (POST /v1/audio/transcriptions and /translations, OpenAI's
// multipart/form-data): the form parsed by a maintained parser (@fastify/busboy) under limits
// on parts, fields and part headers, so that a hostile boundary, a truncated part or a huge
// part header is a 400, never a hang or a crash; each field checked as OpenAI's API takes it.
// The body is fed to the parser in slices (the event loop turns between them) and the file is
// the body's own bytes, not a copy.
// The route that meters it is routes/audio.ts; the audio's length is ./duration.ts.

import type { BusboyConstructor, BusboyInstance } from '@fastify/busboy';
import { GatewayError } from '../../errors.js';
import { badValue, missing, unsupported, wrongType } from '../../hub/params.js';
import type { AudioFormat, TranscribeInput } from '../../hub/forms.js';

export const AUDIO_FORMATS: readonly AudioFormat[] = ['json', 'text', 'verbose_json', 'srt', 'vtt'];

/** Bounds of the form beside the body's own (server.max_audio_bytes): OpenAI's fields are few and short. */
const LIMITS = {
  fieldNameSize: 100,
  fieldSize: 64 * 1024,
  fields: 32,
  files: 1,
  parts: 33,
  headerPairs: 16,
  headerSize: 8 * 1024,
} as const;

/** Bytes handed to the parser between two turns of the event loop. */
const FEED_SLICE = 512 * 1024;

export interface AudioRequest {
  model: string;
  file: TranscribeInput['file'];
  /** The text fields in order, as sent. */
  fields: Array<readonly [string, string]>;
  responseFormat: AudioFormat;
  language: string | undefined;
  prompt: string | undefined;
}

/** The media type is multipart/form-data (with its boundary, checked by the parser). */
export function isMultipart(header: string | undefined): boolean {
  if (header === undefined) return false;
  const semi = header.indexOf(';');
  return (semi === -1 ? header : header.slice(0, semi)).trim().toLowerCase() === 'multipart/form-data';
}

function malformed(why: string): GatewayError {
  return new GatewayError('invalid_value', `Invalid value for 'body': not a well-formed multipart/form-data body (${why}).`, { param: 'body' });
}

interface RawForm {
  fields: Array<readonly [string, string]>;
  file: TranscribeInput['file'] | undefined;
}

/**
 * The parser, loaded by the first audio request: a gateway that serves none never loads it
 * (about 0.5 MB of heap; test/cli/idle-modules.test.ts).
 */
let busboy: Promise<{ Busboy: BusboyConstructor }> | undefined;

/** The form's parts: text fields and the one file, or the first problem found. */
async function readForm(body: Buffer, contentType: string): Promise<RawForm> {
  const { Busboy } = await (busboy ??= import('@fastify/busboy'));
  return new Promise((resolve, reject) => {
    let bb: BusboyInstance;
    try {
      bb = Busboy({ headers: { 'content-type': contentType }, limits: { ...LIMITS, fileSize: body.length } });
    } catch (err) {
      reject(malformed((err as Error).message === 'Multipart: Boundary not found' ? 'no boundary' : 'its content type'));
      return;
    }
    const fields: Array<readonly [string, string]> = [];
    let file: TranscribeInput['file'] | undefined;
    let failed = false;
    const fail = (err: GatewayError) => {
      if (failed) return;
      failed = true;
      reject(err);
    };
    bb.on('field', (name, value, nameTruncated, valueTruncated) => {
      if (nameTruncated) fail(malformed(`a field name longer than ${LIMITS.fieldNameSize} bytes`));
      else if (valueTruncated) fail(badValue(name, `at most ${LIMITS.fieldSize} bytes`));
      else fields.push([name, value]);
    });
    bb.on('file', (name, stream, filename, _encoding, mimeType) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      // A part cut short (a truncated body) fails its stream too: unheard, that error would
      // throw out of the event loop.
      stream.on('error', (err: Error) => fail(malformed(clipReason(err.message))));
      stream.on('end', () => {
        if (name !== 'file') return;
        file = { field: name, filename: filename || 'audio', contentType: mimeType || 'application/octet-stream', data: within(body, chunks) };
      });
    });
    bb.on('partsLimit', () => fail(malformed(`more than ${LIMITS.parts} parts`)));
    bb.on('filesLimit', () => fail(badValue('file', 'one file only')));
    bb.on('fieldsLimit', () => fail(malformed(`more than ${LIMITS.fields} fields`)));
    bb.on('error', (err: Error) => fail(malformed(clipReason(err.message))));
    bb.on('finish', () => {
      if (!failed) resolve({ fields, file });
    });
    // Fed a slice at a time, the event loop turning between slices: the parser reads the whole
    // body (25 MiB by default) in one call otherwise.
    const feed = async () => {
      for (let at = 0; at < body.length && !failed; at += FEED_SLICE) {
        bb.write(body.subarray(at, at + FEED_SLICE));
        if (at + FEED_SLICE < body.length) await new Promise<void>((r) => setImmediate(r));
      }
      if (!failed) bb.end();
    };
    feed().catch((err: unknown) => fail(malformed(clipReason(err instanceof Error ? err.message : 'unreadable'))));
  });
}

/**
 * The file part's bytes: the parser hands them over as views of the body, one after another, so
 * they are the body's own bytes from the first view's start; copied only if they are not (a copy
 * of 25 MiB held the event loop for tens of milliseconds, and doubled the request's memory).
 */
function within(body: Buffer, chunks: Buffer[]): Buffer {
  const first = chunks[0];
  if (first === undefined) return Buffer.alloc(0);
  let at = first.byteOffset;
  for (const c of chunks) {
    if (c.buffer !== body.buffer || c.byteOffset !== at) return Buffer.concat(chunks);
    at += c.length;
  }
  const start = first.byteOffset - body.byteOffset;
  return body.subarray(start, start + (at - first.byteOffset));
}

/** The parser's own words, as a client may read them (short, no input echoed). */
function clipReason(message: string): string {
  return /^[\w .:,'-]{1,80}$/.test(message) ? message : 'unreadable';
}

/** Parses a transcription or translation form (the body read whole, within max_audio_bytes). */
export async function parseAudioForm(body: Buffer, contentType: string): Promise<AudioRequest> {
  const { fields, file } = await readForm(body, contentType);
  const one = (name: string): string | undefined => {
    let found: string | undefined;
    for (const [k, v] of fields) {
      if (k !== name) continue;
      if (found !== undefined) throw badValue(name, 'given more than once');
      found = v;
    }
    return found;
  };
  const model = one('model');
  if (model === undefined) throw missing('model');
  if (file === undefined) throw missing('file');
  if (file.data.length === 0) throw badValue('file', 'the file is empty');
  const format = one('response_format') ?? 'json';
  if (!(AUDIO_FORMATS as readonly string[]).includes(format)) throw unsupported('response_format', format, AUDIO_FORMATS);
  const temperature = one('temperature');
  if (temperature !== undefined) {
    const t = Number(temperature);
    if (temperature.trim() === '' || !Number.isFinite(t)) throw wrongType('temperature', 'a number');
    if (t < 0 || t > 1) throw badValue('temperature', 'must be from 0 to 1');
  }
  return { model, file, fields, responseFormat: format as AudioFormat, language: one('language'), prompt: one('prompt') };
}
