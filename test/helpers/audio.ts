// Audio files the tests make themselves: a 16-bit PCM WAV of a sine tone (its header may be
// told to lie about its rate), MPEG-1 Layer III frames (each a real frame header, 128 kbit/s at
// 44.1 kHz, and silent side info and data: the silence an encoder writes), and a multipart body
// written by hand for the raw-HTTP tests.

/** A mono 16-bit PCM WAV of `seconds` at `rate`; `claimRate` writes another rate in the header. */
export function wav(seconds: number, rate = 16000, claimRate = rate): Buffer {
  const n = Math.round(seconds * rate);
  const data = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) data.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), i * 2);
  const h = Buffer.alloc(44);
  h.write('RIFF', 0);
  h.writeUInt32LE(36 + data.length, 4);
  h.write('WAVE', 8);
  h.write('fmt ', 12);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(1, 22); // mono
  h.writeUInt32LE(claimRate, 24);
  h.writeUInt32LE(claimRate * 2, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36);
  h.writeUInt32LE(data.length, 40);
  return Buffer.concat([h, data]);
}

/** One MPEG-1 Layer III frame: 128 kbit/s, 44.1 kHz, no padding, stereo: 417 bytes, 1152 samples. */
const FRAME = (() => {
  const f = Buffer.alloc(417);
  f.writeUInt32BE(0xfffb9004, 0);
  return f;
})();
export const MP3_FRAME_SECONDS = 1152 / 44100;

/** `frames` MP3 frames (about 38 a second). */
export function mp3(frames: number): Buffer {
  return Buffer.concat(Array<Buffer>(frames).fill(FRAME));
}

/** A multipart/form-data body: text fields, then the file part (when given). */
export function multipart(fields: Array<[string, string]>, file?: { name?: string; filename: string; type: string; data: Buffer }, boundary = 'tollgate-test-boundary'): { body: Buffer; contentType: string } {
  const parts: Buffer[] = [];
  for (const [k, v] of fields) parts.push(Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`));
  if (file !== undefined) {
    parts.push(Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="${file.name ?? 'file'}"; filename="${file.filename}"\r\ncontent-type: ${file.type}\r\n\r\n`));
    parts.push(file.data, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
}
