// lib/mcp's pieces on their own: the strict reading of a JSON-RPC body (jsonrpc.ts), signed
// session ids (sessions.ts) and grants (grants.ts).

import t from 'tap';
import { validateConfig } from '../../lib/config/load.js';
import { grantOf } from '../../lib/mcp/grants.js';
import { RpcError, parseMessage, refuseDuplicates } from '../../lib/mcp/jsonrpc.js';
import { McpSessions } from '../../lib/mcp/sessions.js';

const refused = (text: string): number | undefined => {
  try {
    parseMessage(Buffer.from(text));
  } catch (err) {
    if (err instanceof RpcError) return err.code;
    throw err;
  }
  return undefined;
};

t.test('duplicates are found at any depth, escapes decoded, strings skipped', async (t) => {
  t.doesNotThrow(() => refuseDuplicates('{"a":{"a":1},"b":[{"a":1},{"a":2}],"c":"{\\"a\\":1,\\"a\\":2}"}'));
  t.throws(() => refuseDuplicates('{"a":1,"a":2}'));
  t.throws(() => refuseDuplicates('{"x":[{"k":1,"k":1}]}'));
  t.throws(() => refuseDuplicates('{"x":{"y":{"\\u006b":1,"k":2}}}'));
  t.doesNotThrow(() => refuseDuplicates('{"k\\"":1,"k":2}'));
});

t.test('parseMessage', async (t) => {
  t.same(parseMessage(Buffer.from('{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}')), { kind: 'request', id: 'a', method: 'tools/call', params: { name: 'x' } });
  t.same(parseMessage(Buffer.from('{"jsonrpc":"2.0","method":"notifications/initialized"}')), { kind: 'notification', method: 'notifications/initialized' });
  t.same(parseMessage(Buffer.from('{"jsonrpc":"2.0","id":1,"result":{}}')), { kind: 'response' });
  t.equal(refused('{"jsonrpc":"2.0","id":1,"method":"x","params":{"Name":"y"}}'), -32600);
  t.equal(refused('{"jsonrpc":"2.0","id":1,"method":"x","params":{"protocolversion":"y"}}'), -32600);
  t.equal(refused('{"jsonrpc":"2.0","ID":1,"method":"x"}'), -32600);
  t.equal(refused('[]'), -32600);
  t.equal(refused('{'), -32700);
  t.equal(refused('{"jsonrpc":"2.0","id":1.5,"method":"x"}'), -32600);
  t.equal(refused('{"jsonrpc":"2.0","id":null,"method":"x"}'), -32600);
  t.equal(refused('{"jsonrpc":"2.0","id":1}'), -32600);
  // Members the gateway does not read may take any case.
  t.equal(refused('{"jsonrpc":"2.0","id":1,"method":"x","params":{"Other":1,"other":2}}'), undefined);
});

t.test('a session id is bound to its credential and endpoint, and ends', async (t) => {
  const config = validateConfig({ admin: { token: 'an-admin-token-of-some-length' } });
  const s = new McpSessions(config);
  const id = s.open('key_a', 'files');
  t.ok(s.valid(id, 'key_a', 'files'));
  t.notOk(s.valid(id, 'key_b', 'files'));
  t.notOk(s.valid(id, 'key_a', null));
  t.notOk(s.valid(id, 'key_a', 'other'));
  t.notOk(s.valid(`${id.slice(0, -1)}${id.endsWith('A') ? 'B' : 'A'}`, 'key_a', 'files'));
  t.notOk(s.valid('garbage', 'key_a', 'files'));
  // Another instance of the same config accepts it; one with another secret does not.
  t.ok(new McpSessions(validateConfig({ admin: { token: 'an-admin-token-of-some-length' } })).valid(id, 'key_a', 'files'));
  t.notOk(new McpSessions(validateConfig({ admin: { token: 'another-admin-token-of-length' } })).valid(id, 'key_a', 'files'));
  s.end(id);
  t.notOk(s.valid(id, 'key_a', 'files'));
});

t.test('grants: the plan, narrowed by the key and team', async (t) => {
  const config = validateConfig({ mcp: { servers: { files: { url: 'http://x/mcp' }, web: { url: 'http://y/mcp' } } }, plans: { p: { mcp_tools: ['files__*', 'web__search'] }, none: {} } });
  const plan = config.plans.p!;
  const g = grantOf({ accountId: 'a', planName: 'p', plan, credentialId: 'k' });
  t.ok(g.tool('files', 'anything'));
  t.ok(g.tool('web', 'search'));
  t.notOk(g.tool('web', 'fetch'));
  t.ok(g.whole('files'));
  t.notOk(g.whole('web'));
  const none = grantOf({ accountId: 'a', planName: 'none', plan: config.plans.none!, credentialId: 'k' });
  t.notOk(none.tool('files', 'x'));
  t.notOk(none.whole('files'));
  const narrowed = grantOf({
    accountId: 'a', planName: 'p', plan, credentialId: 'k',
    key: { id: 'k', expiresAt: null, models: null, patterns: null, ips: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, priority: null, team: null, tags: [], tagsLocked: false, endUserBudget: null, mcpTools: (s) => s === 'files__read' || s === 'web__fetch' },
  });
  t.ok(narrowed.tool('files', 'read'));
  t.notOk(narrowed.tool('files', 'write'));
  t.notOk(narrowed.tool('web', 'fetch'), 'a key never widens its plan');
  t.notOk(narrowed.whole('files'));
});
