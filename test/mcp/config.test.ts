// The MCP section of the config (CONTRACT section 17): its defaults, and every refusal of
// `tollgate check` as a `path: message` line: a non-http(s) URL, a server named twice, a name
// with `__` or `/`, a negative price, and a plan's mcp_tools pattern that can match nothing.

import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, validateConfig } from '../../lib/config/load.js';
import { patternCanMatch } from '../../lib/config/mcp-check.js';
import { BIN } from '../helpers/child.js';

function problems(config: unknown): string[] {
  try {
    validateConfig(config);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

t.test('defaults: no servers, no plan grants any tool', async (t) => {
  const c = validateConfig({ mcp: { servers: { files: { url: 'http://127.0.0.1:7000/mcp' } } }, plans: { pro: {} } });
  t.same(c.mcp.servers.files, { url: 'http://127.0.0.1:7000/mcp', headers: {}, timeout_ms: 30000, price: { per_call_units: 0 }, tools: {} });
  t.same(c.plans.pro!.mcp_tools, []);
  t.same(validateConfig({}).mcp, { servers: {} });
});

t.test('each refusal is one path: message line', async (t) => {
  const got = problems({
    mcp: {
      servers: {
        files: { url: 'http://127.0.0.1:7000/mcp', price: { per_call_units: -1 }, tools: { search: { per_call_units: -5 } } },
        'a__b': { url: 'http://127.0.0.1:7001/mcp' },
        'a/b': { url: 'http://127.0.0.1:7001/mcp' },
        Files: { url: 'ftp://127.0.0.1/mcp' },
        bare: { url: 'file:///etc/passwd' },
      },
    },
    plans: { pro: { mcp_tools: ['files__*', 'nosuch__*', 'files', '*', 'fi*', 'files__search'] } },
  });
  t.same(got.sort(), [
    'mcp.servers.Files.url: must be an http:// or https:// URL',
    'mcp.servers.Files: the server "files" is named twice (names are compared without case)',
    'mcp.servers."a/b": a server name must not contain "/" (it is one path segment of /mcp/<server>)',
    'mcp.servers.a__b: a server name must not contain "__" (it separates server and tool in <server>__<tool>)',
    'mcp.servers.bare.url: must be an http:// or https:// URL',
    'mcp.servers.files.price.per_call_units: must be a non-negative integer',
    'mcp.servers.files.tools.search.per_call_units: must be a non-negative integer',
    'plans.pro.mcp_tools[1]: the pattern "nosuch__*" can match no tool: patterns are <server>__<tool> over mcp.servers ("files", "a__b", "a/b", "Files", "bare")',
    'plans.pro.mcp_tools[2]: the pattern "files" can match no tool: patterns are <server>__<tool> over mcp.servers ("files", "a__b", "a/b", "Files", "bare")',
  ].sort());
});

t.test('a pattern with no server configured matches nothing', async (t) => {
  t.same(problems({ plans: { pro: { mcp_tools: ['*'] } } }), [
    'plans.pro.mcp_tools[0]: the pattern "*" can match no tool: patterns are <server>__<tool> over mcp.servers (none configured)',
  ]);
});

t.test('patternCanMatch', async (t) => {
  const s = ['files', 'web'];
  for (const p of ['*', 'files__*', 'f*', '*__search', 'files__search', 'web__a*b', 'files_*', 'files__a__b']) t.ok(patternCanMatch(p, s), p);
  for (const p of ['files', 'files__', 'x*', 'files_x*', 'filesx__*', 'web_x*', 'web__']) t.notOk(patternCanMatch(p, s), p);
});

t.test('tollgate check prints the lines and exits 1', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-mcp-check-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'bad.yaml');
  await writeFile(file, 'mcp:\n  servers:\n    files: { url: "ftp://x/mcp" }\n    files: { url: "http://x/mcp" }\n');
  const run = await new Promise<{ code: number | null; out: string }>((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : (err as any).code, out: stdout + stderr });
    });
  });
  t.equal(run.code, 1);
  t.match(run.out, /Map keys must be unique/);
  await writeFile(file, 'mcp:\n  servers:\n    files: { url: "ftp://x/mcp" }\n');
  const run2 = await new Promise<{ code: number | null; out: string }>((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : (err as any).code, out: stdout + stderr });
    });
  });
  t.equal(run2.code, 1);
  t.match(run2.out, 'mcp.servers.files.url: must be an http:// or https:// URL');
  t.notMatch(run2.out, /\n\s+at /);
});
