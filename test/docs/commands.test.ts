// Every shell command of README.md and docs/*.md, run as a reader runs it (CONTRACT section 11,
// issue #28 item 5): each page gets its own gateway started with `npm start` (the bundled config,
// on a free port, the admin token the README gives) and its own bash, in which the page's
// commands run one after the other, so a variable or an account one command makes is there for
// the next. A command passes when it exits 0 (or the `# exit N` its comment states) and each curl
// in it got a 2xx (or the status, and the error code, its comment states: `# 404
// model_not_found`). `tollgate ... serve` commands are started on their own and stopped with
// SIGTERM. A small allow-list below names what cannot run here, and the test prints each command
// it did not run, with the reason. A renamed flag, a changed route or a broken example fails.

import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { pageCommands, splitCommands, type DocCommand } from '../helpers/doc-commands.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PAGES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
const COMMAND_MS = 30_000;
const START_SCRIPT: string = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start;

/** What is not run, and why. Everything else is. */
const NOT_RUN: [RegExp, string][] = [
  [/^npm (install|ci)\b/, 'installs packages'],
  [/^npm test\b/, 'the whole test suite'],
  [/^npm run (bench|bench:fleet|test:real)$/, 'a benchmark or the real-model-server suite: minutes of CPU (test:real builds llama.cpp)'],
  [/^node scripts\/real\//, 'builds llama.cpp'],
  [/^sed -i\b/, 'edits a config file'],
  [/\b(kill|pkill|systemctl)\b/, 'signals a running process (reload and drain are tested in test/cli/serve.test.ts)'],
  [/^(podman|docker|buildah|kubectl)\b/, 'needs a container engine or a cluster (test/container/ builds and runs the image and the sidecar pod)'],
];
/** `npm start`, with or without variables before it: the page's own gateway, which this test starts. */
const NPM_START = /^(?:[A-Z_]+=\S*\s+)*npm start$/;
const SERVE = /^(?:node bin\/tollgate\.js|npx tollgate)\s+serve\b/;

// Inside the page's bash: a pipeline fails when any stage does (a `tollgate ... --json | jq`
// whose tollgate failed is a failure); curl records each answer's headers (for the status); the
// tollgate CLI (`npx tollgate`, or `node bin/tollgate.js`: the same bin) is pointed at the page's
// gateway with --url for the admin sub-commands. `npx tollgate` runs the bin directly: in a
// clone, npx would first link and build the package into its cache (minutes on a busy machine).
const PRELUDE = String.raw`
set -o pipefail
curl() { command curl -D "$TG_HDR" "$@"; }
tollgate_cli() {
  case "$1" in
    accounts|keys|teams|credits|sessions|usage) command node "$TG_ROOT/bin/tollgate.js" "$@" --url "$TG_URL" ;;
    *) command node "$TG_ROOT/bin/tollgate.js" "$@" ;;
  esac
}
npx() { if [ "$1" = tollgate ]; then shift; tollgate_cli "$@"; else echo "docs test: npx $1 is not run" >&2; return 127; fi; }
node() { if [ "$1" = bin/tollgate.js ]; then shift; tollgate_cli "$@"; else command node "$@"; fi; }
`;

/** A scratch folder that looks like the clone (bin, config, dist, package.json and node_modules linked in), with a tollgate.yaml. */
function scratch(t: any): string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-docs-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of ['bin', 'config', 'dist', 'package.json', 'node_modules']) symlinkSync(join(ROOT, f), join(dir, f));
  // The operator's own config, which the docs call tollgate.yaml: a copy of the bundled one.
  copyFileSync(join(ROOT, 'config', 'tollgate.yaml'), join(dir, 'tollgate.yaml'));
  return dir;
}

function cleanEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, TOLLGATE_LOG_LEVEL: 'warn', ...extra };
  for (const k of ['TOLLGATE_ADMIN_TOKEN', 'TOLLGATE_PORT', 'TOLLGATE_HOST']) if (!(k in extra)) delete env[k];
  return env;
}

/** Starts `cmd` (a process group, killed at teardown) and resolves with its listening URL. */
async function startListening(t: any, cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ proc: ChildProcess; url: string; out: () => string }> {
  const proc = spawn(cmd, args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) try { process.kill(-proc.pid!, 'SIGKILL'); } catch { /* gone */ } });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  for (let i = 0; i < 2400 && !/listening on (http:\/\/\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const m = /listening on (http:\/\/\S+)/.exec(out);
  if (m === null) throw new Error(`${cmd} ${args.join(' ')} did not start: ${out}`);
  return { proc, url: m[1]!, out: () => out };
}

/** The admin token the README starts the gateway with (`TOLLGATE_ADMIN_TOKEN=... npm start`). */
function documentedAdminToken(): string {
  const m = /TOLLGATE_ADMIN_TOKEN=([^\s`]+) npm start\b/.exec(readFileSync(join(ROOT, 'README.md'), 'utf8'));
  if (m === null) throw new Error('README.md no longer shows `TOLLGATE_ADMIN_TOKEN=... npm start`');
  return m[1]!;
}

/** What a command's comment says to expect: `# 404 model_not_found`, `# 201, the key`, `# exit 2`. */
function expectation(comment: string | null): { status?: number; code?: string; exit: number } {
  const exit = comment === null ? null : /^exit (\d+)\b/.exec(comment);
  if (exit !== null) return { exit: Number(exit[1]) };
  const st = comment === null ? null : /^(\d{3})\b[\s,;:]*`?([a-z]+(?:_[a-z]+)+)?`?/.exec(comment);
  if (st === null) return { exit: 0 };
  return { status: Number(st[1]), ...(st[2] === undefined ? {} : { code: st[2] }), exit: 0 };
}

/** One bash for a page: commands go in one at a time; each one's output and exit code come back. */
class PageShell {
  readonly #sh: ChildProcess;
  readonly #dir: string;
  #out = '';
  #n = 0;

  constructor(dir: string, env: NodeJS.ProcessEnv) {
    this.#dir = dir;
    this.#sh = spawn('bash', ['--noprofile', '--norc'], { cwd: dir, env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.#sh.stdout!.on('data', (d) => { this.#out += d; });
    this.#sh.stderr!.on('data', (d) => { this.#out += d; });
    this.#sh.stdin!.write(`${PRELUDE}\n`);
  }

  async run(text: string): Promise<{ exit: number; stdout: string; stderr: string; statuses: number[] }> {
    const n = ++this.#n;
    const file = (ext: string) => join(this.#dir, `.cmd-${n}.${ext}`);
    const done = `__docs_test_done_${n}__`;
    this.#sh.stdin!.write(`TG_HDR=${file('hdr')}; : > "$TG_HDR"\n{ ${text}\n} </dev/null >${file('out')} 2>${file('err')}\necho "${done} $?"\n`);
    const re = new RegExp(`${done} (\\d+)`);
    const until = Date.now() + COMMAND_MS;
    while (!re.test(this.#out) && this.#sh.exitCode === null && Date.now() < until) await sleep(20);
    const m = re.exec(this.#out);
    if (m === null) {
      throw new Error(this.#sh.exitCode !== null ? `bash exited (${this.#sh.exitCode}): ${this.#out.slice(-2000)}` : `no answer within ${COMMAND_MS} ms`);
    }
    const read = (ext: string) => (existsSync(file(ext)) ? readFileSync(file(ext), 'utf8') : '');
    const statuses = [...read('hdr').matchAll(/^HTTP\/[\d.]+ (\d{3})/gm)].map((s) => Number(s[1]));
    return { exit: Number(m[1]), stdout: read('out'), stderr: read('err'), statuses };
  }

  close(): void {
    this.#sh.stdin!.end();
    if (this.#sh.exitCode === null) this.#sh.kill('SIGKILL');
  }
}

/** Runs a documented `tollgate serve` on a free port: it must print its URL, answer /healthz and drain on SIGTERM. */
async function runServe(t: any, c: DocCommand): Promise<void> {
  const dir = scratch(t);
  const args = c.text.replace(/^npx tollgate\s+/, 'bin/tollgate.js ').replace(/^node\s+/, '').split(/\s+/);
  const at = args.indexOf('--port');
  if (at === -1) args.push('--port', '0');
  else args[at + 1] = '0';
  const gw = await startListening(t, process.execPath, args, dir, cleanEnv({}));
  t.equal((await fetch(`${gw.url}/healthz`)).status, 200, `${c.file}:${c.line}: ${c.text}: /healthz answers`);
  process.kill(gw.proc.pid!, 'SIGTERM');
  const code = await new Promise<number | null>((resolve) => {
    if (gw.proc.exitCode !== null) resolve(gw.proc.exitCode);
    else gw.proc.once('exit', (ec) => resolve(ec));
  });
  t.equal(code, 0, `${c.file}:${c.line}: drains and exits 0 on SIGTERM`);
}

t.test('the splitter cuts blocks as bash does', async (t) => {
  const block = [
    "curl -s http://x \\",
    "  -d '{\"a\":1,",
    "       \"b\":2}'   # 201, made",
    '# a comment alone',
    'A=1; B="two # not a comment"',
    'echo a |',
    '  wc -c',
  ].join('\n');
  t.strictSame(splitCommands(block, 10), [
    { line: 10, text: "curl -s http://x \\\n  -d '{\"a\":1,\n       \"b\":2}'", comment: '201, made' },
    { line: 14, text: 'A=1; B="two # not a comment"', comment: null },
    { line: 15, text: 'echo a |\n  wc -c', comment: null },
  ]);
  t.strictSame(expectation('404 model_not_found'), { status: 404, code: 'model_not_found', exit: 0 });
  t.strictSame(expectation('201, the account'), { status: 201, exit: 0 });
  t.strictSame(expectation('exit 2: nothing sent'), { exit: 2 });
  t.strictSame(expectation('prints the key once'), { exit: 0 });
});

const token = documentedAdminToken();
const ran: string[] = [];

for (const page of PAGES) {
  const commands = pageCommands(page, readFileSync(join(ROOT, page), 'utf8'));
  if (commands.length === 0) continue;
  t.test(page, async (t) => {
    const dir = scratch(t);
    let shell: PageShell | undefined;
    let url: string | undefined;
    t.teardown(() => shell?.close());
    // The README's gateway is `npm start` itself; the other pages run what it runs (package.json's
    // start script), sparing a second of npm's own start-up each.
    const gateway = async (): Promise<string> => {
      if (url === undefined) {
        const env = cleanEnv({ TOLLGATE_PORT: '0', TOLLGATE_ADMIN_TOKEN: token });
        const [cmd, args] = page === 'README.md' ? ['npm', ['start']] : ['sh', ['-c', START_SCRIPT]];
        url = (await startListening(t, cmd, args as string[], dir, env)).url;
      }
      return url;
    };
    for (const c of commands) {
      const where = `${c.file}:${c.line}`;
      const skip = NOT_RUN.find(([re]) => re.test(c.text));
      if (skip !== undefined) {
        t.comment(`not run: ${where}: ${c.text.split('\n')[0]} (${skip[1]})`);
        continue;
      }
      if (NPM_START.test(c.text)) {
        await gateway();
        ran.push(`${where} ${c.text}`);
        continue;
      }
      if (SERVE.test(c.text)) {
        await runServe(t, c);
        ran.push(`${where} ${c.text}`);
        continue;
      }
      const base = await gateway();
      shell ??= new PageShell(dir, cleanEnv({ TG_URL: base, TG_ROOT: ROOT }));
      const text = c.text.replaceAll('http://127.0.0.1:8080', base).replaceAll('http://localhost:8080', base);
      const want = expectation(c.comment);
      const r = await shell.run(text);
      const detail = { command: c.text, stdout: r.stdout.slice(0, 2000), stderr: r.stderr.slice(0, 2000), statuses: r.statuses };
      t.equal(r.exit, want.exit, `${where}: exits ${want.exit}`, detail);
      if (/\bcurl\b/.test(c.text)) {
        const status = r.statuses.at(-1);
        if (want.status !== undefined) t.equal(status, want.status, `${where}: answers ${want.status}`, detail);
        else t.ok(status !== undefined && status >= 200 && status < 300, `${where}: answers 2xx (got ${status})`, detail);
        if (want.code !== undefined) t.match(r.stdout, `"code":"${want.code}"`, `${where}: error code ${want.code}`, detail);
      }
      ran.push(`${where} ${c.text.split('\n')[0]}`);
    }
  });
}

t.test('the commands that matter were run', async (t) => {
  const readme = ran.filter((r) => r.startsWith('README.md:'));
  t.ok(readme.some((r) => / npm start$/.test(r)), 'npm start');
  t.ok(readme.some((r) => /curl -s\S* http:\/\/127\.0\.0\.1:8080\/v1\/chat\/completions/.test(r)), 'the quick start curl');
  t.ok(readme.some((r) => /tollgate\.js check --config config\/tollgate\.yaml/.test(r)), 'tollgate check');
  t.ok(ran.some((r) => /npx tollgate accounts create/.test(r)), 'an admin CLI command');
  t.comment(`${ran.length} documented commands run`);
});
