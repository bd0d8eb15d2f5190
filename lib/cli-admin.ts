// Admin sub-commands of `tollgate`: each calls the admin API of a running gateway
// (--url, --token or TOLLGATE_ADMIN_TOKEN) and prints a readable line, or with --json the
// API's JSON answer (nothing for a 204, which has none). Amounts are plain decimal integers:
// `1e3`, `0x10`, ` 7`, `+5` or `1.0` are refused before anything is sent (CONTRACT section 10).

import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { CSV_HEADER, csvRow } from './store/usage-csv.js';
import type { AccountView, CreditAnswer, KeyAnswer, NewKeyAnswer, Show, TeamAnswer, UsageAnswer } from './cli-admin-answers.js';
import { TAG_OPTIONS, TAG_USAGE, addTeamAndTags, teamAndTagLines } from './cli-admin-tags.js';
export const ADMIN_USAGE = `admin commands (--url URL, --token T or TOLLGATE_ADMIN_TOKEN, --json):
  tollgate accounts create ID --plan P [--wallet-units N]
  tollgate accounts show ID
  tollgate keys create ACCOUNT [CONTROLS]
  tollgate keys list ACCOUNT
  tollgate keys update KEY_ID CONTROLS        (a value of null clears a control)
  tollgate keys rotate KEY_ID [--grace-seconds N]
  tollgate keys revoke KEY_ID
    CONTROLS: --name N  --models a,llama-*  --expires ISO-8601  --budget-units N
              --budget-period day|week|month|never  --rpm N  --tpm N  --max-concurrent N
              --priority high|normal|low  --allow-ips CIDR,CIDR  --metadata k=v (repeatable)
              --team TEAM_ID  --mcp-tools files__*,web__search
              ${TAG_USAGE}
  tollgate teams create ACCOUNT TEAM_ID [TEAM]
  tollgate teams list ACCOUNT
  tollgate teams update TEAM_ID TEAM          (a value of null clears a setting)
  tollgate teams delete TEAM_ID
    TEAM: --name N  --models a,llama-*  --budget-units N  --budget-period day|week|month|never
          --rpm N  --tpm N  --max-concurrent N  --mcp-tools files__*,web__search
  tollgate credits add ACCOUNT UNITS [--idempotency-key K]
  tollgate sessions revoke SID
  tollgate usage [--account A] [--since DATE]
  tollgate usage export --since DATE [--until DATE] [--account A] [--key KEY_ID] [--model M] [--tag T] [--end-user U] --format jsonl|csv`;

class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number) {
    super(message);
    this.exitCode = exitCode;
  }
}

interface Call { method: 'GET' | 'POST' | 'DELETE' | 'PATCH'; path: string; body?: unknown }

async function call(url: string, token: string, c: Call): Promise<{ status: number; body: unknown }> {
  // The built-in fetch: it starts faster than importing undici, which a CLI call notices.
  let status: number;
  let text: string;
  try {
    const res = await fetch(`${url.replace(/\/+$/, '')}${c.path}`, {
      method: c.method,
      headers: { authorization: `Bearer ${token}`, ...(c.body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: c.body === undefined ? undefined : JSON.stringify(c.body),
      signal: AbortSignal.timeout(10_000),
      redirect: 'manual',
    });
    status = res.status;
    text = await res.text();
  } catch (err) {
    const cause = (err as Error & { cause?: Error }).cause;
    throw new CliError(`cannot reach ${url}: ${cause?.message ?? (err as Error).message}`, 1);
  }
  let body: unknown = text;
  try { body = text === '' ? null : JSON.parse(text); } catch { /* not JSON: shown as text */ }
  return { status, body };
}

const enc = encodeURIComponent;
const MAX_UNITS = Number.MAX_SAFE_INTEGER;

/**
 * A plain decimal integer (no sign but an optional `-` when negatives are allowed, no leading
 * zeros, no spaces, exponent, fraction or radix prefix) of at most 2^53-1 in size.
 */
export function decimalUnits(text: string, what: string, allowNegative: boolean): number {
  const form = allowNegative ? /^(0|-?[1-9][0-9]*)$/ : /^(0|[1-9][0-9]*)$/;
  const range = allowNegative ? `-${MAX_UNITS} to ${MAX_UNITS}` : `0 to ${MAX_UNITS}`;
  if (!form.test(text) || BigInt(text) > BigInt(MAX_UNITS) || BigInt(text) < -BigInt(MAX_UNITS)) {
    throw new CliError(`${what} must be a plain decimal integer from ${range} (like 1000${allowNegative ? ' or -250' : ''}), not ${JSON.stringify(text)}`, 2);
  }
  return Number(text);
}

type Opts = Record<string, string | string[] | boolean | undefined>;

/** A list option (`a,b`), or null for `null`. */
function listOpt(v: string, what: string): string[] | null {
  if (v === 'null') return null;
  const items = v.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new CliError(`${what} needs at least one value (or null)`, 2);
  return items;
}

/** A limit option: a positive plain decimal integer, or null. */
function limitOpt(v: string, what: string): number | null {
  if (v === 'null') return null;
  const n = decimalUnits(v, what, false);
  if (n === 0) throw new CliError(`${what} must be at least 1 (or null for no limit)`, 2);
  return n;
}

/**
 * The controls the options name, as the admin API takes them (CONTRACT section 8); on update,
 * the value `null` clears one. The API checks every value; the CLI only reads its own syntax.
 */
function controlsOf(opts: Opts, verb: string): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const str = (k: string) => (typeof opts[k] === 'string' ? opts[k] as string : undefined);
  const name = str('name');
  if (name !== undefined) body.name = name === 'null' ? null : name;
  for (const [opt, field] of [['models', 'models'], ['mcp-tools', 'mcp_tools'], ['allow-ips', 'allowed_ips']] as const) {
    const v = str(opt);
    if (v !== undefined) body[field] = listOpt(v, `${verb}: --${opt}`);
  }
  const expires = str('expires');
  if (expires !== undefined) body.expires_at = expires === 'null' ? null : expires;
  const units = str('budget-units');
  const period = str('budget-period');
  if (units === 'null') {
    if (period !== undefined) throw new CliError(`${verb}: --budget-period with --budget-units null: a cleared budget has no period`, 2);
    body.budget = null;
  } else if (units !== undefined) {
    if (period !== undefined && !['day', 'week', 'month', 'never'].includes(period)) {
      throw new CliError(`${verb}: --budget-period must be day, week, month or never, not ${JSON.stringify(period)}`, 2);
    }
    body.budget = { units: decimalUnits(units, `${verb}: --budget-units`, false), period: period === undefined || period === 'never' ? null : period };
  } else if (period !== undefined) {
    throw new CliError(`${verb}: --budget-period needs --budget-units (a budget is set whole)`, 2);
  }
  const limits: Record<string, number | null> = {};
  for (const [opt, field] of [['rpm', 'requests_per_minute'], ['tpm', 'tokens_per_minute'], ['max-concurrent', 'max_concurrent']] as const) {
    const v = str(opt);
    if (v !== undefined) limits[field] = limitOpt(v, `${verb}: --${opt}`);
  }
  if (Object.keys(limits).length > 0) body.limits = limits;
  const priority = str('priority');
  if (priority !== undefined) body.priority = priority === 'null' ? null : priority;
  addTeamAndTags(body, str, verb, (message) => { throw new CliError(message, 2); });
  const meta = opts.metadata;
  if (Array.isArray(meta) && meta.length > 0) {
    if (meta.length === 1 && meta[0] === 'null') body.metadata = null;
    else {
      const m: Record<string, string> = {};
      for (const kv of meta) {
        const eq = kv.indexOf('=');
        if (eq <= 0) throw new CliError(`${verb}: --metadata takes key=value, not ${JSON.stringify(kv)}`, 2);
        m[kv.slice(0, eq)] = kv.slice(eq + 1);
      }
      body.metadata = m;
    }
  }
  return body;
}

/** One key as the list shows it, on a few lines. */
function keyLines(k: KeyAnswer): string {
  const b = k.budget;
  const budget = b.units === null ? `spent ${b.spent_units} (no budget)` : `${b.spent_units}/${b.units} per ${b.period ?? 'lifetime'}${b.resets_at ? ` (resets ${b.resets_at})` : ''}`;
  const l = k.limits;
  const limits = [['rpm', l.requests_per_minute], ['tpm', l.tokens_per_minute], ['concurrent', l.max_concurrent]]
    .filter(([, v]) => v !== null).map(([n, v]) => `${n}=${v}`).join(' ') || 'plan only';
  return [
    `${k.id}  ${k.hint ?? '(no hint)'}${k.name === null ? '' : `  "${k.name}"`}`,
    `  models: ${k.models === null ? 'any the plan allows' : k.models.join(', ')}${k.mcp_tools == null ? '' : `  mcp tools: ${k.mcp_tools.join(', ')}`}`,
    `  budget: ${budget}`,
    `  limits: ${limits}`,
    `  priority: ${k.priority ?? "the plan's"}`,
    ...teamAndTagLines(k),
    `  expires: ${k.expires_at ?? 'never'}  ips: ${k.allowed_ips === null ? 'any' : k.allowed_ips.join(', ')}`,
    `  created: ${k.created_at}  last used: ${k.last_used_at ?? 'never'}`,
    ...(Object.keys(k.metadata).length === 0 ? [] : [`  metadata: ${Object.entries(k.metadata).map(([a, v]) => `${a}=${v}`).join(' ')}`]),
  ].join('\n');
}

/** A team's settings the options name (CONTRACT section 15): the key controls a team has. */
function teamSettingsOf(opts: Opts, verb: string): Record<string, unknown> {
  const body = controlsOf(opts, verb);
  for (const [member, opt] of [['expires_at', 'expires'], ['priority', 'priority'], ['allowed_ips', 'allow-ips'], ['metadata', 'metadata'], ['team', 'team']] as const) {
    if (body[member] !== undefined) throw new CliError(`${verb}: --${opt} is a key's control, not a team's`, 2);
  }
  return body;
}

/** One team as the list shows it. */
function teamLines(tm: TeamAnswer): string {
  const b = tm.budget;
  const budget = b.units === null ? `spent ${b.spent_units} (no budget)` : `${b.spent_units}/${b.units} per ${b.period ?? 'lifetime'}${b.resets_at ? ` (resets ${b.resets_at})` : ''}`;
  const l = tm.limits;
  const limits = [['rpm', l.requests_per_minute], ['tpm', l.tokens_per_minute], ['concurrent', l.max_concurrent]]
    .filter(([, v]) => v !== null).map(([n, v]) => `${n}=${v}`).join(' ') || 'plan and keys only';
  return [
    `${tm.id}  account=${tm.account}${tm.name === null ? '' : `  "${tm.name}"`}`,
    `  models: ${tm.models === null ? 'any the plan and key allow' : tm.models.join(', ')}${tm.mcp_tools == null ? '' : `  mcp tools: ${tm.mcp_tools.join(', ')}`}`,
    `  budget: ${budget}`,
    `  limits: ${limits}`,
    `  created: ${tm.created_at}`,
  ].join('\n');
}

function plan(command: string, sub: string | undefined, args: string[], opts: Opts): { call: Call; show: Show } {
  const need = (n: number, usage: string) => {
    if (args.length !== n || args.some((a) => a === '')) throw new CliError(`usage: tollgate ${usage}`, 2);
  };
  const account = (b: AccountView) => `${b.id}  plan=${b.plan}  balance=${b.balance_units}  held=${b.held_units}  available=${b.available_units}`;
  // `usage` has no sub-command: its words are all options.
  switch (command === 'usage' ? 'usage' : `${command} ${sub}`) {
    case 'accounts create': {
      need(1, 'accounts create ID --plan P [--wallet-units N]');
      if (opts.plan === undefined) throw new CliError('accounts create: --plan is required', 2);
      const body: Record<string, unknown> = { id: args[0], plan: opts.plan };
      if (typeof opts['wallet-units'] === 'string') body.wallet_units = decimalUnits(opts['wallet-units'], 'accounts create: --wallet-units', false);
      return { call: { method: 'POST', path: '/admin/accounts', body }, show: (b: AccountView) => `created ${account(b)}` };
    }
    case 'accounts show':
      need(1, 'accounts show ID');
      return {
        call: { method: 'GET', path: `/admin/accounts/${enc(args[0]!)}` },
        show: (b: AccountView) => `${account(b)}\n  today: ${b.usage.day.requests} requests, ${b.usage.day.tokens} tokens, ${b.usage.day.units} units\n  this month: ${b.usage.month.requests} requests, ${b.usage.month.tokens} tokens, ${b.usage.month.units} units`,
      };
    case 'keys create': {
      need(1, 'keys create ACCOUNT [--models a,b] [--budget-units N --budget-period day|week|month|never] [--expires ISO-8601] ...');
      const body = controlsOf(opts, 'keys create');
      return {
        call: { method: 'POST', path: `/admin/accounts/${enc(args[0]!)}/keys`, ...(Object.keys(body).length === 0 ? {} : { body }) },
        show: (b: NewKeyAnswer) => `key ${b.id} for ${b.account}:\n${b.key}\n(shown once: only its SHA-256 is stored)`,
      };
    }
    case 'keys list':
      need(1, 'keys list ACCOUNT');
      return {
        call: { method: 'GET', path: `/admin/accounts/${enc(args[0]!)}/keys` },
        show: (b: { keys: KeyAnswer[] }) => (b.keys.length === 0 ? `no keys for ${args[0]}` : b.keys.map(keyLines).join('\n')),
      };
    case 'keys update': {
      need(1, 'keys update KEY_ID [--models a,b|null] [--budget-units N|null] [--expires ISO-8601|null] ...');
      const body = controlsOf(opts, 'keys update');
      if (Object.keys(body).length === 0) throw new CliError('keys update: name at least one control to change (see tollgate --help)', 2);
      return { call: { method: 'PATCH', path: `/admin/keys/${enc(args[0]!)}`, body }, show: (b: KeyAnswer) => `updated ${keyLines(b)}` };
    }
    case 'keys rotate': {
      need(1, 'keys rotate KEY_ID [--grace-seconds N]');
      const grace = typeof opts['grace-seconds'] === 'string' ? decimalUnits(opts['grace-seconds'], 'keys rotate: --grace-seconds', false) : 0;
      return {
        call: { method: 'POST', path: `/admin/keys/${enc(args[0]!)}/rotate`, body: { grace_seconds: grace } },
        show: (b: NewKeyAnswer) => `key ${b.id} for ${b.account} rotated; new key:\n${b.key}\n(shown once; the old key works until ${b.previous_key_valid_until})`,
      };
    }
    case 'keys revoke':
      need(1, 'keys revoke KEY_ID');
      return { call: { method: 'DELETE', path: `/admin/keys/${enc(args[0]!)}` }, show: () => `revoked ${args[0]}` };
    case 'teams create': {
      need(2, 'teams create ACCOUNT TEAM_ID [--name N] [--budget-units N --budget-period day|week|month|never] [--rpm N] [--tpm N] [--max-concurrent N] [--models a,b]');
      const body = { id: args[1], ...teamSettingsOf(opts, 'teams create') };
      return { call: { method: 'POST', path: `/admin/accounts/${enc(args[0]!)}/teams`, body }, show: (b: TeamAnswer) => `created ${teamLines(b)}` };
    }
    case 'teams list':
      need(1, 'teams list ACCOUNT');
      return {
        call: { method: 'GET', path: `/admin/accounts/${enc(args[0]!)}/teams` },
        show: (b: { teams: TeamAnswer[] }) => (b.teams.length === 0 ? `no teams for ${args[0]}` : b.teams.map(teamLines).join('\n')),
      };
    case 'teams update': {
      need(1, 'teams update TEAM_ID [--name N|null] [--budget-units N|null] [--rpm N|null] [--models a,b|null] ...');
      const body = teamSettingsOf(opts, 'teams update');
      if (Object.keys(body).length === 0) throw new CliError('teams update: name at least one setting to change (see tollgate --help)', 2);
      return { call: { method: 'PATCH', path: `/admin/teams/${enc(args[0]!)}`, body }, show: (b: TeamAnswer) => `updated ${teamLines(b)}` };
    }
    case 'teams delete':
      need(1, 'teams delete TEAM_ID');
      return { call: { method: 'DELETE', path: `/admin/teams/${enc(args[0]!)}` }, show: () => `deleted team ${args[0]}` };
    case 'credits add': {
      need(2, 'credits add ACCOUNT UNITS [--idempotency-key K]');
      const units = decimalUnits(args[1]!, 'credits add: UNITS', true);
      if (units === 0) throw new CliError('credits add: UNITS must not be 0 (a positive number adds, a negative one deducts)', 2);
      const key = opts['idempotency-key'] ?? randomUUID();
      return {
        call: { method: 'POST', path: `/admin/accounts/${enc(args[0]!)}/credits`, body: { units, idempotency_key: key } },
        show: (b: CreditAnswer) => `${b.applied ? 'applied' : 'already applied (same idempotency key), nothing changed'}: ${account(b)}  idempotency-key=${key}`,
      };
    }
    case 'usage': {
      if (sub !== undefined) throw new CliError('usage: tollgate usage [--account A] [--since DATE] | tollgate usage export --since DATE ...', 2);
      const q = new URLSearchParams();
      if (typeof opts.account === 'string') q.set('account', opts.account);
      if (typeof opts.since === 'string') q.set('since', opts.since);
      const qs = q.toString();
      return {
        call: { method: 'GET', path: `/admin/usage${qs === '' ? '' : `?${qs}`}` },
        show: (b: UsageAnswer) => [
          `usage since ${b.since}${b.account === null ? ' (all accounts)' : ` for ${b.account}`}: ${b.requests} requests, ${b.prompt_tokens} prompt + ${b.completion_tokens} completion tokens, ${b.units} units`,
          ...Object.entries(b.by_model).map(([m, u]) => `  ${m}: ${u.requests} requests, ${u.prompt_tokens} + ${u.completion_tokens} tokens, ${u.units} units`),
          ...Object.entries(b.by_key ?? {}).map(([k, u]) => `  key ${k}: ${u.requests} requests, ${u.prompt_tokens} + ${u.completion_tokens} tokens, ${u.units} units`),
          ...Object.entries(b.by_team ?? {}).map(([k, u]) => `  team ${k}: ${u.requests} requests, ${u.prompt_tokens} + ${u.completion_tokens} tokens, ${u.units} units`),
        ].join('\n'),
      };
    }
    case 'sessions revoke':
      need(1, 'sessions revoke SID');
      return { call: { method: 'POST', path: `/admin/sessions/${enc(args[0]!)}/revoke` }, show: () => `revoked session ${args[0]}` };
    default:
      throw new CliError(`tollgate: unknown command '${[command, sub].filter(Boolean).join(' ')}'\n${ADMIN_USAGE}`, 2);
  }
}

function adminToken(given: string | undefined): string {
  const token = given ?? process.env.TOLLGATE_ADMIN_TOKEN;
  if (token === undefined || token === '') throw new CliError('no admin token: pass --token or set TOLLGATE_ADMIN_TOKEN', 2);
  return token;
}

interface ExportArgs { query: URLSearchParams; format: 'jsonl' | 'csv' }

function exportPlan(args: string[], opts: Record<string, string | undefined>): ExportArgs {
  const usage = 'usage: tollgate usage export --since DATE [--until DATE] [--account A] [--key KEY_ID] [--model M] [--tag T] [--end-user U] --format jsonl|csv';
  if (args.length !== 0) throw new CliError(usage, 2);
  if (opts.since === undefined) throw new CliError(`usage export: --since is required\n${usage}`, 2);
  if (opts.format !== 'jsonl' && opts.format !== 'csv') throw new CliError(`usage export: --format must be jsonl or csv\n${usage}`, 2);
  const query = new URLSearchParams({ since: opts.since, limit: '1000' });
  for (const [opt, param] of [['until', 'until'], ['account', 'account'], ['key', 'key'], ['model', 'model'], ['tag', 'tag'], ['end-user', 'end_user']] as const) {
    if (opts[opt] !== undefined) query.set(param, opts[opt]!);
  }
  return { query, format: opts.format };
}

/** Writes to stdout, waiting while its buffer is full (memory stays bounded by one page). */
function write(text: string): Promise<void> {
  if (process.stdout.write(text)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const done = (err?: Error) => { process.stdout.off('drain', onDrain); process.stdout.off('error', done); if (err) reject(err); else resolve(); };
    const onDrain = () => done();
    process.stdout.once('drain', onDrain);
    process.stdout.once('error', done);
  });
}

/**
 * `tollgate usage export`: every record of the query, page by page (GET /admin/usage/records
 * with each page's next_cursor), each page written before the next is asked for: one page in
 * memory at a time, whatever the export's size. jsonl: one record per line; csv: a header, then
 * one row per record (RFC 4180, CRLF).
 */
async function exportUsage(url: string, token: string, a: ExportArgs): Promise<number> {
  if (a.format === 'csv') await write(CSV_HEADER);
  let cursor: string | null = null;
  let pages = 0;
  do {
    const q = new URLSearchParams(a.query);
    if (cursor !== null) q.set('cursor', cursor);
    const { status, body } = await call(url, token, { method: 'GET', path: `/admin/usage/records?${q.toString()}` });
    if (status !== 200) {
      const e = body as { code?: string; message?: string } | null;
      process.stderr.write(`error ${status}${e?.code ? ` ${e.code}` : ''}: ${e?.message ?? String(body)}${pages > 0 ? ` (after ${pages} pages were written)` : ''}\n`);
      return 1;
    }
    const page = body as { records?: unknown; next_cursor?: unknown } | null;
    if (page === null || typeof page !== 'object' || !Array.isArray(page.records) || (page.next_cursor !== null && typeof page.next_cursor !== 'string')) {
      throw new CliError(`unexpected answer from ${url}: ${JSON.stringify(body).slice(0, 200)}`, 1);
    }
    let out = '';
    for (const r of page.records as Record<string, unknown>[]) out += a.format === 'csv' ? csvRow(r) : `${JSON.stringify(r)}\n`;
    if (out !== '') await write(out);
    cursor = page.next_cursor as string | null;
    pages++;
  } while (cursor !== null);
  return 0;
}

export const ADMIN_COMMANDS: ReadonlySet<string> = new Set(['accounts', 'keys', 'teams', 'credits', 'sessions', 'usage']);

const OPTIONS = {
  url: { type: 'string' }, token: { type: 'string' }, json: { type: 'boolean' },
  plan: { type: 'string' }, 'wallet-units': { type: 'string' }, 'idempotency-key': { type: 'string' },
  account: { type: 'string' }, since: { type: 'string' }, until: { type: 'string' }, key: { type: 'string' },
  model: { type: 'string' }, format: { type: 'string' },
  name: { type: 'string' }, models: { type: 'string' }, 'mcp-tools': { type: 'string' }, expires: { type: 'string' }, 'budget-units': { type: 'string' },
  'budget-period': { type: 'string' }, rpm: { type: 'string' }, tpm: { type: 'string' }, 'max-concurrent': { type: 'string' },
  priority: { type: 'string' }, 'allow-ips': { type: 'string' }, metadata: { type: 'string', multiple: true }, 'grace-seconds': { type: 'string' },
  team: { type: 'string' }, ...TAG_OPTIONS,
} as const;

/**
 * Puts options first (`--name=value`) and positionals after `--`, so that a negative amount
 * (`credits add acme -5`, `--wallet-units -5`) reaches its reader instead of being taken for
 * an unknown option. Anything else that starts with a dash stays an option for parseArgs to judge.
 */
function normalize(argv: readonly string[]): string[] {
  const options: string[] = [];
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') { positionals.push(...argv.slice(i + 1)); break; }
    const name = arg.startsWith('--') ? arg.slice(2) : undefined;
    if (name !== undefined && !name.includes('=') && (OPTIONS as Record<string, { type: string }>)[name]?.type === 'string' && i + 1 < argv.length) {
      options.push(`${arg}=${argv[++i]}`);
    } else if (arg.startsWith('-') && !/^-[0-9]/.test(arg)) {
      options.push(arg);
    } else {
      positionals.push(arg);
    }
  }
  return [...options, '--', ...positionals];
}

/** What to print for a successful answer; a body that is not what the API sends is an error. */
function shown(step: { show: Show }, status: number, body: unknown, url: string, json: boolean): string | undefined {
  if (status !== 204 && (body === null || typeof body !== 'object')) {
    throw new CliError(`unexpected answer from ${url}: status ${status}, not a JSON object`, 1);
  }
  if (json) return status === 204 ? undefined : JSON.stringify(body);
  try {
    return step.show(body as never); // this command's answer: another shape throws in show
  } catch {
    throw new CliError(`unexpected answer from ${url}: status ${status}, ${JSON.stringify(body).slice(0, 200)}`, 1);
  }
}

/** Runs an admin sub-command; returns the exit code. */
export async function admin(command: string, argv: string[]): Promise<number> {
  try {
    const { values, positionals } = parseArgs({ args: normalize(argv), allowPositionals: true, strict: true, options: OPTIONS });
    const [sub, ...args] = positionals;
    if (command === 'usage' && sub === 'export') {
      const opts = values as Record<string, string | undefined>;
      const exportArgs = exportPlan(args, opts);
      return await exportUsage(values.url ?? 'http://127.0.0.1:8080', adminToken(values.token), exportArgs);
    }
    const step = plan(command, sub, args, values as Opts);
    const token = adminToken(values.token);
    const url = values.url ?? 'http://127.0.0.1:8080';
    const { status, body } = await call(url, token, step.call);
    if (status < 200 || status > 299) {
      const e = body as { code?: string; message?: string } | null;
      if (values.json === true && body !== null) process.stdout.write(`${JSON.stringify(body)}\n`);
      process.stderr.write(`error ${status}${e?.code ? ` ${e.code}` : ''}: ${e?.message ?? String(body)}\n`);
      return 1;
    }
    const out = shown(step, status, body, url, values.json === true);
    if (out !== undefined) process.stdout.write(`${out}\n`);
    return 0;
  } catch (err) {
    if (err instanceof CliError) {
      process.stderr.write(`${err.message}\n`);
      return err.exitCode;
    }
    if (err instanceof TypeError && (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`tollgate: ${err.message}\n${ADMIN_USAGE}\n`);
      return 2;
    }
    throw err;
  }
}
