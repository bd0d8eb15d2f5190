// Two `tollgate serve` instances of one config on one Redis in front of one MCP server (CONTRACT
// sections 9 and 17): a session opened on one is accepted by the other (its id is signed with a
// key derived from admin.token), every call on either is debited from the one wallet exactly
// once, and requests_per_minute counts the calls of both.

import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { KEY, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { startFakeMcp } from '../helpers/mcp.js';
import { startRedis } from '../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const upstream = await startFakeMcp();
t.teardown(() => upstream.close());

const config = operatorConfig({
  store: { kind: 'redis', url: redis.url, prefix: 'tg-mcp-two:' },
  plans: { free: { paid: false, requests_per_minute: 5, mcp_tools: ['files__*'] } },
  accounts: [{ id: 'demo', plan: 'free', wallet_units: 1000, keys: [KEY] }],
  mcp: { servers: { files: { url: upstream.url, price: { per_call_units: 10 }, tools: { search: { per_call_units: 30 } } } } },
});
const a = await serveFile(t, config);
const b = await serveFile(t, undefined, a.file);

t.test('one session, one wallet, one rate limit across two instances', async (t) => {
  const transport = new StreamableHTTPClientTransport(new URL(`${a.url}/mcp/files`), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } });
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(transport);
  t.teardown(() => client.close());
  await client.callTool({ name: 'search', arguments: { q: 'a' } });
  await client.callTool({ name: 'echo', arguments: {} });

  const onB = (id: number, name: string) => fetch(`${b.url}/mcp/files`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': transport.sessionId! },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: { q: 'b' } } }),
  });
  for (let i = 0; i < 3; i++) {
    const res = await onB(i, 'search');
    t.equal(res.status, 200, 'the session opened on A is accepted by B');
    t.match(await res.json(), { result: { content: [{ type: 'text', text: 'found: b' }] } });
  }
  const sixth = await onB(9, 'search');
  t.equal(sixth.status, 429, 'the sixth call of the minute, on either instance, is refused');
  t.ok(Number(sixth.headers.get('retry-after')) >= 1);
  const wa = await wallet(a.url);
  t.equal(wa.balance_units, 1000 - 30 - 10 - 3 * 30);
  t.equal(wa.held_units, 0);
  t.same(await wallet(b.url), wa);
});
