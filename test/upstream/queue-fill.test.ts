// No replica idles while requests wait (CONTRACT section 13; issue #46), on real sockets: a
// real gateway in front of two fake replicas of N slots each (max_outstanding N), overloaded
// with streamed and whole requests of four accounts in three priority bands. The fakes record
// every request that arrives and every answer they end, and how many they have in flight at
// each; the test ends answers a few at a time, and after each release counts the event-loop
// turns (setImmediate) until the gateway has filled the freed slots again. Counted in turns,
// not milliseconds: a handover that waited for a timer (the queue's 100 ms poll, a scrape)
// would take thousands of turns; one made as the upstream's answer ends takes a handful
// (the answer's end read, the next request written, the fake's server reading it). Also: the
// slots are filled in priority order (high, normal, low), and fairly by account within the low
// band; no replica ever holds more than N.

import t from 'tap';
import { request } from 'undici';
import type { Script } from '../helpers/upstream.js';
import { completionBody, json, streamFrames } from '../helpers/upstream.js';
import { ask, startFleet, until } from '../helpers/fleet.js';

const N = 4;
const KEYS = { hi: 'tg_fill_hi_000000000000000000', norm: 'tg_fill_norm_0000000000000000', lo1: 'tg_fill_lo1_00000000000000000', lo2: 'tg_fill_lo2_00000000000000000' };
/** Loop turns a handover may take after the answer's end is written (see the header). */
const TURNS = 40;

interface Held { replica: number; who: string; end: () => void }

/** Fakes of N slots that hold each chat request until the test ends it; a streamed one gets its first chunk at once. */
function slots(n: number) {
  const held: Held[] = [];
  const inFlight = Array.from({ length: n }, () => 0);
  const arrivals: string[] = [];
  let over = 0;
  const script = (replica: number): Script => async (req, res, body) => {
    if (req.method === 'GET') { json(res, 200, { object: 'list', data: [] }); return; }
    inFlight[replica]!++;
    if (inFlight[replica]! > N) over++;
    const who = String(body.messages[0].content);
    arrivals.push(who);
    const frames = streamFrames([who, ' done']);
    if (body.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(frames[0]! + frames[1]!);
    }
    await new Promise<void>((resolve) => {
      held.push({
        replica, who,
        end: () => {
          // The slot is free from here: the answer's last bytes are written.
          inFlight[replica]!--;
          if (body.stream === true) res.end(frames.slice(2).join(''));
          else json(res, 200, completionBody(`${who} done`));
          resolve();
        },
      });
    });
  };
  return { held, inFlight, arrivals, script, over: () => over };
}

/** Event-loop turns until `check` holds, up to `max` (returns max + 1 if it never does: the 100 ms poll then fills the slot later). */
async function turnsUntil(check: () => boolean, max: number): Promise<number> {
  for (let turns = 0; turns <= max; turns++) {
    if (check()) return turns;
    await new Promise<void>((r) => setImmediate(r));
  }
  return max + 1;
}

t.test('under overload, every slot freed is filled again within a few loop turns, in priority order and fairly by account', async (t) => {
  const fakes = slots(2);
  const f = await startFleet(t, 2, { balance: 'least_outstanding', max_outstanding: N, timeout_ms: 120_000, queue: { max_wait_ms: 120_000, max_queued: 1000, fairness: 'account' } }, {
    config: (c) => {
      const plan = (priority: string) => ({ paid: true, priority, requests_per_minute: null, tokens_per_minute: null, max_concurrent: null });
      c.plans.hi = plan('high');
      c.plans.norm = plan('normal');
      c.plans.lo = plan('low');
      c.accounts.push(
        { id: 'hi', plan: 'hi', wallet_units: 1e9, keys: [KEYS.hi] },
        { id: 'norm', plan: 'norm', wallet_units: 1e9, keys: [KEYS.norm] },
        { id: 'lo1', plan: 'lo', wallet_units: 1e9, keys: [KEYS.lo1] },
        { id: 'lo2', plan: 'lo', wallet_units: 1e9, keys: [KEYS.lo2] },
      );
    },
  });
  f.replicas.forEach((r, i) => r.setScript(fakes.script(i)));
  const answers: Array<Promise<{ status: number; text: string }>> = [];
  const send = (who: keyof typeof KEYS, i: number) => {
    const stream = i % 2 === 0;
    answers.push(request(`${f.gw.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${KEYS[who]}`, 'content-type': 'application/json' },
      body: JSON.stringify(ask(`${who}:${i}`, { stream })),
    }).then(async (res) => ({ status: res.statusCode, text: await res.body.text() })));
  };
  const queued = async () => (await f.admin('/upstreams')).providers.fleet.queued as number;

  // The fleet full of low requests, then 36 more waiting: low ones of two accounts first, the
  // normal and high ones sent last.
  for (let i = 0; i < 2 * N; i++) send(i % 2 === 0 ? 'lo1' : 'lo2', 100 + i);
  t.ok(await until(() => fakes.held.length === 2 * N, 10_000), 'both replicas full');
  for (let i = 0; i < 12; i++) { send('lo1', i); send('lo2', i); }
  for (let i = 0; i < 6; i++) send('norm', i);
  for (let i = 0; i < 6; i++) send('hi', i);
  const total = 2 * N + 36;
  t.ok(await until(async () => (await queued()) === 36, 10_000), '36 wait in the gateway');

  // Release a few answers at a time (1, 2 or 3, both replicas), then count the turns until the
  // gateway has filled every freed slot it can.
  const turns: number[] = [];
  let step = 0;
  while (fakes.held.length > 0) {
    const k = Math.min(fakes.held.length, 1 + (step++ % 3));
    for (const h of fakes.held.splice(0, k)) h.end();
    const inFlight = () => fakes.inFlight[0]! + fakes.inFlight[1]!;
    const waiting = total - fakes.arrivals.length;
    const target = Math.min(2 * N, inFlight() + waiting);
    const n = await turnsUntil(() => inFlight() === target && fakes.held.length === target, 20 * TURNS);
    turns.push(n);
  }
  t.equal(fakes.arrivals.length, total, 'every request reached a replica');
  t.equal(fakes.over(), 0, 'no replica ever held more than max_outstanding');
  const worst = Math.max(...turns);
  t.ok(worst <= TURNS, `each freed slot was filled within ${TURNS} loop turns (worst ${worst}, median ${turns.sort((a, b) => a - b)[turns.length >> 1]})`);

  // The order they were let in: the 36 that waited, high, then normal, then low alternating.
  const order = fakes.arrivals.slice(2 * N);
  t.strictSame(order.slice(0, 6).map((w) => w.split(':')[0]), Array(6).fill('hi'), 'the high band first');
  t.strictSame(order.slice(6, 12).map((w) => w.split(':')[0]), Array(6).fill('norm'), 'then the normal band');
  const low = order.slice(12);
  let lead = 0;
  for (const w of low) {
    lead += w.startsWith('lo1:') ? 1 : -1;
    if (Math.abs(lead) > 1) break;
  }
  t.ok(low.length === 24 && Math.abs(lead) <= 1, `the low band shared by account: ${low.join(' ')}`);
  for (const a of await Promise.all(answers)) t.equal(a.status, 200, a.text.slice(0, 200));
});
