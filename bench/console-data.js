// What the operator console reads, on a big store: `npm run bench:console-data` (issue #30,
// CONTRACT section 12: "with 1,000,000 usage records, Overview and a Usage page answer within
// one second").
//
// For each store (memory with a path, then Redis: a throwaway redis-server), this process:
//   1. seeds BENCH_RECORDS usage records (default 1,000,000) and BENCH_ACCOUNTS accounts
//      through the store API itself (MemoryStore / RedisStore from dist/, recordUsage in
//      batches of BENCH_BATCH at once), as the gateway would have written them over the last
//      BENCH_DAYS days: 5 keys per account, 20 models with a skew, 5% errors, and one rare
//      model (`rare-model`, every 20,000th record);
//   2. starts `tollgate serve` on that store as a child process (a YAML config in a temp
//      folder) and waits for /readyz (for the memory store: the time to open the day files and
//      rebuild the totals from them);
//   3. times, over real HTTP, BENCH_RUNS (default 5) calls each of GET /admin/usage/hourly
//      (24 h, 24 h of one account, 30 days), /admin/usage/top by account, key and model (24 h,
//      30 days), /admin/accounts, /admin/usage/records pages (limit 100: unfiltered, by
//      account, by key, by model, by the rare model, and the 5th page of a key's records
//      following next_cursor), GET /admin/usage (30 days, of all and of one account; grouped by
//      tag, by an account's end users, by day and tag: CONTRACT section 20) and a
//      key's own GET /v1/usage (its 30 days by day and model; CONTRACT section 21);
//   4. prints a table (median and slowest of the runs, the rows of the first answer) and writes
//      it into docs/performance.md between <!-- console-data --> and <!-- /console-data -->
//      (BENCH_DOC; nothing else of that file is touched).
// A non-2xx answer fails the run (exit 1). Environment: BENCH_RECORDS, BENCH_ACCOUNTS,
// BENCH_DAYS, BENCH_BATCH, BENCH_RUNS, BENCH_STORES (memory,redis), BENCH_DOC.

import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { MemoryStore } from '../dist/lib/store/memory/store.js';
import { RedisStore } from '../dist/lib/store/redis/store.js';
import { keyIdOf, sha256Hex } from '../dist/lib/store/digest.js';
import { HOST, diedError, freePort, log, rssKb, spawnChild, startRedis, stopAll, stopChild } from './procs.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const env = (name, fallback) => {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be a positive integer`);
  return n;
};
const RECORDS = env('BENCH_RECORDS', 1_000_000);
const ACCOUNTS = env('BENCH_ACCOUNTS', 1000);
const DAYS = env('BENCH_DAYS', 30);
const BATCH = env('BENCH_BATCH', 2000);
const RUNS = env('BENCH_RUNS', 5);
const STORES = (process.env.BENCH_STORES ?? 'memory,redis').split(',').map((s) => s.trim()).filter(Boolean);
const DOC = process.env.BENCH_DOC ?? join(root, 'docs/performance.md');
const ADMIN = 'bench-console-admin-token';
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const MODELS = Array.from({ length: 20 }, (_, i) => `model-${String(i).padStart(2, '0')}`);
const RARE = 'rare-model';
const TAGS = Array.from({ length: 30 }, (_, i) => `tag-${String(i).padStart(2, '0')}`);

// A small deterministic generator (mulberry32): the same records on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const accountId = (i) => `acct-${String(i).padStart(4, '0')}`;
/** Key k (0-4) of account a: a real key in the store (its digest from a made-up plaintext). */
const keyDigest = (a, k) => sha256Hex(`tg_bench_${a}_${k}`);
const KEY_IDS = Array.from({ length: ACCOUNTS * 5 }, (_, i) => keyIdOf(keyDigest(Math.floor(i / 5), i % 5)));
/** The plaintext of key 2 of account 123 (KEY_IDS[123 * 5 + 2]), for its own GET /v1/usage. */
const KEY_PLAIN = 'tg_bench_123_2';

/** Record i of RECORDS, its time spread evenly over the last DAYS days (oldest first). */
function makeRecord(i, now, rand) {
  const account = Math.floor(rand() * ACCOUNTS);
  const key = Math.floor(rand() * 5);
  const rare = i % 20_000 === 7;
  // A skew: model-00 is used most, model-19 least.
  const model = rare ? RARE : MODELS[Math.min(MODELS.length - 1, Math.floor(-Math.log(1 - rand()) * 4))];
  const error = rand() < 0.05;
  const prompt = 20 + Math.floor(rand() * 2000);
  const completion = error ? 0 : 5 + Math.floor(rand() * 500);
  return {
    request_id: `bench-${i}`,
    at: now - DAYS * DAY + Math.floor((i / RECORDS) * DAYS * DAY),
    account: accountId(account),
    key_id: KEY_IDS[account * 5 + key], team: null,
    model, provider: 'bench', target: 'http://10.0.0.1:8000/v1', route: '/v1/chat/completions',
    status: error ? (rand() < 0.5 ? 429 : 503) : 200,
    prompt_tokens: prompt, cached_tokens: 0, completion_tokens: completion,
    units: error ? 0 : prompt + 2 * completion,
    usage_source: error ? 'none' : 'upstream', duration_ms: 100 + Math.floor(rand() * 900), ttft_ms: error ? null : 50, queue_ms: 0,
    // Attribution (CONTRACT section 20): 0 to 3 of 30 tags (skewed), an end user of 200 per account on most.
    tags: [...new Set(Array.from({ length: Math.floor(rand() * 4) }, () => TAGS[Math.min(TAGS.length - 1, Math.floor(-Math.log(1 - rand()) * 6))]))],
    end_user: rand() < 0.8 ? `user-${Math.floor(rand() * 200)}` : null,
  };
}

async function seed(store, now) {
  const t0 = performance.now();
  for (let a = 0; a < ACCOUNTS; a += BATCH) {
    await Promise.all(Array.from({ length: Math.min(BATCH, ACCOUNTS - a) }, (_, j) => store.createAccount({ id: accountId(a + j), plan: 'free', balance_units: 1_000_000 })));
  }
  for (let i = 0; i < KEY_IDS.length; i += BATCH) {
    await Promise.all(KEY_IDS.slice(i, i + BATCH).map((id, j) => {
      const n = i + j;
      return store.createKey({ id, account: accountId(Math.floor(n / 5)), digest: keyDigest(Math.floor(n / 5), n % 5) });
    }));
  }
  const rand = rng(20261127);
  let last = performance.now();
  for (let i = 0; i < RECORDS; i += BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(RECORDS, i + BATCH); j++) batch.push(store.recordUsage(makeRecord(j, now, rand), `bench-${j}`));
    await Promise.all(batch);
    if (performance.now() - last > 10_000) {
      last = performance.now();
      log(`  ${i + BATCH} records (${((last - t0) / 1000).toFixed(0)} s)`);
    }
  }
  return (performance.now() - t0) / 1000;
}

async function call(origin, path, token = ADMIN) {
  const t0 = performance.now();
  const res = await fetch(`${origin}${path}`, { headers: { authorization: `Bearer ${token}` } });
  const text = await res.text();
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${text.slice(0, 300)}`);
  return { ms, body: JSON.parse(text) };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The queries the console makes, each timed RUNS times; returns table rows. */
async function measure(origin, now) {
  const iso = (t) => new Date(t).toISOString();
  const month = `since=${iso(now - 30 * DAY)}&until=${iso(now + 1)}`;
  const acct = accountId(123);
  const key = KEY_IDS[123 * 5 + 2];
  const queries = [
    ['usage/hourly (24 h)', '/admin/usage/hourly', (b) => `${b.hours.length} hours, ${b.hours.reduce((n, h) => n + h.requests, 0)} requests`],
    [`usage/hourly (24 h, account=${acct})`, `/admin/usage/hourly?account=${acct}`, (b) => `${b.hours.reduce((n, h) => n + h.requests, 0)} requests`],
    ['usage/hourly (30 days)', `/admin/usage/hourly?${month}`, (b) => `${b.hours.length} hours, ${b.hours.reduce((n, h) => n + h.requests, 0)} requests`],
    ['usage/top by=account (24 h)', '/admin/usage/top?by=account&limit=10', (b) => `${b.rows.length} rows, first ${b.rows[0]?.units} units`],
    ['usage/top by=key (24 h)', '/admin/usage/top?by=key&limit=10', (b) => `${b.rows.length} rows`],
    ['usage/top by=model (24 h)', '/admin/usage/top?by=model&limit=10', (b) => `${b.rows.length} rows`],
    ['usage/top by=account (30 days)', `/admin/usage/top?by=account&limit=10&${month}`, (b) => `${b.rows.length} rows`],
    ['usage/top by=key (30 days)', `/admin/usage/top?by=key&limit=10&${month}`, (b) => `${b.rows.length} rows`],
    ['usage/top by=model (30 days)', `/admin/usage/top?by=model&limit=10&${month}`, (b) => `${b.rows.length} rows`],
    ['accounts (limit 100)', '/admin/accounts?limit=100', (b) => `${b.accounts.length} accounts`],
    ['usage/records (unfiltered)', '/admin/usage/records?limit=100', (b) => `${b.records.length} records`],
    [`usage/records (account=${acct})`, `/admin/usage/records?limit=100&account=${acct}`, (b) => `${b.records.length} records`],
    ['usage/records (key)', `/admin/usage/records?limit=100&key=${key}`, (b) => `${b.records.length} records`],
    ['usage/records (model=model-05)', '/admin/usage/records?limit=100&model=model-05', (b) => `${b.records.length} records`],
    [`usage/records (model=${RARE}: ${Math.ceil(RECORDS / 20_000)} records)`, `/admin/usage/records?limit=100&model=${RARE}`, (b) => `${b.records.length} records`],
    ['usage/records (key, last 24 h)', `/admin/usage/records?limit=100&key=${key}&since=${iso(now - DAY)}`, (b) => `${b.records.length} records`],
    ['usage report (30 days, all accounts)', `/admin/usage?since=${iso(now - 30 * DAY).slice(0, 10)}`, (b) => `${b.requests} requests, ${Object.keys(b.by_key).length} keys`],
    [`usage report (30 days, account=${acct})`, `/admin/usage?account=${acct}&since=${iso(now - 30 * DAY).slice(0, 10)}`, (b) => `${b.requests} requests`],
    ['usage grouped by tag (30 days, all accounts)', `/admin/usage?group_by=tag&since=${iso(now - 30 * DAY).slice(0, 10)}`, (b) => `${b.groups.length} groups, ${b.totals.requests} requests`],
    [`usage grouped by end_user (30 days, account=${acct})`, `/admin/usage?group_by=end_user&account=${acct}&since=${iso(now - 30 * DAY).slice(0, 10)}`, (b) => `${b.groups.length} groups`],
    ['usage grouped by day and tag (30 days, all accounts)', `/admin/usage?group_by=day,tag&since=${iso(now - 30 * DAY).slice(0, 10)}`, (b) => `${b.groups.length} groups`],
    ['v1/usage (a key\'s 30 days, by day and model)', '/v1/usage', (b) => `${b.data.length} rows, ${b.data.reduce((n, r) => n + r.requests, 0)} requests`, KEY_PLAIN],
  ];
  const rows = [];
  // What the Overview asks first after a start (its last 24 hours): timed apart, once. The
  // memory store answers as soon as the day files of those hours are counted (newest first).
  for (const [name, path] of [['usage/hourly (24 h), first call', '/admin/usage/hourly'], ['usage/top by=account (24 h), first call', '/admin/usage/top?by=account&limit=10']]) {
    const { ms } = await call(origin, path);
    rows.push({ name, median: ms, max: ms, note: 'first after start: memory waits for the last two days\' files to be counted' });
    log(`  ${name}: ${ms.toFixed(1)} ms`);
  }
  // The first tops over finished days sum those days from their hours (Redis; the days a
  // gateway sees end are summed as they end): timed apart, once.
  for (const by of ['account', 'key', 'model']) {
    const { ms } = await call(origin, `/admin/usage/top?by=${by}&limit=10&${month}`);
    rows.push({ name: `usage/top by=${by} (30 days), first call`, median: ms, max: ms, note: 'first after start: memory waits for the other day files to be counted, Redis sums the finished days' });
    log(`  first top by ${by} (30 days): ${ms.toFixed(1)} ms`);
  }
  for (const [name, path, describe, token] of queries) {
    const times = [];
    let first;
    for (let i = 0; i < RUNS; i++) {
      const { ms, body } = await call(origin, path, token);
      times.push(ms);
      first ??= body;
    }
    rows.push({ name, median: median(times), max: Math.max(...times), note: describe(first) });
    log(`  ${name}: median ${median(times).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms (${describe(first)})`);
  }
  // The 5th page of a key's records, following next_cursor: each page timed.
  const times = [];
  let got = 0;
  for (let r = 0; r < RUNS; r++) {
    let path = `/admin/usage/records?limit=100&key=${key}`;
    got = 0;
    for (let p = 0; p < 5; p++) {
      const { ms, body } = await call(origin, path);
      times.push(ms);
      got += body.records.length;
      if (body.next_cursor === null) break;
      path = `/admin/usage/records?limit=100&key=${key}&cursor=${encodeURIComponent(body.next_cursor)}`;
    }
  }
  rows.push({ name: 'usage/records (key, pages 1-5 by next_cursor)', median: median(times), max: Math.max(...times), note: `${got} records in 5 pages` });
  return rows;
}

function configFor(store) {
  return {
    server: { port: 0 },
    admin: { token: ADMIN },
    plans: { free: { paid: false } },
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'echo-small', provider: 'echo' }],
    store,
  };
}

async function runStore(kind, work) {
  const now = Date.now();
  let store;
  let storeConfig;
  let redis;
  if (kind === 'memory') {
    const path = join(work, 'store');
    store = await MemoryStore.open({ path, fsyncMs: 1000 });
    storeConfig = { kind: 'memory', path };
  } else {
    redis = await startRedis(undefined, work);
    const prefix = 'bench-console:';
    store = await RedisStore.open({ url: redis.url, prefix, commandTimeoutMs: 10_000 });
    storeConfig = { kind: 'redis', url: redis.url, prefix };
  }
  log(`${kind}: seeding ${RECORDS} records and ${ACCOUNTS} accounts`);
  const seedS = await seed(store, now);
  await store.close();
  log(`${kind}: seeded in ${seedS.toFixed(1)} s`);
  const configPath = join(work, `${kind}.yaml`);
  await writeFile(configPath, YAML.stringify(configFor(storeConfig)));
  const t0 = performance.now();
  const gw = await serve(configPath, kind);
  const startS = (performance.now() - t0) / 1000;
  log(`${kind}: gateway ready in ${startS.toFixed(1)} s`);
  const rss = redis === undefined ? undefined : await redisMemory(redis.url);
  try {
    const rows = await measure(gw.origin, now);
    return { kind, seedS, startS, rows, redisMb: rss, gatewayMb: Math.round(rssKb(gw.child.pid) / 1024) };
  } finally {
    await stopChild(gw.child);
    if (redis !== undefined) await stopChild(redis.child);
  }
}

/** `tollgate serve` on `configPath`, ready once /readyz answers 200 (patient: a big store opens slowly). */
async function serve(configPath, kind) {
  const port = await freePort();
  const child = spawnChild(`gateway (${kind})`, process.execPath, [join(root, 'bin/tollgate.js'), 'serve', '--config', configPath, '--host', HOST, '--port', String(port)], { cwd: root });
  const origin = `http://${HOST}:${port}`;
  const deadline = Date.now() + 600_000;
  for (;;) {
    if (child.exitInfo) throw diedError(child);
    try {
      const res = await fetch(`${origin}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error(`gateway (${kind}) not ready in 600 s\n${child.tail}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, origin };
}

async function redisMemory(url) {
  const { Redis } = await import('ioredis');
  const c = new Redis(url);
  try {
    const info = await c.info('memory');
    const m = /used_memory:(\d+)/.exec(info);
    return m ? Math.round(Number(m[1]) / 1048576) : undefined;
  } finally {
    c.disconnect();
  }
}

function table(results) {
  const lines = [];
  const names = results[0].rows.map((r) => r.name);
  lines.push(`| query (over HTTP, ${RUNS} runs) | ${results.map((r) => `${r.kind}: median / slowest ms`).join(' | ')} | answer |`);
  lines.push(`|---|${results.map(() => '---:').join('|')}|---|`);
  for (let i = 0; i < names.length; i++) {
    lines.push(`| ${names[i]} | ${results.map((r) => `${r.rows[i].median.toFixed(1)} / ${r.rows[i].max.toFixed(1)}`).join(' | ')} | ${results[0].rows[i].note} |`);
  }
  return lines.join('\n');
}

async function main() {
  const work = await mkdtemp(join(tmpdir(), 'tollgate-console-bench-'));
  const results = [];
  try {
    for (const kind of STORES) results.push(await runStore(kind, work));
  } finally {
    await stopAll(5000);
    await rm(work, { recursive: true, force: true });
  }
  const when = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const setup = results.map((r) => `${r.kind}: seeded in ${r.seedS.toFixed(1)} s, gateway ready in ${r.startS.toFixed(1)} s, its RSS after the queries ${r.gatewayMb} MB${r.redisMb === undefined ? '' : `, Redis used ${r.redisMb} MB`}`).join('; ');
  const text = `### Latest run (${when} UTC)\n\n${RECORDS.toLocaleString('en-US')} usage records over ${DAYS} days, ${ACCOUNTS} accounts, ${ACCOUNTS * 5} keys, ${MODELS.length + 1} models. ${setup}.\n\n${table(results)}\n`;
  process.stdout.write(`\n${text}\n`);
  await writeSection(text);
}

/** Replaces the text between the markers (adding them, with the section's head, once). */
async function writeSection(latest) {
  let doc = '';
  try { doc = await readFile(DOC, 'utf8'); } catch { /* a new file */ }
  const open = '<!-- console-data -->';
  const close = '<!-- /console-data -->';
  const body = `${open}\n${SECTION_HEAD}\n${latest}${close}`;
  const a = doc.indexOf(open);
  const b = doc.indexOf(close);
  doc = a >= 0 && b > a ? doc.slice(0, a) + body + doc.slice(b + close.length) : `${doc.trimEnd()}\n\n${body}\n`;
  await writeFile(DOC, doc);
  log(`wrote the console section of ${DOC}`);
}

const SECTION_HEAD = `## The operator console's data on a big store

\`npm run bench:console-data\` (bench/console-data.js) seeds usage records through the store API
into the durable memory store (\`store.path\`) and into Redis, starts \`tollgate serve\` on each,
and times what the console asks over real HTTP: the hourly series and the top accounts, keys
and models (answered from totals kept as records are written: \`lib/store/usage-totals.ts\`),
the account list, and pages of usage records with and without filters (indexes: postings per
day in the memory store, a filtering script and the hour totals in Redis). The contract asks
for one second (CONTRACT section 12). How to read it:

- The first calls after the gateway starts are timed apart, as one-off. The memory store
  counts its day files on open in the background, newest day first, marking each day counted
  as it completes (the gateway serves meanwhile): a totals query waits only for the days its
  range covers, so the Overview's first 24 hours wait for the last two days' files, a 30-day
  top for all of them; a filtered records page reads the lines of a day not yet counted, and
  that day's postings once it is. Redis sums each finished day's totals from its hours the
  first time a range needs the day (a gateway that sees a day end sums it then, in the
  background).
- A records page stops looking once it has examined 20,000 records and answers with what it
  found and a \`next_cursor\`: a page with fewer records than asked is one that hit that bound.
- \`GET /admin/usage\` and a key's \`GET /v1/usage\` read totals too (CONTRACT section 21):
  whatever the history's length, they read no record (\`tollgate_usage_records_read_total\`).
- Seeding writes through the store API, one record at a time in batches of concurrent writes;
  on Redis each record is one script (the stream entry, its write mark, its hour's count and
  its totals in nine columns).
`;

main().catch((err) => {
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exitCode = 1;
  void stopAll(1000);
});
