// Memory as a test measures it: after full collections, once the array-buffer sweeper has run.

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let gc: (() => void) | undefined;

/** process.memoryUsage() after three full collections 20 ms apart (array buffers are freed by a sweeper after the collection). */
export async function settledMemory(): Promise<NodeJS.MemoryUsage> {
  if (gc === undefined) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return process.memoryUsage();
}
