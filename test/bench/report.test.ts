// `npm run bench` keeps the latest table of docs/performance.md current (issue #28 item 5): what
// stands between the page's bench:latest markers is replaced by the run's table and notes, and
// nothing else of the page changes. A page whose markers are missing, repeated or out of order is
// refused rather than rewritten blindly.

import t from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface Figure { name: string; unit: string; gateway: number | null; bare_hop: number | null; ratio: number | null; goal: number | null; verdict: string }
interface Report {
  LATEST_START: string;
  LATEST_END: string;
  withLatest(doc: string, block: string): string;
  latestBlock(run: { when: string; commit: string; setup: string; figures: Figure[]; notes: string[] }): string;
  figure(name: string, unit: string, gateway: number | undefined, bare: number | undefined, opts?: { goal?: number }): Figure;
  figures(m: Record<string, any>, opts: { streams: number }): Figure[];
}

// bench/ is plain JavaScript, outside the typed tree: imported by URL, typed here.
const report: Report = await import(new URL('../../bench/report.js', import.meta.url).href);
const { LATEST_START: START, LATEST_END: END, withLatest, latestBlock, figure, figures } = report;
const PAGE = fileURLToPath(new URL('../../docs/performance.md', import.meta.url));

const run = {
  when: '2026-11-27T06:00:00.000Z', commit: 'abc1234', setup: 'node v20.20.2, 2 × test CPU, 10 s per run',
  figures: [figure('CPU per non-streaming request, c=64', 'µs', 155, 104, { goal: 150 }), figure('p50 latency, c=1', 'ms', 0.55, 0.38)],
  notes: ['c=1: upstream alone p50 0.2 ms'],
};

t.test('the page holds the markers, and a run replaces only what stands between them', async (t) => {
  const page = readFileSync(PAGE, 'utf8');
  t.equal(page.split(START).length, 2, 'docs/performance.md holds the start marker once');
  t.equal(page.split(END).length, 2, 'and the end marker once');
  const block = latestBlock(run);
  const next = withLatest(page, block);
  const before = page.slice(0, page.indexOf(START) + START.length);
  const after = page.slice(page.indexOf(END));
  t.ok(next.startsWith(before), 'everything before the start marker is kept');
  t.ok(next.endsWith(after), 'everything from the end marker on is kept');
  t.equal(next, `${before}\n${block}\n${after}`, 'the run stands alone between the markers');
  t.ok(/\n\| CPU per non-streaming request, c=64 \|\s+155 µs \|\s+104 µs \|\s+×1\.49 \|\s+≤ 150 µs \|\s+MISS \|\n/.test(next), 'the table row');
  t.ok(next.includes(`${START}\nTaken 2026-11-27T06:00:00.000Z by \`npm run bench\`, of commit abc1234: node v20.20.2`), 'when, of what and where');
  t.ok(next.includes(`\n- c=1: upstream alone p50 0.2 ms\n${END}`), 'the notes, last');
  t.equal(withLatest(next, block), next, 'a second run with the same figures changes nothing');
  t.equal(withLatest(withLatest(page, 'first'), block), next, 'a later run replaces an earlier one whole');
});

t.test('a page without its markers once each, in order, is refused', async (t) => {
  t.throws(() => withLatest('# Performance\n\nno markers\n', 'x'), /must hold .* once each \(found 0 and 0\)/);
  t.throws(() => withLatest(`${START}\n${END}\n${START}\n${END}\n`, 'x'), /found 2 and 2/);
  t.throws(() => withLatest(`${START}\nonly the start\n`, 'x'), /found 1 and 0/);
  t.throws(() => withLatest(`${END}\n${START}\n`, 'x'), /comes before/);
});

t.test('whatever surrounds the markers, only the inside changes', async (t) => {
  const text = fc.string({ unit: fc.constantFrom('a', '\n', '|', '<', '-', '!', '`', 'é', ' ') });
  fc.assert(fc.property(text, text, text, text, (head, old, tail, block) => {
    fc.pre(![head, old, tail, block].some((s) => s.includes(START) || s.includes(END)));
    const doc = `${head}${START}${old}${END}${tail}`;
    return withLatest(doc, block) === `${head}${START}\n${block.trim()}\n${END}${tail}`;
  }), { numRuns: 300, seed: 28 });
  t.pass('300 generated pages');
});

t.test('the dialects phase: a CPU row per route beside chat, each against the bare hop\'s chat request', async (t) => {
  const m = { c64: { gw: { cpuUs: 150 }, bare: { cpuUs: 100 } }, dialects: { messages: { cpuUs: 200 }, responses: { cpuUs: 220 }, completions: { cpuUs: 180 } } };
  const rows = figures(m, { streams: 500 }).filter((f) => /^CPU per \/v1\//.test(f.name));
  t.same(rows.map((f) => [f.name, f.gateway, f.bare_hop, f.ratio]), [
    ['CPU per /v1/messages request, c=64', 200, 100, 2],
    ['CPU per /v1/responses request, c=64', 220, 100, 2.2],
    ['CPU per /v1/completions request, c=64', 180, 100, 1.8],
  ]);
  const partial = figures({ dialects: { completions: { cpuUs: 180 } } }, { streams: 500 });
  t.same(partial.filter((f) => f.name.startsWith('CPU per /v1/')).map((f) => f.name), ['CPU per /v1/completions request, c=64'], 'only the routes measured');
});
