// The operator's path for independent webhook delivery (CONTRACT sections 11, 15 and 21): a
// YAML file with two webhooks, one whose receiver accepts the connection and never answers;
// `tollgate serve --config FILE` as a child process; key.expiring events from keys issued
// through the admin API. The healthy receiver gets every event, in the outbox's order, while
// the hanging one still holds its first. A SIGHUP reload that removes the hanging webhook and
// adds another: the kept one goes on, the added one gets the events since, the removed one's
// due deliveries fail; then SIGTERM drains and exits 0.

import t from 'tap';
import { writeFile } from 'node:fs/promises';
import YAML from 'yaml';
import { ADMIN, PRICE, drainExit, operatorConfig, serveFile, statusOf } from '../helpers/operator.js';
import { SECRET, startReceiver, until, type Receiver } from '../helpers/alerts.js';

const idsAt = (rx: Receiver): string[] => rx.delivered().map((r) => r.headers['x-tollgate-event-id'] as string);

t.test('a hanging webhook receiver from a YAML file delays no other one, across a reload', async (t) => {
  const hang = await startReceiver();
  const ok = await startReceiver();
  const added = await startReceiver();
  t.teardown(async () => { await hang.close(); await ok.close(); await added.close(); });
  hang.mode = 'hang';
  const config = (webhooks: Receiver[]) => operatorConfig({
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'm-echo', provider: 'echo', price: PRICE }],
    alerts: {
      // Far longer than the test: the hanging attempt never ends by its timeout here.
      delivery_timeout_ms: 120_000,
      sweep_interval_ms: 200,
      webhooks: webhooks.map((w) => ({ url: w.url, secret: SECRET, events: ['key.expiring'] })),
    },
  });
  const served = await serveFile(t, config([hang, ok]), undefined, { TOLLGATE_LOG_LEVEL: 'info' });
  t.equal(await statusOf(`${served.url}/readyz`, 200), 200);
  const adminCall = (method: string, path: string, body?: unknown) => fetch(`${served.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  }).then(async (r) => ({ status: r.status, json: await r.json() as any }));
  const issue = async (count: number, from: number) => {
    for (let i = from; i < from + count; i++) {
      const r = await adminCall('POST', '/admin/accounts/demo/keys', { expires_at: new Date(Date.now() + i * 3600_000).toISOString() });
      t.equal(r.status, 201);
    }
  };
  const events = async (): Promise<any[]> => (await adminCall('GET', '/admin/alerts')).json.events;

  await issue(6, 1);
  t.ok(await until(() => ok.delivered().length === 6, 20_000), 'the healthy receiver got all six');
  const first = (await events()).map((e) => e.id).reverse();
  t.equal(first.length, 6);
  t.strictSame(idsAt(ok), first, 'each once, in the order they were recorded');
  t.ok(ok.delivered().every((r) => r.signed && r.body.type === 'key.expiring'));
  t.equal(hang.received.length, 1, 'the hanging receiver still holds the first');
  t.strictSame((await events()).map((e) => e.delivery.state), Array(6).fill('pending'), 'to it, every one is still pending');

  // SIGHUP: the hanging webhook removed, another added.
  await writeFile(served.file, YAML.stringify(config([ok, added])));
  served.proc.kill('SIGHUP');
  t.ok(await until(() => served.output().includes('config reloaded'), 15_000), 'reloaded');
  await issue(3, 10);
  t.ok(await until(() => ok.delivered().length === 9 && added.delivered().length === 3, 20_000));
  const all = (await events()).map((e) => e.id).reverse();
  t.strictSame(idsAt(ok), all, 'the kept webhook: all nine, in order, across the reload');
  t.strictSame(idsAt(added), all.slice(6), 'the added webhook: the three since');
  t.ok(added.delivered().every((r) => r.signed));

  // The removed webhook: its due deliveries fail; its attempt in flight is left to finish.
  t.ok(await until(async () => (await events()).filter((e) => e.delivery.state === 'failed').length === 5, 15_000), 'its five due deliveries failed');
  const byId = new Map((await events()).map((e) => [e.id, e.delivery]));
  t.match(byId.get(first[0]), { state: 'pending' }, 'the one in flight is not cut short');
  for (const id of first.slice(1)) t.match(byId.get(id), { state: 'failed', last_status: null });
  for (const id of all.slice(6)) t.match(byId.get(id), { state: 'delivered', attempts: 1, last_status: 204 });
  t.equal(hang.received.length, 1, 'nothing more was sent to it');
  t.ok(await until(() => served.output().includes('webhook no longer configured'), 5000), 'logged');
  t.notMatch(served.output(), new RegExp(SECRET), 'no log line holds a webhook secret');

  // Its receiver goes away (the attempt ends, no answer); SIGTERM drains and exits 0.
  await hang.close();
  await drainExit(t, served);
});
