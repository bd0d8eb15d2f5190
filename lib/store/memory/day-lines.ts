// Reading a usage day file (./usage-files.ts) without reading it all: the lines from a byte
// offset on, or the lines at given offsets (a postings list's, ./postings.ts). A line is one
// record's JSON; a position is the byte offset just after a line, a cursor that never moves.

import { open, type FileHandle } from 'node:fs/promises';
import { parseRecord, type Entry } from '../usage-records.js';

/** `path` opened for reading; undefined when it is gone (its day was dropped). */
async function opened(path: string): Promise<FileHandle | undefined> {
  try {
    return await open(path, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

/** Up to `max` lines of `path` from byte `start` on; done once the file has no more now. */
export async function readLines(path: string, start: number, max: number): Promise<{ entries: Entry[]; done: boolean }> {
  const fh = await opened(path);
  if (fh === undefined) return { entries: [], done: true };
  try {
    const { size } = await fh.stat();
    const entries: Entry[] = [];
    let offset = start;
    let chunk = 256 * 1024;
    while (entries.length < max && offset < size) {
      const buf = Buffer.alloc(Math.min(chunk, size - offset));
      const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
      let lineStart = 0;
      for (let i = 0; i < bytesRead && entries.length < max; i++) {
        if (buf[i] !== 0x0a) continue;
        const line = buf.toString('utf8', lineStart, i);
        lineStart = i + 1;
        entries.push({ record: line === '' ? undefined : parseRecord(line), pos: String(offset + lineStart) });
      }
      if (lineStart === 0) {
        // No whole line in the chunk: a line longer than it, or a line still being written.
        if (offset + bytesRead >= size) break;
        chunk *= 2;
        continue;
      }
      offset += lineStart;
    }
    return { entries, done: entries.length < max };
  } finally {
    await fh.close();
  }
}

/** The lines of `path` at `at` ([byte offset, length] each, in file order); none when the file is gone. */
export async function readLinesAt(path: string, at: ReadonlyArray<readonly [number, number]>): Promise<Entry[]> {
  const fh = await opened(path);
  if (fh === undefined) return [];
  try {
    return await Promise.all(at.map(async ([start, length]): Promise<Entry> => {
      const buf = Buffer.alloc(length);
      const { bytesRead } = await fh.read(buf, 0, length, start);
      const line = buf.toString('utf8', 0, bytesRead).replace(/\n$/, '');
      return { record: parseRecord(line), pos: String(start + length) };
    }));
  } finally {
    await fh.close();
  }
}
