// `mkdir -p` that always ends. Node's own recursive mkdir (fs.mkdir with recursive: true,
// sync or not) loops forever at 100% CPU when a folder's parent exists but cannot hold it:
// under /proc, mkdir answers ENOENT, Node takes that for a missing parent, makes the parent
// (it exists) and tries again, without end. Here each missing folder is made once, from the
// nearest existing one down, and the first refusal is the answer.

import { mkdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

function notADirectory(path: string): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error(`ENOTDIR: not a directory, '${path}'`);
  err.code = 'ENOTDIR';
  err.path = path;
  return err;
}

/** Makes `dir` and the folders above it that are missing; rejects with the first refusal. */
export async function makeDirs(dir: string): Promise<void> {
  const missing: string[] = [];
  let at = resolve(dir);
  for (;;) {
    try {
      if (!(await stat(at)).isDirectory()) throw notADirectory(at);
      break;
    } catch (err) {
      const parent = dirname(at);
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === at) throw err;
      missing.push(at);
      at = parent;
    }
  }
  for (const path of missing.reverse()) {
    try {
      await mkdir(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      // Made meanwhile by someone else: fine if it is a folder (a dangling symlink is not).
      const isDir = await stat(path).then((s) => s.isDirectory(), () => false);
      if (!isDir) throw notADirectory(path);
    }
  }
}
