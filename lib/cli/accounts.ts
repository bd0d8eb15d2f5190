// `tollgate accounts create|show`, `tollgate credits add` and `tollgate sessions revoke`: the
// account's wallet and the console sessions (CONTRACT section 10).

import { randomUUID } from 'node:crypto';
import type { AccountView, CreditAnswer } from './answers.js';
import { CliError, decimalUnits, enc, need, type Opts, type Step } from './call.js';

/** An account's wallet on one line. */
function account(b: AccountView): string {
  return `${b.id}  plan=${b.plan}  balance=${b.balance_units}  held=${b.held_units}  available=${b.available_units}`;
}

/** The call of an `accounts` sub-command; undefined for an unknown one. */
export function planAccounts(sub: string | undefined, args: string[], opts: Opts): Step | undefined {
  switch (sub) {
    case 'create': {
      need(args, 1, 'accounts create ID --plan P [--wallet-units N]');
      if (opts.plan === undefined) throw new CliError('accounts create: --plan is required', 2);
      const body: Record<string, unknown> = { id: args[0], plan: opts.plan };
      if (typeof opts['wallet-units'] === 'string') body.wallet_units = decimalUnits(opts['wallet-units'], 'accounts create: --wallet-units', false);
      return { call: { method: 'POST', path: '/admin/accounts', body }, show: (b: AccountView) => `created ${account(b)}` };
    }
    case 'show':
      need(args, 1, 'accounts show ID');
      return {
        call: { method: 'GET', path: `/admin/accounts/${enc(args[0]!)}` },
        show: (b: AccountView) => `${account(b)}\n  today: ${b.usage.day.requests} requests, ${b.usage.day.tokens} tokens, ${b.usage.day.units} units\n  this month: ${b.usage.month.requests} requests, ${b.usage.month.tokens} tokens, ${b.usage.month.units} units`,
      };  }
  return undefined;
}

/** The call of a `credits` sub-command; undefined for an unknown one. */
export function planCredits(sub: string | undefined, args: string[], opts: Opts): Step | undefined {
  switch (sub) {
    case 'add': {
      need(args, 2, 'credits add ACCOUNT UNITS [--idempotency-key K]');
      const units = decimalUnits(args[1]!, 'credits add: UNITS', true);
      if (units === 0) throw new CliError('credits add: UNITS must not be 0 (a positive number adds, a negative one deducts)', 2);
      const key = opts['idempotency-key'] ?? randomUUID();
      return {
        call: { method: 'POST', path: `/admin/accounts/${enc(args[0]!)}/credits`, body: { units, idempotency_key: key } },
        show: (b: CreditAnswer) => `${b.applied ? 'applied' : 'already applied (same idempotency key), nothing changed'}: ${account(b)}  idempotency-key=${key}`,
      };
    }  }
  return undefined;
}

/** The call of a `sessions` sub-command; undefined for an unknown one. */
export function planSessions(sub: string | undefined, args: string[]): Step | undefined {
  switch (sub) {
    case 'revoke':
      need(args, 1, 'sessions revoke SID');
      return { call: { method: 'POST', path: `/admin/sessions/${enc(args[0]!)}/revoke` }, show: () => `revoked session ${args[0]}` };  }
  return undefined;
}
