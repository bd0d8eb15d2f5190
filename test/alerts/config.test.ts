// The `alerts:` section (CONTRACT section 15): its defaults, every problem `check` names
// (thresholds 1..100 and distinct, URLs http(s) and listed once, secrets of at least 16
// characters, events of the four), generated sections that never crash validation nor `tollgate check`, and a reload
// that changes the webhooks.

import t from 'tap';
import fc from 'fast-check';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { ConfigError, validateConfig } from '../../lib/config/load.js';
import { BIN } from '../helpers/child.js';
import { SECRET, alertsConfig, spend, startAlertsGateway, startReceiver } from '../helpers/alerts.js';
import { holds, oddValue } from '../property/arbitraries.js';

function problems(config: unknown): string[] {
  try {
    validateConfig(config);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}

/** A webhook secret check accepts (16 characters or more: lib/config/secrets.ts). */
const HOOK = 'a-webhook-secret-0123';

const dir = await mkdtemp(join(tmpdir(), 'tollgate-alerts-check-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

async function check(name: string, config: unknown): Promise<{ code: number | null; out: string }> {
  const file = join(dir, name);
  await writeFile(file, YAML.stringify(config));
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, out: stdout + stderr });
    });
  });
}

t.test('defaults', async (t) => {
  t.strictSame(validateConfig({}).alerts, { thresholds: [50, 80, 100], wallet_low_units: null, webhooks: [], delivery_timeout_ms: 10000, sweep_interval_ms: 60000 });
  t.strictSame(validateConfig({ alerts: { webhooks: [{ url: 'https://example.com/h', secret: HOOK }] } }).alerts.webhooks,
    [{ url: 'https://example.com/h', secret: HOOK, events: ['budget.threshold', 'wallet.low', 'key.expiring', 'upstream.ejected'] }],
    'a webhook without events gets all four');
});

t.test('every problem, named by its path', async (t) => {
  const bad = {
    alerts: {
      thresholds: [0, 101, 50, 50],
      wallet_low_units: -1,
      webhooks: [
        { url: 'ftp://example.com/h', secret: HOOK },
        { url: 'http://example.com/h', secret: '' },
        { url: 'http://example.com/h', secret: HOOK, events: ['budget.threshold', 'nope'] },
        { url: 'http://[::1/h', secret: HOOK },
        { secret: HOOK, colour: 'red' },
      ],
      sweep: 1,
    },
  };
  t.strictSame(problems(bad).sort(), [
    'alerts.sweep: unknown key',
    'alerts.thresholds: must be a list of distinct integers from 1 to 100',
    'alerts.thresholds[0]: must be an integer from 1 to 100',
    'alerts.thresholds[1]: must be an integer from 1 to 100',
    'alerts.wallet_low_units: must be a non-negative integer or null',
    'alerts.webhooks[0].url: must be an http:// or https:// URL',
    'alerts.webhooks[1].secret: must not be empty or only whitespace (an unset environment variable?)',
    'alerts.webhooks[2].events[1]: must be one of budget.threshold, wallet.low, key.expiring, upstream.ejected',
    'alerts.webhooks[2].url: the same URL is listed twice',
    'alerts.webhooks[3].url: must be an http:// or https:// URL',
    'alerts.webhooks[4].colour: unknown key',
    'alerts.webhooks[4].url: is required',
  ].sort());
  const run = await check('bad.yaml', bad);
  t.equal(run.code, 1, '`tollgate check` exits 1');
  t.match(run.out, 'alerts.webhooks[1].secret: must not be empty or only whitespace (an unset environment variable?)');
  t.notMatch(run.out, /\n\s+at /, 'no stack trace');
  const good = await check('good.yaml', { alerts: { thresholds: [25, 100], wallet_low_units: 10, webhooks: [{ url: 'https://example.com/h', secret: HOOK, events: ['wallet.low'] }] } });
  t.equal(good.code, 0, good.out);
});

t.test('generated alert sections never crash validation', async (t) => {
  const threshold = fc.oneof(fc.integer({ min: -5, max: 110 }), oddValue);
  const webhook = fc.record({
    url: fc.oneof(fc.constantFrom('http://h.example/x', 'https://h.example', 'ftp://x', 'http://[::1', 'http://a b', ''), oddValue),
    secret: fc.oneof(fc.constantFrom('s', '', HOOK, ' '.repeat(16), `${HOOK}\n`), oddValue),
    events: fc.oneof(fc.array(fc.constantFrom('budget.threshold', 'wallet.low', 'key.expiring', 'upstream.ejected', 'other')), oddValue),
  }, { requiredKeys: [] });
  const section = fc.oneof(
    fc.record({
      thresholds: fc.oneof(fc.array(threshold, { maxLength: 6 }), oddValue),
      wallet_low_units: fc.oneof(fc.integer(), fc.constant(null), oddValue),
      webhooks: fc.oneof(fc.array(webhook, { maxLength: 4 }), oddValue),
      delivery_timeout_ms: fc.oneof(fc.integer(), oddValue),
    }, { requiredKeys: [] }),
    oddValue,
  );
  const samples: unknown[] = [];
  await holds(t, 'alerts sections: accepted, or refused with alerts.* problems', fc.property(section, (alerts) => {
    if (samples.length < 6) samples.push(alerts);
    let config;
    try {
      config = validateConfig({ alerts });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return err.problems.length > 0 && err.problems.every((p) => /^alerts(\.|\[|:)/.test(p));
    }
    const a = config.alerts;
    return a.thresholds.every((x) => Number.isInteger(x) && x >= 1 && x <= 100) && new Set(a.thresholds).size === a.thresholds.length &&
      a.webhooks.every((w) => /^https?:\/\//.test(w.url) && [...w.secret].length >= 16 && w.secret.trim() === w.secret);
  }), 400);
  // A few through `tollgate check` itself: exit 0 or 1, lines, never a crash.
  let i = 0;
  for (const alerts of samples) {
    const run = await check(`gen-${i++}.yaml`, { alerts });
    t.ok(run.code === 0 || run.code === 1, `check exits 0 or 1 (${run.code})`);
    t.notMatch(run.out, /\n\s+at |TypeError|RangeError/, 'no stack trace');
  }
});

t.test('a reload changes the webhooks; an invalid alerts section keeps the old ones', async (t) => {
  const a = await startReceiver();
  const b = await startReceiver();
  t.teardown(async () => { await a.close(); await b.close(); });
  const g = await startAlertsGateway(alertsConfig({ wallet_low_units: 950, webhooks: [{ url: a.url, secret: SECRET }] }), { background: false });
  t.teardown(() => g.close());
  await t.rejects(g.gateway.reload(alertsConfig({ wallet_low_units: 950, webhooks: [{ url: b.url, secret: '' }] })), ConfigError);
  await g.gateway.reload(alertsConfig({ wallet_low_units: 950, webhooks: [{ url: b.url, secret: SECRET }] }));
  t.equal((await spend(g.url, 'tg_demo_0000000000000000', 100)).status, 200);
  const alerts = await g.gateway.alerts;
  await alerts.flush();
  await alerts.worker.tick();
  t.equal(a.received.length, 0, 'the old webhook gets nothing');
  t.equal(b.delivered().length, 1, 'the new one gets the event');
  t.ok(b.delivered()[0]!.signed);
});
