// The content policy (content_policy.block) through the real gateway: a blocked pattern
// anywhere the model will read it (message text, and since CONTRACT section 10 the names and
// arguments of tool calls) is refused with 403 content_blocked before anything is held.

import t from 'tap';
import { DEMO_KEY, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'policy-admin-token-0123';
let gw: TestGateway;

t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.content_policy = { block: ['forbidden-\\w+', '(?:rm|del) -rf /'] };
  c.models[0].price = { input_per_mtok: 1000, output_per_mtok: 1000 };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

async function wallet(): Promise<number> {
  const res = await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).available_units;
}

const call = (id: string, name: string, args: string) => ({ id, type: 'function', function: { name, arguments: args } });
const chat = (messages: unknown[]) => ({ model: 'echo-small', messages });
const toolTurn = (calls: unknown[]) => [
  { role: 'user', content: 'look it up' },
  { role: 'assistant', content: null, tool_calls: calls },
  { role: 'tool', tool_call_id: 'c1', content: 'done' },
  { role: 'user', content: 'thanks' },
];

const BLOCKED: Array<[string, unknown[]]> = [
  ['message content', [{ role: 'user', content: 'say forbidden-word' }]],
  ['a text part', [{ role: 'user', content: [{ type: 'text', text: 'ok' }, { type: 'text', text: 'forbidden-part' }] }]],
  ['a tool call name', toolTurn([call('c1', 'forbidden-tool', '{}')])],
  ['tool call arguments', toolTurn([call('c1', 'search', '{"q":"forbidden-query"}')])],
  ['the second tool call of a turn', toolTurn([call('c1', 'search', '{"q":"fine"}'), call('c2', 'shell', '{"cmd":"rm -rf /"}')])],
  ['a tool call on a non-assistant message (forwarded as it is)', [{ role: 'user', content: 'hi', tool_calls: [call('c1', 'x', '{"a":"forbidden-sneaky"}')] }]],
  ['a tool message', [{ role: 'user', content: 'hi' }, { role: 'tool', tool_call_id: 'c1', content: 'forbidden-result' }]],
];

t.test('a blocked pattern hidden in each place: 403 content_blocked, nothing held or charged', async (t) => {
  const before = await wallet();
  for (const [name, messages] of BLOCKED) {
    for (const stream of [false, true]) {
      const res = await postChat(gw.url, { ...chat(messages), stream });
      t.equal(res.status, 403, `${name} (stream ${stream}): 403`);
      const body = res.json();
      t.same(schemas.error(body), [], 'envelope validates');
      t.equal(body.code, 'content_blocked');
      t.equal(body.type, 'permission_error');
      t.equal(body.param, 'messages');
      t.equal(body.request_id, res.headers['x-request-id']);
      t.notMatch(body.message, /forbidden-|rm -rf/, 'the message does not repeat what matched');
    }
  }
  t.equal(await wallet(), before, 'wallet unchanged');
  t.equal(await gw.gateway.slotsInUse('demo'), 0, 'no slot left taken');
});

t.test('tool calls that match nothing pass, and are charged as usual', async (t) => {
  const before = await wallet();
  const res = await postChat(gw.url, chat(toolTurn([call('c1', 'search', '{"q":"allowed words, forbidden alone"}')])));
  t.equal(res.status, 200, 'the word alone does not match forbidden-\\w+');
  t.ok(Number(res.headers['x-tollgate-units-charged']) > 0);
  t.equal(before - (await wallet()), Number(res.headers['x-tollgate-units-charged']));
});

t.test('without a policy, the same tool calls are served', async (t) => {
  const c = baseConfig();
  const plain = await startGateway(c);
  t.teardown(() => plain.close());
  const res = await postChat(plain.url, chat(toolTurn([call('c1', 'forbidden-tool', '{"q":"forbidden-query"}')])), {
    authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json',
  });
  t.equal(res.status, 200);
});
