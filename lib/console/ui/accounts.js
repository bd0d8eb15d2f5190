// The console's Accounts page (CONTRACT section 12): an account looked up by id or listed page
// by page, its wallet, a top-up, and its teams.

import { html } from 'htm/preact';
import { useMemo, useState } from 'preact/hooks';
import { call, enc, optional, query } from './api.js';
import { Loading, Problem, fmt, useLoad } from './common.js';
import { Teams } from './teams.js';

const newIdempotencyKey = () => `console-${crypto.randomUUID()}`;

export function Accounts({ session }) {
  const [cursor, setCursor] = useState(undefined);
  const [open, setOpen] = useState(null);
  const [teamsOf, setTeamsOf] = useState(null);
  const [state, reload] = useLoad(() => optional(`/admin/accounts${query({ limit: 50, cursor })}`), [cursor]);
  const d = state.data;
  if (d === undefined) return html`<${Loading} state=${state} />`;
  if (d === null) return html`<${AccountLookup} session=${session} />`;
  return html`<${AccountTable} session=${session} accounts=${d.accounts} state=${state} reload=${reload} open=${open} setOpen=${setOpen} teamsOf=${teamsOf} setTeamsOf=${setTeamsOf} />
    <div class="pager">
      ${cursor !== undefined && html`<button type="button" onClick=${() => setCursor(undefined)}>First page</button>`}
      ${d.next_cursor && html`<button type="button" onClick=${() => setCursor(d.next_cursor)}>Next page</button>`}
    </div>`;
}

/** Without the account list (a gateway before GET /admin/accounts): one account by its id. */
function AccountLookup({ session }) {
  const [id, setId] = useState(sessionStorage.getItem('tg-account') ?? '');
  const [open, setOpen] = useState(null);
  const [teamsOf, setTeamsOf] = useState(null);
  const [state, reload] = useLoad(() => (id ? call('GET', `/admin/accounts/${enc(id)}`) : Promise.resolve(null)), [id]);
  return html`<form class="field" onSubmit=${(e) => { e.preventDefault(); const v = String(new FormData(e.currentTarget).get('account') ?? '').trim(); sessionStorage.setItem('tg-account', v); setId(v); }}>
      <label for="lookup-account">Account</label><input id="lookup-account" name="account" value=${id} /><button type="submit">Open</button></form>
    ${state.error ? html`<${Problem} error=${state.error} />` : state.data ? html`<${AccountTable} session=${session} accounts=${[state.data]} state=${state} reload=${reload} open=${open} setOpen=${setOpen} teamsOf=${teamsOf} setTeamsOf=${setTeamsOf} />` : null}`;
}

function AccountTable({ session, accounts, state, reload, open, setOpen, teamsOf, setTeamsOf }) {
  const admin = session.role === 'admin';
  return html`<${Problem} error=${state.error} />
    <div class="scroll"><table class="cards" role="table">
      <caption class="sr-only">Accounts</caption>
      <thead role="rowgroup"><tr role="row"><th scope="col" role="columnheader">Id</th><th scope="col" role="columnheader">Plan</th><th scope="col" role="columnheader" class="num">Balance (units)</th><th scope="col" role="columnheader" class="num">Held</th><th scope="col" role="columnheader" class="num">Available</th><th scope="col" role="columnheader"><span class="sr-only">Actions</span></th></tr></thead>
      <tbody role="rowgroup">${accounts.map((a) => html`<tr role="row">
        <td role="cell" class="id" data-label="Id"><span>${a.id}</span></td><td role="cell" data-label="Plan"><span>${a.plan}</span></td><td role="cell" class="num" data-label="Balance"><span>${fmt(a.balance_units)}</span></td><td role="cell" class="num" data-label="Held"><span>${fmt(a.held_units)}</span></td><td role="cell" class="num" data-label="Available"><span>${fmt(a.available_units)}</span></td>
        <td role="cell" class="actions"><button type="button" aria-pressed=${teamsOf === a.id} onClick=${() => setTeamsOf(teamsOf === a.id ? null : a.id)} aria-label=${`Teams of ${a.id}`}>Teams</button>
          ${admin && html`<button type="button" onClick=${() => setOpen(a.id)} aria-label=${`Top up ${a.id}`}>Top up</button>`}</td>
      </tr>`)}</tbody>
    </table></div>
    ${accounts.length === 0 && html`<p class="empty">No accounts yet.</p>`}
    ${open !== null && html`<${TopUp} key=${open} account=${open} onDone=${() => { reload(); }} onClose=${() => setOpen(null)} />`}
    ${teamsOf !== null && html`<${Teams} key=${`t-${teamsOf}`} account=${teamsOf} />`}`;
}

/** The top-up form: one idempotency key per opening, so a resubmission never credits twice. */
function TopUp({ account, onDone, onClose }) {
  const idem = useMemo(newIdempotencyKey, [account]);
  const [units, setUnits] = useState('');
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const r = await call('POST', `/admin/accounts/${enc(account)}/credits`, { units: Number(units), idempotency_key: idem });
      setResult(r);
      onDone();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return html`<section class="panel" aria-labelledby="h-topup">
    <h2 id="h-topup">Top up <span class="id">${account}</span></h2>
    <form onSubmit=${submit}>
      <label for="topup-units">Amount (units)</label>
      <input id="topup-units" name="units" type="number" inputmode="numeric" step="1" required value=${units} onInput=${(e) => setUnits(e.currentTarget.value)} />
      <button type="submit" disabled=${busy}>Top up</button>
      <button type="button" class="link" onClick=${onClose}>Close</button>
    </form>
    <${Problem} error=${error} />
    ${result && html`<p role="status">${result.applied ? 'Credited.' : 'Already applied: this top-up was credited once.'} Balance now ${fmt(result.balance_units)} units.</p>`}
  </section>`;
}

/** An account's teams (CONTRACT section 15), loaded here, or given by a page that loaded them already. */
