// Opus packets measured by their own first bytes (RFC 6716 §3.1): the TOC byte's configuration
// gives each frame's duration (2.5 to 60 ms), its code how many frames the packet holds (one,
// two, or the count in the next byte). Opus always decodes at 48 kHz, so a packet's samples
// come from the packet alone: no header can make it shorter. A packet that claims more than
// 120 ms (which decoders refuse) counts 120 ms. The stream's pre-skip (OpusHead in Ogg and in
// Matroska's CodecPrivate, at most 65,535 samples) is what the decoder drops at the start.

import { OPUS_MAX_PACKET_SAMPLES } from './walk.js';

const SILK = [480, 960, 1920, 2880];
const CELT = [120, 240, 480, 960];

/** Samples at 48 kHz in the Opus packet b[p, p + length). */
export function opusPacketSamples(b: Uint8Array, p: number, length: number): number {
  if (length <= 0) return 0;
  const toc = b[p]!;
  const config = toc >> 3;
  const frame = config < 12 ? SILK[config & 3]! : config < 16 ? (config & 1 ? 960 : 480) : CELT[config & 3]!;
  const code = toc & 3;
  let frames: number;
  if (code === 0) frames = 1;
  else if (code < 3) frames = 2;
  else frames = length < 2 ? 0 : b[p + 1]! & 0x3f;
  return Math.min(frames * frame, OPUS_MAX_PACKET_SAMPLES);
}

/** The pre-skip of an OpusHead packet (`OpusHead`, version, channels, pre-skip LE16), or undefined. */
export function opusHead(packet: Uint8Array): number | undefined {
  if (packet.length < 19 || Buffer.from(packet.buffer, packet.byteOffset, 8).toString('latin1') !== 'OpusHead') return undefined;
  if (packet[9] === 0) return undefined; // no channels
  return packet[10]! | (packet[11]! << 8);
}
