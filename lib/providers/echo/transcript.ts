// The echo provider's transcription: deterministic (the form's `prompt` when there is one,
// else a line naming the audio's length), written in each of OpenAI's response formats, so an
// operator's smoke test and the gateway's own tests see every format's real shape.

import type { TranscribeInput, TranscribeResult } from '../types.js';

/** Seconds as a caption timestamp: 00:01:02,500 (SRT) or 00:01:02.500 (WebVTT). */
function stamp(seconds: number, sep: ',' | '.'): string {
  const ms = Math.round(seconds * 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor(ms / 60_000) % 60)}:${pad(Math.floor(ms / 1000) % 60)}${sep}${pad(ms % 1000, 3)}`;
}

export function echoTranscript(a: TranscribeInput): TranscribeResult {
  const prompt = a.fields.find(([k]) => k === 'prompt')?.[1];
  const text = prompt !== undefined && prompt.trim() !== '' ? prompt.trim() : `(echo) ${Math.ceil(a.seconds)} seconds of audio.`;
  const seconds = Math.round(a.seconds * 1000) / 1000;
  const json = (v: unknown): TranscribeResult => ({ body: Buffer.from(JSON.stringify(v)), contentType: 'application/json', headers: {} });
  const plain = (s: string, type = 'text/plain; charset=utf-8'): TranscribeResult => ({ body: Buffer.from(s), contentType: type, headers: {} });
  switch (a.responseFormat) {
    case 'json': return json({ text });
    case 'text': return plain(`${text}\n`);
    case 'srt': return plain(`1\n${stamp(0, ',')} --> ${stamp(seconds, ',')}\n${text}\n\n`);
    case 'vtt': return plain(`WEBVTT\n\n${stamp(0, '.')} --> ${stamp(seconds, '.')}\n${text}\n\n`, 'text/vtt; charset=utf-8');
    case 'verbose_json': {
      const language = a.task === 'translations' ? 'english' : a.fields.find(([k]) => k === 'language')?.[1] ?? 'english';
      return json({
        task: a.task === 'translations' ? 'translate' : 'transcribe', language, duration: seconds, text,
        segments: [{ id: 0, seek: 0, start: 0, end: seconds, text, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 }],
      });
    }
  }
}
