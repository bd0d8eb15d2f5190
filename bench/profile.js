// Where a gateway CPU profile spends its time, by area: `node bench/profile.js FILE.cpuprofile
// [--window SECONDS] [--top N] [--requests N]`. Take the profile with
//   BENCH_PHASES=c64 BENCH_WARMUP_SECONDS=0 BENCH_GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR" npm run bench
// Only the busiest window of the given length (default: the whole profile) counts, so start-up
// and idle time stay out. Two views: self time by the area of the function itself, and each
// sample charged to the innermost frame that belongs to a named area (logging, metrics, ...),
// so that the JSON, buffers and writes a logger or a limiter causes count against it.

import { readFileSync } from 'node:fs';

const [file, ...rest] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: node bench/profile.js FILE.cpuprofile [--window SECONDS] [--top N] [--requests N]\n');
  process.exit(2);
}
const opt = (name, dflt) => { const i = rest.indexOf(`--${name}`); return i >= 0 ? Number(rest[i + 1]) : dflt; };
const WINDOW_US = opt('window', 0) * 1e6;
const TOP = opt('top', 25);
const REQUESTS = opt('requests', 0); // requests served in the window: adds µs per request

const AREAS = [
  ['logging', /node_modules\/(pino|sonic-boom|pino-std-serializers|fast-redact|thread-stream|on-exit-leak-free|quick-format-unescaped|atomic-sleep)\/|lib\/observe\/log\./],
  ['metrics', /node_modules\/(prom-client|tdigest|bintrees)\/|lib\/observe\/metrics\./],
  ['token counting', /node_modules\/gpt-tokenizer\/|lib\/tokens\//],
  ['limiter', /node_modules\/rate-limiter-flexible\/|lib\/limits\//],
  ['metering / store', /lib\/(billing|store)\//],
  ['validation', /node_modules\/(ajv)\/|lib\/hub\/validate\.|lib\/pipeline\/checks\./],
  ['auth', /lib\/auth\//],
  ['undici (upstream client)', /node_modules\/undici\//],
  ['gateway: pipeline & dialects', /lib\/(pipeline|dialects|hub)\//],
  ['gateway: provider translation', /lib\/(providers|sse)\//],
  ['gateway: http & routing', /lib\/(http\/|routes\/|gateway\.|upstream\/|state\.|catalog\/)/],
  ['gateway: other', /\/lib\//],
  ['node http/net', /^node:(_http_|http|net|internal\/(http|net|stream_base|js_stream))|node:internal\/streams|node:stream/],
  ['node other', /^node:/],
];
const NAMED = new Set(AREAS.slice(0, 8).map(([a]) => a));

function areaOf(frame) {
  const { url, functionName: name } = frame;
  if (name === '(garbage collector)') return 'GC';
  if (name === '(program)') return 'V8/native (program)';
  if (name === '(idle)') return 'idle';
  if (url.startsWith('wasm://')) return 'undici (upstream client)'; // llhttp, undici's HTTP parser
  if (url === '') {
    if (name === 'parse' || name === 'stringify') return 'JSON';
    if (/^(writev|writeBuffer|writeUtf8String|writeLatin1String|onStreamRead|close|shutdown)$/.test(name)) return 'node http/net';
    return 'native builtins';
  }
  for (const [area, re] of AREAS) if (re.test(url)) return area;
  return 'other';
}

const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

// Sample times, and the busiest window (the most non-idle samples) of WINDOW_US.
const times = [];
let t = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) { t += profile.timeDeltas[i]; times.push(t); }
const idle = (i) => byId.get(profile.samples[i]).callFrame.functionName === '(idle)';
let from = 0;
let to = profile.samples.length;
if (WINDOW_US > 0) {
  let best = -1;
  let busy = 0;
  let lo = 0;
  for (let hi = 0; hi < times.length; hi++) {
    if (!idle(hi)) busy++;
    while (times[hi] - times[lo] > WINDOW_US) { if (!idle(lo)) busy--; lo++; }
    if (busy > best) { best = busy; from = lo; to = hi + 1; }
  }
}

const self = new Map();
const charged = new Map();
const fns = new Map();
let total = 0;
let idleUs = 0;
const add = (m, k, v) => m.set(k, (m.get(k) ?? 0) + v);
for (let i = from; i < to; i++) {
  const dt = i + 1 < times.length ? times[i + 1] - times[i] : 0;
  const node = byId.get(profile.samples[i]);
  const area = areaOf(node.callFrame);
  if (area === 'idle') { idleUs += dt; continue; }
  total += dt;
  add(self, area, dt);
  const f = node.callFrame;
  add(fns, `${f.functionName || '(anonymous)'} ${f.url.replace(/^.*\/node_modules\//, '').replace(/^file:\/\/.*?\/(dist\/)?/, '')}:${f.lineNumber + 1}\t${area}`, dt);
  let chargedTo = area;
  for (let id = node.id; id !== undefined; id = parent.get(id)) {
    const a = areaOf(byId.get(id).callFrame);
    if (NAMED.has(a)) { chargedTo = a; break; }
  }
  add(charged, chargedTo, dt);
}

const pct = (v) => `${((100 * v) / total).toFixed(1).padStart(5)}%${REQUESTS > 0 ? ` ${(v / REQUESTS).toFixed(1).padStart(6)} µs` : ''}`;
const ms = (v) => `${(v / 1000).toFixed(0).padStart(7)} ms`;
const out = [];
out.push(`${file}: ${ms(total).trim()} busy, ${ms(idleUs).trim()} idle in ${((times[to - 1] - times[from]) / 1e6).toFixed(1)} s ` +
  `(${WINDOW_US > 0 ? `the busiest ${WINDOW_US / 1e6} s window` : 'the whole profile'})`);
out.push('\nself time by area                          | charged to the innermost named area');
const areas = [...new Set([...self.keys(), ...charged.keys()])].sort((a, b) => (charged.get(b) ?? 0) - (charged.get(a) ?? 0));
for (const a of areas) out.push(`${a.padEnd(30)} ${pct(self.get(a) ?? 0)} ${ms(self.get(a) ?? 0)} | ${pct(charged.get(a) ?? 0)}`);
out.push(`\ntop ${TOP} functions by self time`);
for (const [k, v] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
  const [fn, area] = k.split('\t');
  out.push(`${pct(v)} ${ms(v)}  ${fn}  [${area}]`);
}
process.stdout.write(`${out.join('\n')}\n`);
