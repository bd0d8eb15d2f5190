// The operator's path for alerts (CONTRACT sections 11 and 15): a YAML file with `alerts:`,
// `tollgate serve --config FILE` as a child process, a real HTTP receiver, requests through the
// official `openai` SDK: the wallet.low and budget.threshold webhooks arrive signed, GET
// /admin/alerts shows them delivered, and SIGTERM still drains and exits 0; a team's budget
// spent by two keys of the team: its budget.threshold webhook arrives, naming the team.

import t from 'tap';
import OpenAI from 'openai';
import { ADMIN, KEY, PRICE, drainExit, operatorConfig, serveFile, statusOf } from '../helpers/operator.js';
import { SECRET, startReceiver, until } from '../helpers/alerts.js';

t.test('alerts from a YAML file: signed webhooks for real requests', async (t) => {
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  const served = await serveFile(t, operatorConfig({
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'm-echo', provider: 'echo', price: PRICE }],
    alerts: {
      thresholds: [50, 100],
      wallet_low_units: 999_990,
      webhooks: [{ url: rx.url, secret: SECRET }],
    },
  }));
  t.equal(await statusOf(`${served.url}/readyz`, 200), 200);
  const adminCall = (method: string, path: string, body?: unknown) => fetch(`${served.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  }).then(async (r) => ({ status: r.status, json: await r.json() as any }));
  const issued = await adminCall('POST', '/admin/accounts/demo/keys', { budget: { units: 60, period: 'day' } });
  t.equal(issued.status, 201);

  const demo = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const answer = await demo.chat.completions.create({ model: 'm-echo', messages: [{ role: 'user', content: 'Say hello to the operator' }] });
  t.match(answer.choices[0]!.message.content, /^Say hello/);
  const budgeted = new OpenAI({ apiKey: issued.json.key, baseURL: `${served.url}/v1`, maxRetries: 0 });
  let refused = false;
  for (let i = 0; i < 10 && !refused; i++) {
    try {
      await budgeted.chat.completions.create({ model: 'm-echo', max_tokens: 5, messages: [{ role: 'user', content: 'one two three four five six seven' }] });
    } catch (err) {
      t.equal((err as any).status, 402);
      t.equal((err as any).code, 'budget_exceeded');
      refused = true;
    }
  }
  t.ok(refused, 'the key spent its budget');

  t.ok(await until(() => {
    const types = rx.delivered().map((r) => r.body.type);
    return types.includes('wallet.low') && types.filter((x) => x === 'budget.threshold').length >= 1;
  }, 15_000), 'the webhooks arrived');
  for (const r of rx.delivered()) {
    t.equal(r.signed, true, `${r.body.type}: signed with the secret`);
    t.equal(r.headers['x-tollgate-event-id'], r.body.id);
    t.equal(r.headers['content-type'], 'application/json');
  }
  const low = rx.delivered().find((r) => r.body.type === 'wallet.low')!;
  t.strictSame(low.body.subject, { account: 'demo' });
  t.equal(low.body.data.wallet_low_units, 999_990);
  const thresholds = rx.delivered().filter((r) => r.body.type === 'budget.threshold');
  t.ok(thresholds.every((r) => r.body.subject.key_id === issued.json.id && r.body.subject.account === 'demo'));
  t.strictSame(new Set(thresholds.map((r) => r.body.data.threshold)).size, thresholds.length, 'each threshold once');

  t.ok(await until(async () => {
    const page = await adminCall('GET', '/admin/alerts');
    return page.json.events.length === rx.delivered().length && page.json.events.every((e: any) => e.delivery.state === 'delivered');
  }, 5000), 'GET /admin/alerts shows them delivered');
  await drainExit(t, served);
});

t.test('a team\'s budget threshold from a YAML file: the webhook names the team', async (t) => {
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  const served = await serveFile(t, operatorConfig({
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'm-echo', provider: 'echo', price: PRICE }],
    alerts: { thresholds: [50], webhooks: [{ url: rx.url, secret: SECRET, events: ['budget.threshold'] }] },
  }));
  t.equal(await statusOf(`${served.url}/readyz`, 200), 200);
  const adminCall = (method: string, path: string, body?: unknown) => fetch(`${served.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  }).then(async (r) => ({ status: r.status, json: await r.json() as any }));
  t.equal((await adminCall('POST', '/admin/accounts/demo/teams', { id: 'search', budget: { units: 200, period: 'day' } })).status, 201);
  const keys = [
    (await adminCall('POST', '/admin/accounts/demo/keys', { team: 'search' })).json,
    (await adminCall('POST', '/admin/accounts/demo/keys', { team: 'search' })).json,
  ];
  let refused: any;
  for (let i = 0; i < 40 && refused === undefined; i++) {
    const sdk = new OpenAI({ apiKey: keys[i % 2].key, baseURL: `${served.url}/v1`, maxRetries: 0 });
    try {
      await sdk.chat.completions.create({ model: 'm-echo', max_tokens: 5, messages: [{ role: 'user', content: 'one two three four five six seven' }] });
    } catch (err) {
      refused = err;
    }
  }
  t.equal(refused?.status, 402, 'the team spent its budget');
  t.equal(refused?.error?.budget_scope, 'team');
  t.ok(await until(() => rx.delivered().length >= 1, 15_000), 'the webhook arrived');
  t.equal(rx.delivered().length, 1, 'once');
  const [hook] = rx.delivered();
  t.equal(hook!.signed, true);
  t.equal(hook!.headers['x-tollgate-event-id'], hook!.body.id);
  t.equal(hook!.body.type, 'budget.threshold');
  t.equal(hook!.body.subject.account, 'demo');
  t.equal(hook!.body.subject.team, 'search');
  t.ok(keys.some((k) => k.id === hook!.body.subject.key_id), 'and the team\'s key whose request crossed');
  t.match(hook!.body.data, { threshold: 50, scope: 'team', budget_units: 200, period: 'day' });
  await drainExit(t, served);
});
