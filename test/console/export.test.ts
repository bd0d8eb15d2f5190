// The usage download's CSV (lib/console/export.ts): any record text comes back from a CSV
// parser as written, except that a cell a spreadsheet would run as a formula starts with ';
// the Config page's masking (lib/console/redact.ts) leaves no secret anywhere in the YAML (URL
// query values, fragments and alert webhook paths included).

import t from 'tap';
import fc from 'fast-check';
import YAML from 'yaml';
import { USAGE_COLUMNS as CSV_COLUMNS, toCsv, toJsonl } from '../../lib/console/export.js';
import { redactConfig } from '../../lib/console/redact.js';
import { holds } from '../property/arbitraries.js';

/** RFC 4180 rows (quoted fields may hold commas, quotes and line breaks). */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') quoted = false; else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(cell); cell = ''; } else if (c === '\r' && text[i + 1] === '\n') { row.push(cell); rows.push(row); row = []; cell = ''; i++; } else cell += c;
  }
  return rows;
}

t.test('CSV: every text field round-trips, formula cells neutralised', async (t) => {
  await holds(t, 'csv round trip', fc.property(
    fc.array(fc.record({ request_id: fc.string(), account: fc.string(), model: fc.string(), route: fc.string(), units: fc.nat(), status: fc.integer({ min: 100, max: 599 }) }), { maxLength: 8 }),
    (records) => {
      const rows = parseCsv(toCsv(records, true));
      if (rows.length !== records.length + 1) throw new Error(`rows ${rows.length}`);
      if (rows[0]!.join(',') !== CSV_COLUMNS.join(',')) throw new Error('header');
      records.forEach((r, i) => {
        const row = rows[i + 1]!;
        for (const name of ['request_id', 'account', 'model', 'route'] as const) {
          const got = row[CSV_COLUMNS.indexOf(name)]!;
          const want = /^[=+\-@\t\r']/.test(r[name]) ? `'${r[name]}` : r[name];
          if (got !== want) throw new Error(`${name}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`);
        }
        if (row[CSV_COLUMNS.indexOf('units')] !== String(r.units)) throw new Error('units');
        if (row.some((cell) => /^[=+@\t\r]/.test(cell))) throw new Error(`a formula cell: ${JSON.stringify(row)}`);
      });
      const lines = toJsonl(records).split('\n').filter(Boolean).map((l) => JSON.parse(l));
      if (JSON.stringify(lines) !== JSON.stringify(records)) throw new Error('jsonl');
    }), 300);
});

t.test('Config: no secret survives the masking, whatever it is', async (t) => {
  const secret = fc.string({ minLength: 6, maxLength: 30 }).filter((s) => s.trim().length >= 6 && !s.includes('***'));
  await holds(t, 'redacted config holds no secret', fc.property(secret, secret, secret, secret, secret, (token, key, pass, hdr, client) => {
    const config = {
      admin: { token },
      accounts: [{ id: 'a', keys: [`tg_${key}`], key_sha256: [key] }],
      providers: { p: { api_key: key, headers: { authorization: `Bearer ${hdr}` }, base_url: `https://u:${pass}@up.example.com/v1` } },
      store: { url: `redis://default:${pass}@redis:6379`, password: pass, sentinel: { sentinel_password: pass } },
      observe: { otlp_headers: { 'x-api-key': hdr } },
      console: { session_secret: client, oidc: { client_secret: client } },
      auth: { jwt: { secret: token } },
    };
    const yaml = YAML.stringify(redactConfig(config));
    for (const s of [token, key, pass, hdr, client]) {
      if (yaml.includes(s) || yaml.includes(JSON.stringify(s).slice(1, -1))) throw new Error(`${JSON.stringify(s)} is in ${yaml}`);
    }
  }), 200);
  await holds(t, 'no query value, fragment or webhook path survives', fc.property(secret, secret, secret, (q, frag, path) => {
    const enc = encodeURIComponent;
    const config = {
      providers: { p: { base_url: `https://up.example.com/v1?api-version=1&key=${enc(q)}#${enc(frag)}` } },
      alerts: { webhooks: [{ url: `https://hooks.example.com/services/${enc(path)}?token=${enc(q)}`, secret: q, events: ['wallet.low'] }] },
    };
    const yaml = YAML.stringify(redactConfig(config));
    for (const s of [q, frag, path]) {
      for (const form of [s, enc(s)]) if (yaml.includes(form)) throw new Error(`${JSON.stringify(form)} is in ${yaml}`);
    }
  }), 200);
  t.same(redactConfig({
    base_url: 'http://u:p@h:1/v1?api-version=2024&key=SEC&bare#frag',
    store: 'redis://h:6379/0',
    alerts: { webhooks: [
      { url: 'http://127.0.0.1:18502/hook?token=SUPERSECRET', secret: 's', events: ['wallet.low'] },
      { url: 'https://user:pw@hooks.slack.com/services/T0/B0/XYZ' },
      { url: 'not a url' },
    ] },
  }), {
    base_url: 'http://***@h:1/v1?api-version=***&key=***&***#***',
    store: 'redis://h:6379/0',
    alerts: { webhooks: [
      { url: 'http://127.0.0.1:18502/***', secret: '***', events: ['wallet.low'] },
      { url: 'https://hooks.slack.com/***' },
      { url: '***' },
    ] },
  }, 'query values, fragments and user info masked; a webhook shows its scheme, host and port only');
  t.same(redactConfig({ base_url: 'http://h:1/v1;key=MATRIXSECRET/x;a;b?q=1' }), { base_url: 'http://h:1/v1;***/x;***?q=***' }, 'matrix parameters are masked');
  t.same(redactConfig({ base_url: 'http://h:1/a;b' }), { base_url: 'http://h:1/a;***' });
  t.same(redactConfig({ base_url: 'https://gw.example.com/v1/0123456789abcdef0123456789abcdef/my-gateway/openai' }),
    { base_url: 'https://gw.example.com/v1/***/my-gateway/openai' }, 'a token-like path segment is masked');
  t.same(redactConfig({ base_url: 'https://x.example.com/openai/deployments/gpt-4o-mini-2024-07-18/chat' }),
    { base_url: 'https://x.example.com/openai/deployments/gpt-4o-mini-2024-07-18/chat' }, 'words and model names are kept');
  await holds(t, 'no token-like path segment survives', fc.property(fc.stringMatching(/^[A-Za-z0-9_-]{22,40}$/).filter((s) => /[A-Za-z]/.test(s) && /[0-9]/.test(s)), fc.constantFrom('', 'k', 'sk-'),
    (tok, prefix) => {
      const secret = `${prefix}${tok}`.padEnd(24, '0');
      const yaml = YAML.stringify(redactConfig({ providers: { p: { base_url: `https://h.example.com/v1/${secret}/chat` } } }));
      if (yaml.includes(secret)) throw new Error(`${secret} is in ${yaml}`);
    }), 200);
  const shown = redactConfig({ server: { port: 8080 }, admin: { token: null }, providers: { p: { base_url: 'http://h:1/v1' } } });
  t.same(shown, { server: { port: 8080 }, admin: { token: null }, providers: { p: { base_url: 'http://h:1/v1' } } }, 'what is not secret is shown as it is');
});
