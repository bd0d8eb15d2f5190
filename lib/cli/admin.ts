// Admin sub-commands of `tollgate`: each calls the admin API of a running gateway
// (--url, --token or TOLLGATE_ADMIN_TOKEN) and prints a readable line, or with --json the
// API's JSON answer (nothing for a 204, which has none). Amounts are plain decimal integers:
// `1e3`, `0x10`, ` 7`, `+5` or `1.0` are refused before anything is sent (CONTRACT section 10).
//
// Each group of sub-commands is a file of its own (./accounts.ts, ./keys.ts, ./teams.ts,
// ./usage.ts) answering the call its words make; this file reads the options, makes the call
// and prints the answer.

import { parseArgs } from 'node:util';
import type { Show } from './answers.js';
import { TAG_OPTIONS, TAG_USAGE } from './tags.js';
import { CliError, call, type Opts, type Step } from './call.js';
import { planAccounts, planCredits, planSessions } from './accounts.js';
import { planKeys } from './keys.js';
import { planTeams } from './teams.js';
import { exportPlan, exportUsage, planUsage } from './usage.js';

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
function adminToken(given: string | undefined): string {
  const token = given ?? process.env.TOLLGATE_ADMIN_TOKEN;
  if (token === undefined || token === '') throw new CliError('no admin token: pass --token or set TOLLGATE_ADMIN_TOKEN', 2);
  return token;
}
export const ADMIN_COMMANDS: ReadonlySet<string> = new Set(['accounts', 'keys', 'teams', 'credits', 'sessions', 'usage']);

/** Each admin command's planner: the call its sub-command and words make, undefined for an unknown sub-command. */
const PLANS: Readonly<Record<string, (sub: string | undefined, args: string[], opts: Opts) => Step | undefined>> = {
  accounts: planAccounts, keys: planKeys, teams: planTeams, credits: planCredits, sessions: planSessions, usage: planUsage,
};

/** The call of an admin sub-command. */
function plan(command: string, sub: string | undefined, args: string[], opts: Opts): { call: Step['call']; show: Show } {
  const step = PLANS[command]?.(sub, args, opts);
  if (step === undefined) throw new CliError(`tollgate: unknown command '${[command, sub].filter(Boolean).join(' ')}'\n${ADMIN_USAGE}`, 2);
  return step;
}

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
