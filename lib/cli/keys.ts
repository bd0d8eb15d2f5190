// `tollgate keys create|list|update|rotate|revoke` (CONTRACT section 8): the key controls the
// options name, and a key as the list prints it.

import type { KeyAnswer, NewKeyAnswer } from './answers.js';
import { addTeamAndTags, teamAndTagLines } from './tags.js';
import { CliError, decimalUnits, enc, limitOpt, listOpt, need, type Opts, type Step } from './call.js';

/**
 * The controls the options name, as the admin API takes them (CONTRACT section 8); on update,
 * the value `null` clears one. The API checks every value; the CLI only reads its own syntax.
 */
export function controlsOf(opts: Opts, verb: string): Record<string, unknown> {
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
/** The call of a `keys` sub-command; undefined for an unknown one. */
export function planKeys(sub: string | undefined, args: string[], opts: Opts): Step | undefined {
  switch (sub) {
    case 'create': {
      need(args, 1, 'keys create ACCOUNT [--models a,b] [--budget-units N --budget-period day|week|month|never] [--expires ISO-8601] ...');
      const body = controlsOf(opts, 'keys create');
      return {
        call: { method: 'POST', path: `/admin/accounts/${enc(args[0]!)}/keys`, ...(Object.keys(body).length === 0 ? {} : { body }) },
        show: (b: NewKeyAnswer) => `key ${b.id} for ${b.account}:\n${b.key}\n(shown once: only its SHA-256 is stored)`,
      };
    }
    case 'list':
      need(args, 1, 'keys list ACCOUNT');
      return {
        call: { method: 'GET', path: `/admin/accounts/${enc(args[0]!)}/keys` },
        show: (b: { keys: KeyAnswer[] }) => (b.keys.length === 0 ? `no keys for ${args[0]}` : b.keys.map(keyLines).join('\n')),
      };
    case 'update': {
      need(args, 1, 'keys update KEY_ID [--models a,b|null] [--budget-units N|null] [--expires ISO-8601|null] ...');
      const body = controlsOf(opts, 'keys update');
      if (Object.keys(body).length === 0) throw new CliError('keys update: name at least one control to change (see tollgate --help)', 2);
      return { call: { method: 'PATCH', path: `/admin/keys/${enc(args[0]!)}`, body }, show: (b: KeyAnswer) => `updated ${keyLines(b)}` };
    }
    case 'rotate': {
      need(args, 1, 'keys rotate KEY_ID [--grace-seconds N]');
      const grace = typeof opts['grace-seconds'] === 'string' ? decimalUnits(opts['grace-seconds'], 'keys rotate: --grace-seconds', false) : 0;
      return {
        call: { method: 'POST', path: `/admin/keys/${enc(args[0]!)}/rotate`, body: { grace_seconds: grace } },
        show: (b: NewKeyAnswer) => `key ${b.id} for ${b.account} rotated; new key:\n${b.key}\n(shown once; the old key works until ${b.previous_key_valid_until})`,
      };
    }
    case 'revoke':
      need(args, 1, 'keys revoke KEY_ID');
      return { call: { method: 'DELETE', path: `/admin/keys/${enc(args[0]!)}` }, show: () => `revoked ${args[0]}` };  }
  return undefined;
}
