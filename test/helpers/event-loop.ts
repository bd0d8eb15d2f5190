// For tests that bound how long the gateway holds its event loop (CONTRACT sections 16 and 21),
// as test/pipeline/bounded-work.test.ts does: the gateway child preloads
// fixtures/event-loop-probe.mjs and reports its own longest stall on SIGUSR2, while this process
// asks /healthz every 10 ms.

import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import type { ChildGateway } from './child.js';

export const PROBE = fileURLToPath(new URL('../fixtures/event-loop-probe.mjs', import.meta.url));

/** Words of random letters: the tokenizer's slowest ordinary input (no repeats to remember). */
export function randomWords(chars: number, seed: number): string {
  const out: string[] = [];
  let x = seed;
  let n = 0;
  while (n < chars) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    let w = '';
    for (let i = 0, len = 1 + (x % 9); i < len; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      w += String.fromCharCode(97 + (x % 26));
    }
    out.push(w);
    n += w.length + 1;
  }
  return out.join(' ');
}

/**
 * Runs `work` while asking /healthz every 10 ms; resolves with work's result and the slowest
 * /healthz answer (ms). The gateway is another process: its event loop, not ours, is measured.
 */
export async function watchingHealth<T>(url: string, work: () => Promise<T>): Promise<{ result: T; slowest: number; polls: number }> {
  let slowest = 0;
  let polls = 0;
  let done = false;
  const poller = (async () => {
    while (!done) {
      const started = performance.now();
      const res = await request(`${url}/healthz`);
      await res.body.text();
      slowest = Math.max(slowest, performance.now() - started);
      polls++;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  try {
    const result = await work();
    return { result, slowest, polls };
  } finally {
    done = true;
    await poller;
  }
}

/** The longest event-loop stall the gateway child saw since the last ask (ms): its own monitor's word. */
export async function stallSince(gw: ChildGateway, seen: { n: number }): Promise<number> {
  const want = seen.n++;
  gw.proc.kill('SIGUSR2');
  const line = new RegExp(`event-loop-max ${want} ([0-9.]+)`);
  for (let i = 0; i < 500; i++) {
    const m = line.exec(gw.output());
    if (m !== null) return Number(m[1]);
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`the gateway did not report its event loop: ${gw.output().slice(-500)}`);
}
