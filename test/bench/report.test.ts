// `npm run bench` keeps the latest table of docs/performance.md current (issue #28 item 5): what
// stands between the page's bench:latest markers is replaced by the run's table and notes, and
// nothing else of the page changes. A page whose markers are missing, repeated or out of order is
// refused rather than rewritten blindly. The goals it checks are issue #34's: ratios to the bare
// hop (or, for the Redis store, to the memory store) in the same run, and two absolute bounds.

import t from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface Figure {
  name: string; unit: string; gateway: number | null; reference: number | null; against: string; ratio: number | null;
  goal: number | null; ratio_goal: number | null; verdict: string; note?: string;
}
interface Report {
  LATEST_START: string;
  LATEST_END: string;
  withLatest(doc: string, block: string): string;
  latestBlock(run: { when: string; commit: string; setup: string; figures: Figure[]; notes: string[] }): string;
  figure(name: string, unit: string, gateway: number | undefined, ref: number | undefined, opts?: { goal?: number; ratioGoal?: number }): Figure;
  figures(m: unknown, opts: { streams: number }): Figure[];
  missed(rows: Figure[]): string[];
  table(rows: Figure[]): string;
  medianRun<T extends Record<string, unknown>>(runs: T[], key: keyof T & string): T & { reps: number[] };
  repsNotes(m: unknown): string[];
}

// bench/ is plain JavaScript, outside the typed tree: imported by URL, typed here.
const report: Report = await import(new URL('../../bench/report.js', import.meta.url).href);
const { LATEST_START: START, LATEST_END: END, withLatest, latestBlock, figure, figures, missed, table, medianRun, repsNotes } = report;
const PAGE = fileURLToPath(new URL('../../docs/performance.md', import.meta.url));

const run = {
  when: '2026-11-27T06:00:00.000Z', commit: 'abc1234', setup: 'node v20.20.2, 2 × test CPU, 10 s per run',
  figures: [figure('CPU per non-streaming request, c=64', 'µs', 155, 104, { ratioGoal: 1.2 }), figure('p50 latency, c=1', 'ms', 0.55, 0.38)],
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
  t.ok(/\n\| CPU per non-streaming request, c=64 \|\s+155 µs \|\s+104 µs \|\s+×1\.49 \|\s+≤ ×1\.20 \|\s+MISSED \|\n/.test(next), 'the table row');
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
  t.same(rows.map((f) => [f.name, f.gateway, f.reference, f.ratio]), [
    ['CPU per /v1/messages request, c=64', 200, 100, 2],
    ['CPU per /v1/responses request, c=64', 220, 100, 2.2],
    ['CPU per /v1/completions request, c=64', 180, 100, 1.8],
  ]);
  t.same(rows.map((f) => [f.ratio_goal, f.verdict]), [[null, ''], [null, ''], [1.2, 'MISSED']], "#34 holds the completions route to ×1.2 of the bare hop's chat request");
  const partial = figures({ dialects: { completions: { cpuUs: 180 } } }, { streams: 500 });
  t.same(partial.filter((f) => f.name.startsWith('CPU per /v1/')).map((f) => f.name), ['CPU per /v1/completions request, c=64'], 'only the routes measured');
});

t.test('the queue phase: the admission queue configured but idle, against the bare hop (goal) and the gateway without a queue', async (t) => {
  const m = { c64: { gw: { cpuUs: 150 }, bare: { cpuUs: 130 } }, queue: { cpuUs: 153 } };
  const rows = figures(m, { streams: 500 }).filter((f) => /queue/.test(f.name));
  t.match(rows, [
    { name: 'CPU per non-streaming request, c=64, admission queue configured, idle', gateway: 153, reference: 130, against: 'bare hop', ratio: 1.18, ratio_goal: 1.2, verdict: 'MET' },
    { name: 'the same, against the gateway without a queue', gateway: 153, reference: 150, against: 'gateway without a queue', ratio: 1.02, ratio_goal: null, verdict: '' },
  ]);
  t.equal(rows.length, 2);
  t.match(table(rows), /\| 150 µs \(gateway without a queue\) \|/, 'the reference cell names the unqueued gateway');
  const over = figures({ ...m, queue: { cpuUs: 160 } }, { streams: 500 }).find((f) => f.name.startsWith('CPU per non-streaming request, c=64, admission'));
  t.match(over, { ratio: 1.23, verdict: 'MISSED' }, 'over ×1.2 of the bare hop is missed');
  t.notOk(figures({ c64: m.c64 }, { streams: 500 }).some((f) => /queue/.test(f.name)), 'no rows when the phase did not run');
});

/** Measurements as run.js takes them, issue #34's figures of 2026-11-27 (memory store 173 µs). */
function measured(over: Record<string, any> = {}) {
  const c1 = (p99: number) => ({ p50: 0.5, p99, n: 1000 });
  return {
    c64: { gw: { cpuUs: 173, rps: 5684 }, bare: { cpuUs: 132, rps: 9000 } },
    stream: { gw: { cpuUs: 218, rps: 4000 }, bare: { cpuUs: 166, rps: 6000 } },
    c1: { gw: c1(2.05), bare: c1(0.88), inside: { p99: 1.1, gc: { ms: 6 }, waitUs: { gw: 21, bare: 4 }, helpersUs: { gw: 22, bare: 3 } } },
    idle: { gw: 73 * 1024, bare: 51 * 1024 },
    settled: { gw: 53 * 1024, bare: 49 * 1024 },
    slow: {
      gw: { n: 500, rssIdle: 73 * 1024, rssBefore: 73 * 1024 + 500 * 34, rssPeak: 73 * 1024 + 500 * 59, openAtPeak: 497, cpuUs: 1600 },
      bare: { n: 500, rssIdle: 51 * 1024, rssBefore: 51 * 1024 + 500 * 84, rssPeak: 51 * 1024 + 500 * 106, openAtPeak: 499, cpuUs: 900 },
    },
    redis: {
      c64: { cpuUs: 216, rps: 3677 }, c1: c1(3.6),
      plain: { n: 300, reads: 3, commands: 63, perCommand: { evalsha: 7 } }, stream: { n: 100, reads: 2.98, commands: 60, perCommand: {} },
    },
    ...over,
  };
}

t.test("issue #46's goals: ratios in the same run, against the bare hop or the memory store", async (t) => {
  const rows = figures(measured(), { streams: 500 });
  const row = (name: string) => {
    const f = rows.find((r) => r.name === name);
    if (f === undefined) throw new Error(`no row ${name}`);
    return f;
  };
  const cpu = row('CPU per non-streaming request, c=64');
  t.match(cpu, { gateway: 173, reference: 132, against: 'bare hop', ratio: 1.31, ratio_goal: 1.2, goal: null, verdict: 'MISSED' });
  t.match(row('CPU per 20-chunk stream, c=64'), { ratio: 1.31, ratio_goal: 1.2, verdict: 'MISSED' });
  t.match(row('p99 latency, c=1'), { ratio: 2.33, ratio_goal: 1.6, verdict: 'MISSED' });
  t.match(row('RSS idle (settled: after the quiet spell)'), { ratio: 1.08, ratio_goal: 1.2, verdict: 'MET' });
  t.match(row('RSS 1 s after start'), { ratio: 1.43, ratio_goal: null, verdict: '' }, '#46: the settled RSS is held, after start is reported');
  t.match(row('RSS growth per open stream'), { gateway: 59, goal: 60, verdict: 'MET' });
  t.match(row('RSS growth per open stream, over the RSS just before them'), { gateway: 25, reference: 22, goal: null, ratio_goal: null, verdict: '' },
    'over the RSS just before the streams: reported, no goal');
  t.match(row('redis store: CPU per non-streaming request, c=64'),
    { gateway: 216, reference: 173, against: 'memory store', ratio: 1.25, ratio_goal: 1.25, verdict: 'MET' });
  t.match(row('redis store: p99 latency, c=1'), { reference: 2.05, against: 'memory store', ratio: 1.76, ratio_goal: 1.5, verdict: 'MISSED' });
  t.match(row('redis store: round trips per request'), { gateway: 3, goal: 3, verdict: 'MET' });
  t.notOk(rows.some((r) => r.goal !== null && [150, 300, 1.5, 80, 120, 50].includes(r.goal)), "none of issue #13's absolute goals is checked");
  t.ok(rows.every((r) => ['', 'MET', 'MISSED', 'n/a'].includes(r.verdict)), 'each verdict is MET, MISSED, n/a or none');

  const text = table(rows);
  t.match(text, /\| redis store: CPU per non-streaming request, c=64\s+\|\s+216 µs \|\s+173 µs \(memory store\) \|\s+×1\.25 \|\s+≤ ×1\.25 of the memory store \|\s+MET \|/);
  t.same(missed(rows), [
    'CPU per non-streaming request, c=64: ×1.31 of the bare hop, goal ≤ ×1.20 (over by 9%)',
    'CPU per 20-chunk stream, c=64: ×1.31 of the bare hop, goal ≤ ×1.20 (over by 9%)',
    'p99 latency, c=1: ×2.33 of the bare hop, goal ≤ ×1.60 (over by 46%)',
    'redis store: p99 latency, c=1: ×1.76 of the memory store, goal ≤ ×1.50 (over by 17%)',
  ], 'the notes name each goal missed and by how much');
});

t.test('round trips: one read over 3 per request in 300 is a miss, shown as such; fewer is met', async (t) => {
  const at = (reads: number) => figures(measured({ redis: { ...measured().redis, plain: { n: 300, reads, commands: 63, perCommand: {} } } }), { streams: 500 })
    .find((r) => r.name === 'redis store: round trips per request');
  t.match(at(901 / 300), { gateway: 3.003, verdict: 'MISSED' }, '3.003 is not rounded to 3');
  t.match(at(899 / 300), { gateway: 2.997, verdict: 'MET' }, "two requests' batches in one read");
  t.match(at(3), { verdict: 'MET' });
});

t.test('a goal this run cannot check is n/a, never MET', async (t) => {
  const per = (m: unknown, streams: number) => figures(m, { streams }).find((r) => r.name === 'RSS growth per open stream');
  t.match(per(measured(), 100), { verdict: 'n/a', note: 'the goal is for 500 streams' });
  const few = measured();
  few.slow.gw.openAtPeak = 256;
  t.match(per(few, 500), { verdict: 'n/a', note: 'only 256 of 500 streams were open at the peak' });
  const { c64: _c64, c1: _c1, ...redisOnly } = measured();
  const rows = figures(redisOnly, { streams: 500 });
  t.match(rows.find((r) => r.name === 'redis store: CPU per non-streaming request, c=64'), { reference: null, verdict: 'n/a' },
    'without the memory store phase there is nothing to compare with');
});

t.test("issue #46's many open streams: RSS per stream reported, no goal", async (t) => {
  const many = { n: 10000, rssIdle: 60 * 1024, rssBefore: 80 * 1024, rssPeak: 80 * 1024 + 10000 * 40, openAtPeak: 9990, cpuUs: 2000 };
  const rows = figures({ ...measured(), many }, { streams: 500 });
  const row = (name: string) => rows.find((r) => r.name === name);
  t.match(row('RSS growth per open stream, 10,000 open, over the RSS just before them'), { gateway: 40, goal: null, ratio_goal: null, verdict: '' });
  t.match(row('RSS growth per open stream, 10,000 open, over the RSS 1 s after start'), { gateway: 42, verdict: '' });
  t.match(row('streams past their first event at the RSS peak, of 10,000'), { gateway: 9990 });
  t.notOk(figures(measured(), { streams: 500 }).some((r) => r.name.includes('10,000')), 'no rows without the phase');
});

t.test("issue #46's medians of 3: the median run kept whole, every run's value noted", async (t) => {
  const runs = [{ cpuUs: 230, rps: 1 }, { cpuUs: 210, rps: 2 }, { cpuUs: 220, rps: 3 }];
  t.strictSame(medianRun(runs, 'cpuUs'), { cpuUs: 220, rps: 3, reps: [230, 210, 220] }, 'the middle one, with its own req/s');
  t.strictSame(medianRun(runs.slice(0, 2), 'cpuUs'), { cpuUs: 210, rps: 2, reps: [230, 210] }, 'of two, the lower');
  t.strictSame(medianRun([{ p99: 2 }], 'p99'), { p99: 2, reps: [2] });
  t.throws(() => medianRun([], 'p99'), /no runs/);
  fc.assert(fc.property(fc.array(fc.double({ noNaN: true, min: 0, max: 1e6 }), { minLength: 1, maxLength: 9 }), (xs) => {
    const r = medianRun(xs.map((cpuUs, i) => ({ cpuUs, i })), 'cpuUs');
    const below = xs.filter((x) => x < r.cpuUs).length;
    const above = xs.filter((x) => x > r.cpuUs).length;
    return below <= (xs.length - 1) / 2 && above <= xs.length / 2 && xs[r.i] === r.cpuUs && r.reps.length === xs.length;
  }), { numRuns: 200 });

  const m: any = measured();
  m.c64.gw = { ...medianRun([{ cpuUs: 219.5 }, { cpuUs: 230.25 }, { cpuUs: 210 }], 'cpuUs'), rps: 4000, total: 40000 };
  m.c64.bare = { ...medianRun([{ cpuUs: 136 }, { cpuUs: 130 }, { cpuUs: 140 }], 'cpuUs'), rps: 6000, total: 60000 };
  m.redis.c1 = medianRun([{ p99: 7.2041, p50: 1 }, { p99: 6.5, p50: 1 }, { p99: 8, p50: 1 }], 'p99');
  const notes = repsNotes(m);
  t.strictSame(notes, [
    'median of 3 runs, CPU per non-streaming request, c=64: gateway 219.5, 230.3, 210 µs; reference 136, 130, 140 µs',
    'median of 3 runs, redis store: p99 latency, c=1: gateway 7.204, 6.5, 8 ms',
  ]);
  const row = figures(m, { streams: 500 }).find((r) => r.name === 'CPU per non-streaming request, c=64');
  t.match(row, { gateway: 219.5, reference: 136, ratio: 1.61 }, 'the table gives the medians');
  t.strictSame(repsNotes(measured()), [], 'nothing to note for single runs');
});

t.test('a variant measured beside its references: the ratio is to those, not to the main phases', async (t) => {
  const m: any = measured();
  m.queue = { cpuUs: 150, refs: { bare: { cpuUs: 125 }, gateway: { cpuUs: 160 } } };
  m.redis.c64 = { cpuUs: 200, rps: 3000, refs: { memory: { cpuUs: 180, rps: 3300 } } };
  m.redis.c1 = { p50: 0.8, p99: 3, n: 1000, refs: { memory: { p50: 0.4, p99: 2.5, n: 1000 } } };
  const rows = figures(m, { streams: 500 });
  const row = (name: string) => rows.find((r) => r.name === name);
  t.match(row('CPU per non-streaming request, c=64, admission queue configured, idle'), { reference: 125, ratio: 1.2, verdict: 'MET' });
  t.match(row('the same, against the gateway without a queue'), { reference: 160, ratio: 0.94 });
  t.match(row('redis store: CPU per non-streaming request, c=64'), { reference: 180, ratio: 1.11, verdict: 'MET' });
  t.match(row('redis store: throughput, non-streaming c=64'), { reference: 3300 });
  t.match(row('redis store: p99 latency, c=1'), { reference: 2.5, ratio: 1.2, verdict: 'MET' });
  t.match(row('redis store: p50 latency, c=1'), { reference: 0.4 });
  const old = measured();
  t.match(figures({ ...old, queue: { cpuUs: 150 } }, { streams: 500 }).find((r) => r.name.startsWith('CPU per non-streaming request, c=64, admission')),
    { reference: 132 }, 'without refs (older results), the main phase\'s figure');
});
