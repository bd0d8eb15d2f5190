// Earlier versions kept every usage record in one file, `<storeDir>/usage.jsonl`; the memory
// store with a path keeps one file per UTC day (./usage-files.ts). This moves the one into the
// other, once, on open.

import { createReadStream } from 'node:fs';
import { mkdir, open, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { DAY_MS, parseRecord } from '../usage-records.js';

/** The single file of earlier versions, migrated into day files on open. */
export const LEGACY_USAGE_FILE = 'usage.jsonl';

/**
 * An earlier version kept every record in `<storeDir>/usage.jsonl`. Its lines are copied into
 * day files in a fresh folder, which is renamed into place once complete (a crash midway leaves
 * the old file, and the copy starts over), then the old file is removed.
 */
export async function migrateLegacy(storeDir: string, dir: string, dayName: (day: number) => string): Promise<void> {
  const legacy = join(storeDir, LEGACY_USAGE_FILE);
  if (!(await exists(legacy))) return;
  if (await exists(dir)) {
    await unlink(legacy); // copied before a crash kept the old file from being removed
    return;
  }
  const tmp = `${dir}.migrating`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp);
  const files = new Map<number, FileHandle>();
  try {
    const lines = createInterface({ input: createReadStream(legacy, { encoding: 'utf8' }), crlfDelay: Infinity });
    for await (const line of lines) {
      const r = line === '' ? undefined : parseRecord(line);
      if (r === undefined) continue;
      const day = Math.floor(r.at / DAY_MS);
      let fh = files.get(day);
      if (fh === undefined) files.set(day, (fh = await open(join(tmp, dayName(day)), 'a')));
      await fh.write(`${JSON.stringify(r)}\n`);
    }
    for (const fh of files.values()) await fh.datasync();
  } finally {
    for (const fh of files.values()) await fh.close();
  }
  await rename(tmp, dir);
  await unlink(legacy);
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
}
