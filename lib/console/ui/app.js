// The Tollgate operator console (CONTRACT section 12): Preact components in htm templates.
// Every value from the gateway is rendered as a text child or attribute (Preact escapes it);
// nothing here ever writes markup from data. Pages: Overview, Accounts, Keys, Usage, Upstreams,
// Config, Audit; the server decides what each role may do, the page only hides what it may not.

import { html, render } from 'htm/preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { ApiError, call, enc, optional, query, setCsrf } from './api.js';
import { HourChart } from './chart.js';
import { Loading, Problem, fmt, useLoad, when } from './common.js';
import { Usage } from './usage.js';

const PAGES = ['Overview', 'Accounts', 'Keys', 'Usage', 'Upstreams', 'Config', 'Audit'];
const MEMBER_PAGES = ['Overview', 'Keys', 'Usage'];
const HOUR = 3_600_000;

const newIdempotencyKey = () => `console-${crypto.randomUUID()}`;

function useRoute() {
  const read = () => decodeURIComponent((location.hash.replace(/^#\/?/, '') || 'Overview').split('?')[0]);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

// ---- sign-in ---------------------------------------------------------------------------

function SignIn({ info, onSignedIn }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const sso = new URLSearchParams(location.search).get('sso');
  const ssoMessage = sso === 'refused' ? 'Your SSO account has no console role and names no account.'
    : sso === 'failed' ? 'SSO sign-in failed; try again.' : sso === 'unavailable' ? 'The SSO provider could not be reached.' : '';
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      const s = await call('POST', '/console/api/login', { token });
      setToken('');
      onSignedIn(s);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? 'Wrong admin token.' : err.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<main class="signin">
    <h1>Tollgate console</h1>
    ${ssoMessage && html`<p class="problem" role="alert">${ssoMessage}</p>`}
    ${info.token && html`<form onSubmit=${submit} aria-label="Token sign-in">
      <label for="admin-token">Admin token</label>
      <input id="admin-token" name="token" type="password" autocomplete="current-password" required value=${token} onInput=${(e) => setToken(e.currentTarget.value)} />
      ${error && html`<p class="problem" role="alert">${error}</p>`}
      <button type="submit" disabled=${busy}>Sign in</button>
    </form>`}
    ${info.sso && html`<div class="sso"><button type="button" onClick=${() => location.assign('/console/sso')}>Sign in with SSO</button></div>`}
  </main>`;
}

// ---- the shell -------------------------------------------------------------------------

function Shell({ session, onSignOut }) {
  const route = useRoute();
  const pages = session.role === 'member' ? MEMBER_PAGES : PAGES;
  const page = pages.includes(route) ? route : 'Overview';
  useEffect(() => { document.title = `${page} · Tollgate console`; }, [page]);
  const Page = { Overview, Accounts, Keys, Usage, Upstreams, Config, Audit }[page];
  return html`<div class="shell">
    <a class="skip" href="#main">Skip to content</a>
    <header class="top">
      <span class="brand">Tollgate</span>
      <nav aria-label="Console">
        <ul>${pages.map((p) => html`<li><a href=${`#/${p}`} aria-current=${p === page ? 'page' : undefined}>${p}</a></li>`)}</ul>
      </nav>
      <div class="who">
        <span class="actor" title=${session.actor}>${session.actor}</span>
        <span class="role">${session.role === 'member' ? `member of ${session.account}` : session.role}</span>
        <button type="button" class="link" onClick=${onSignOut}>Sign out</button>
      </div>
    </header>
    <main id="main" tabindex="-1"><h1>${page}</h1><${Page} session=${session} /></main>
  </div>`;
}

// ---- Overview --------------------------------------------------------------------------

function Overview({ session }) {
  const acct = session.role === 'member' ? session.account : undefined;
  const [state] = useLoad(async () => {
    const until = new Date(Math.ceil(Date.now() / HOUR) * HOUR);
    const since = new Date(until.getTime() - 24 * HOUR);
    const range = { since: since.toISOString(), until: until.toISOString(), account: acct };
    const top = (by) => optional(`/admin/usage/top${query({ by, ...range, limit: 5 })}`);
    const [hourly, accounts, keys, models, alerts] = await Promise.all([
      optional(`/admin/usage/hourly${query(range)}`), acct ? null : top('account'), top('key'), top('model'),
      session.role === 'member' ? null : optional('/admin/alerts?limit=10'),
    ]);
    return { hourly, accounts, keys, models, alerts };
  }, [acct]);
  const d = state.data;
  if (d === undefined) return html`<${Loading} state=${state} />`;
  const hours = d.hourly?.hours ?? [];
  return html`
    <section aria-labelledby="h-24">
      <h2 id="h-24">Last 24 hours</h2>
      ${hours.length === 0 ? html`<p class="empty">No usage in the last 24 hours yet.</p>` : html`<div class="charts">
        <${HourChart} title="Requests" hours=${hours} field="requests" color="#2f5fd0" />
        <${HourChart} title="Errors" hours=${hours} field="errors" color="#c0392b" />
        <${HourChart} title="Units spent" hours=${hours} field="units" color="#1e8449" />
      </div>`}
    </section>
    <div class="tops">
      ${!acct && html`<${Top} title="Top accounts" data=${d.accounts} />`}
      <${Top} title="Top keys" data=${d.keys} />
      <${Top} title="Top models" data=${d.models} />
    </div>
    ${session.role !== 'member' && html`<section aria-labelledby="h-alerts"><h2 id="h-alerts">Alerts</h2>
      ${(d.alerts?.events ?? []).length === 0 ? html`<p class="empty">No alerts.</p>` : html`<div class="scroll"><table class="alerts cards" role="table">
        <caption class="sr-only">Alerts, newest first</caption>
        <thead role="rowgroup"><tr role="row"><th scope="col" role="columnheader">When</th><th scope="col" role="columnheader">Type</th><th scope="col" role="columnheader">Subject</th><th scope="col" role="columnheader">Detail</th><th scope="col" role="columnheader">Delivery</th></tr></thead>
        <tbody role="rowgroup">${d.alerts.events.map((e) => html`<tr role="row">
          <td role="cell" class="when" data-label="When"><span>${when(e.at)}</span></td><td role="cell" data-label="Type"><strong>${e.type ?? 'alert'}</strong></td>
          <td role="cell" class="id subject" data-label="Subject"><span>${alertSubject(e.subject)}</span></td><td role="cell" data-label="Detail"><span>${alertDetail(e)}</span></td><td role="cell" data-label="Delivery"><span>${deliveryText(e.delivery)}</span></td>
        </tr>`)}</tbody>
      </table></div>`}
    </section>`}`;
}

/** An alert's subject as one line: account / team / key, or provider / replica (CONTRACT section 15). */
function alertSubject(s) {
  if (!s) return '—';
  const parts = s.provider !== undefined ? [s.provider, s.target] : [s.account, s.team === undefined ? undefined : `team ${s.team}`, s.key_id];
  return parts.filter((x) => x !== undefined && x !== null && x !== '').map(String).join(' / ') || '—';
}

/** What crossed, per type (docs/alerts.md's data columns); nothing invented for a type it does not know. */
function alertDetail(e) {
  const d = e.data ?? {};
  if (e.type === 'budget.threshold') {
    return `${d.threshold}% of ${d.scope === 'team' ? "the team's" : "the key's"} budget (${fmt(d.spent_units)} of ${fmt(d.budget_units)} units${d.period ? ` / ${d.period}` : ''})`;
  }
  if (e.type === 'wallet.low') return `available ${fmt(d.available_units)} units, below ${fmt(d.wallet_low_units)}`;
  if (e.type === 'key.expiring') return `expires ${when(d.expires_at)}`;
  if (e.type === 'upstream.ejected') return `${d.reason ?? 'ejected'}${d.until ? ` until ${when(d.until)}` : ''}`;
  return d.threshold !== undefined ? `${d.threshold}%` : '';
}

function deliveryText(v) {
  if (!v) return '—';
  const status = v.last_status === null || v.last_status === undefined ? '' : `, last HTTP ${v.last_status}`;
  const tries = `${v.attempts} attempt${v.attempts === 1 ? '' : 's'}`;
  return html`<span class=${v.state === 'delivered' ? 'good' : v.state === 'failed' ? 'bad' : 'muted'}>${v.state}</span> <span class="muted">(${tries}${status})</span>`;
}

function Top({ title, data }) {
  const rows = data?.rows ?? [];
  return html`<section class="top-list"><h2>${title}</h2>
    ${rows.length === 0 ? html`<p class="empty">Nothing yet.</p>` : html`<div class="scroll"><table><thead><tr><th scope="col">Id</th><th scope="col" class="num">Requests</th><th scope="col" class="num">Units</th></tr></thead>
      <tbody>${rows.map((r) => html`<tr><td class="id">${r.id}</td><td class="num">${fmt(r.requests)}</td><td class="num">${fmt(r.units)}</td></tr>`)}</tbody></table></div>`}
  </section>`;
}

// ---- Accounts --------------------------------------------------------------------------

function Accounts({ session }) {
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
function Teams({ account, state: given }) {
  const [own] = useLoad(() => (given ? Promise.resolve(undefined) : optional(`/admin/accounts/${enc(account)}/teams`)), [account, given === undefined]);
  const state = given ?? own;
  if (state.data === undefined) return html`<${Loading} state=${state} />`;
  // null: a gateway without teams; say nothing.
  if (state.data === null) return null;
  const teams = state.data.teams;
  const hid = `h-teams-${account}`;
  return html`<section class="panel teams" aria-labelledby=${hid}><h2 id=${hid}>Teams of <span class="id">${account}</span></h2>
    ${teams.length === 0 ? html`<p class="empty">No teams.</p>` : html`<div class="scroll"><table class="cards" role="table">
      <caption class="sr-only">Teams of ${account}</caption>
      <thead role="rowgroup"><tr role="row"><th scope="col" role="columnheader">Id</th><th scope="col" role="columnheader">Name</th><th scope="col" role="columnheader" class="num">Budget spent (units)</th><th scope="col" role="columnheader">Models</th></tr></thead>
      <tbody role="rowgroup">${teams.map((t) => html`<tr role="row">
        <td role="cell" class="id" data-label="Id"><span>${t.id}</span></td><td role="cell" class="name" data-label="Name"><span>${t.name ?? html`<span class="muted">(no name)</span>`}</span></td>
        <td role="cell" class="num" data-label="Budget spent"><span><${Budget} b=${t.budget} /></span></td>
        <td role="cell" data-label="Models"><span>${t.models === null || t.models === undefined ? html`<span class="muted">all</span>` : t.models.join(', ')}</span></td>
      </tr>`)}</tbody>
    </table></div>`}
  </section>`;
}

/**
 * A key's or a team's budget: a bar (a <meter>: amber from 80% spent, red when spent) beside
 * "spent of units / period"; without a budget, the spend and "(no budget)".
 */
function Budget({ b }) {
  const text = budgetText(b);
  if (!b || b.units === null || b.units === undefined) return text;
  const label = `${fmt(b.spent_units)} of ${fmt(b.units)} units spent${b.period ? ` this ${b.period}` : ''}`;
  return html`<span class="budget"><meter min="0" max=${Math.max(b.units, 1)} value=${Math.min(b.spent_units, Math.max(b.units, 1))} low=${0.8 * b.units} high=${0.999 * b.units} optimum="0" aria-label=${label} title=${label}></meter> <span>${text}</span></span>`;
}

/** A key's or a team's budget as text: "spent of units / period", or the spend and "(no budget)". */
function budgetText(b) {
  if (!b) return '—';
  return b.units === null || b.units === undefined ? `${fmt(b.spent_units)} (no budget)` : `${fmt(b.spent_units)} of ${fmt(b.units)}${b.period ? ` / ${b.period}` : ''}`;
}

// ---- Keys ------------------------------------------------------------------------------

function AccountPicker({ session, value, onChange }) {
  const [state] = useLoad(() => (session.role === 'member' ? Promise.resolve(null) : optional('/admin/accounts?limit=200')), [session.role]);
  if (session.role === 'member') return html`<p>Account <span class="id">${session.account}</span></p>`;
  // Still asking: not the id field for a moment (a pick made in it would be lost when the list comes).
  if (state.data === undefined && state.loading) return html`<p class="muted" aria-live="polite">Loading accounts…</p>`;
  const list = state.data?.accounts;
  if (list) {
    return html`<div class="field"><label for="pick-account">Account</label>
      <select id="pick-account" value=${value} onChange=${(e) => onChange(e.currentTarget.value)}>
        <option value="">Choose an account</option>
        ${list.map((a) => html`<option value=${a.id}>${a.id}</option>`)}
      </select></div>`;
  }
  return html`<form class="field" onSubmit=${(e) => { e.preventDefault(); onChange(new FormData(e.currentTarget).get('account')); }}>
    <label for="pick-account">Account</label><input id="pick-account" name="account" value=${value} /><button type="submit">Open</button></form>`;
}

function Keys({ session }) {
  const [account, setAccount] = useState(session.role === 'member' ? session.account : (sessionStorage.getItem('tg-account') ?? ''));
  const pick = (a) => { sessionStorage.setItem('tg-account', a); setAccount(a); };
  return html`<${AccountPicker} session=${session} value=${account} onChange=${pick} />
    ${account ? html`<${KeyTable} key=${account} account=${account} session=${session} />` : html`<p class="empty">Choose an account to see its keys.</p>`}`;
}

function KeyTable({ account, session }) {
  const [state, reload] = useLoad(() => call('GET', `/admin/accounts/${enc(account)}/keys`), [account]);
  const [teams] = useLoad(() => optional(`/admin/accounts/${enc(account)}/teams`), [account]);
  const teamList = teams.data?.teams ?? [];
  const teamName = (id) => { const t = teamList.find((x) => x.id === id); return t && t.name ? `${t.name} (${id})` : id; };
  const [creating, setCreating] = useState(false);
  const [secret, setSecret] = useState(null);
  const [confirm, setConfirm] = useState(null);
  const [error, setError] = useState(null);
  const canWrite = session.role === 'admin' || session.role === 'member';
  const act = async (fn) => {
    setError(null);
    try { await fn(); } catch (err) { setError(err); }
    reload();
  };
  const rotate = (k) => act(async () => {
    const r = await call('POST', `/admin/keys/${enc(k.id)}/rotate`, { grace_seconds: 0 });
    setSecret({ title: `New key for ${k.name ?? k.id}`, plaintext: r.key });
  });
  const revoke = (k) => act(async () => { await call('DELETE', `/admin/keys/${enc(k.id)}`); setConfirm(null); });
  const d = state.data;
  return html`
    ${canWrite && html`<p><button type="button" onClick=${() => { setCreating(true); setSecret(null); }}>Create key</button></p>`}
    ${creating && html`<${CreateKey} account=${account} teams=${teamList} onClose=${() => setCreating(false)} onCreated=${(r) => { setCreating(false); setSecret({ title: 'New key', plaintext: r.key }); reload(); }} />`}
    ${secret && html`<${ShowOnce} ...${secret} onClose=${() => setSecret(null)} />`}
    <${Problem} error=${error} />
    ${d === undefined ? html`<${Loading} state=${state} />` : d.keys.length === 0 ? html`<p class="empty">No keys.</p>` : html`<${Problem} error=${state.error} />
    <div class="scroll"><table class="cards" role="table">
      <caption class="sr-only">Keys of ${account}</caption>
      <thead role="rowgroup"><tr role="row"><th scope="col" role="columnheader">Name</th><th scope="col" role="columnheader">Hint</th><th scope="col" role="columnheader">Models</th><th scope="col" role="columnheader" class="num">Budget spent</th><th scope="col" role="columnheader">Expires</th><th scope="col" role="columnheader">Last used</th><th scope="col" role="columnheader">Team</th>${canWrite && html`<th scope="col" role="columnheader"><span class="sr-only">Actions</span></th>`}</tr></thead>
      <tbody role="rowgroup">${d.keys.map((k) => html`<tr role="row">
        <td role="cell" class="name" data-label="Name"><span>${k.name ?? html`<span class="muted">(no name)</span>`}</span></td>
        <td role="cell" class="id" data-label="Hint"><span>${k.hint ?? '—'}</span></td>
        <td role="cell" data-label="Models"><span>${k.models === null ? html`<span class="muted">all</span>` : k.models.join(', ')}</span></td>
        <td role="cell" class="num" data-label="Budget spent"><span><${Budget} b=${k.budget} /></span></td>
        <td role="cell" class="when" data-label="Expires"><span>${when(k.expires_at)}</span></td>
        <td role="cell" class="when" data-label="Last used"><span>${when(k.last_used_at)}</span></td>
        <td role="cell" class="name" data-label="Team"><span>${k.team === null || k.team === undefined ? html`<span class="muted">—</span>` : teamName(k.team)}</span></td>
        ${canWrite && html`<td role="cell" class="actions">
          <button type="button" onClick=${() => rotate(k)} aria-label=${`Rotate ${k.name ?? k.id}`}>Rotate</button>
          ${confirm === k.id ? html`<span role="group" aria-label="Confirm revoke">
              <span>Revoke this key?</span>
              <button type="button" class="danger" onClick=${() => revoke(k)}>Yes, revoke</button>
              <button type="button" onClick=${() => setConfirm(null)}>Cancel</button></span>`
            : html`<button type="button" class="danger" onClick=${() => setConfirm(k.id)} aria-label=${`Revoke ${k.name ?? k.id}`}>Revoke</button>`}
        </td>`}
      </tr>`)}</tbody>
    </table></div>`}
    <${Teams} account=${account} state=${teams} />`;
}

function CreateKey({ account, teams, onClose, onCreated }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const body = {};
    const name = String(f.get('name') ?? '').trim();
    if (name) body.name = name;
    const models = String(f.get('models') ?? '').split(',').map((m) => m.trim()).filter(Boolean);
    if (models.length) body.models = models;
    const units = String(f.get('budget_units') ?? '').trim();
    const period = String(f.get('budget_period') ?? '');
    if (units !== '') body.budget = { units: Number(units), period: period === '' ? null : period };
    const expires = String(f.get('expires') ?? '');
    if (expires) body.expires_at = new Date(`${expires}T23:59:59Z`).toISOString();
    const team = String(f.get('team') ?? '');
    if (team) body.team = team;
    setBusy(true);
    setError(null);
    try {
      onCreated(await call('POST', `/admin/accounts/${enc(account)}/keys`, body));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return html`<section class="panel" aria-labelledby="h-create"><h2 id="h-create">Create key</h2>
    <form onSubmit=${submit} class="grid">
      <label for="key-name">Name</label><input id="key-name" name="name" maxlength="200" />
      <label for="key-models">Models</label><input id="key-models" name="models" placeholder="all; or e.g. gpt-4o-mini, llama-*" aria-describedby="key-models-help" />
      <span id="key-models-help" class="help">Comma-separated; * matches any text.</span>
      <label for="key-budget">Budget units</label><input id="key-budget" name="budget_units" type="number" min="0" step="1" inputmode="numeric" />
      <label for="key-period">Budget period</label>
      <select id="key-period" name="budget_period"><option value="">No reset</option><option value="day">Day</option><option value="week">Week</option><option value="month" selected>Month</option></select>
      <label for="key-expires">Expires</label><input id="key-expires" name="expires" type="date" />
      ${teams.length > 0 && html`<label for="key-team">Team</label>
      <select id="key-team" name="team"><option value="">No team</option>${teams.map((t) => html`<option value=${t.id}>${t.name ? `${t.name} (${t.id})` : t.id}</option>`)}</select>`}
      <div class="buttons"><button type="submit" disabled=${busy}>Create</button><button type="button" class="link" onClick=${onClose}>Cancel</button></div>
    </form>
    <${Problem} error=${error} />
  </section>`;
}

/** A new plaintext key, shown once, with a Copy button. */
function ShowOnce({ title, plaintext, onClose }) {
  const [copied, setCopied] = useState('');
  const copy = async () => {
    try { await navigator.clipboard.writeText(plaintext); setCopied('Copied.'); } catch { setCopied('Copying is not allowed here: select the key and copy it.'); }
  };
  return html`<section class="panel secret" aria-labelledby="h-secret" role="region">
    <h2 id="h-secret">${title}</h2>
    <p>This is the only time the key is shown. Keep it somewhere safe.</p>
    <p><code class="key" data-testid="new-key">${plaintext}</code></p>
    <button type="button" onClick=${copy}>Copy</button> <button type="button" class="link" onClick=${onClose}>Done</button>
    <span role="status">${copied}</span>
  </section>`;
}

// ---- Upstreams -------------------------------------------------------------------------

function Upstreams() {
  const [state, reload] = useLoad(() => call('GET', '/admin/upstreams'), []);
  const [at, setAt] = useState(new Date());
  useEffect(() => {
    const t = setInterval(() => { reload(); setAt(new Date()); }, 4000);
    return () => clearInterval(t);
  }, [reload]);
  const d = state.data;
  if (d === undefined) return html`<${Loading} state=${state} />`;
  const providers = Object.entries(d.providers);
  return html`<p class="muted" aria-live="off">Refreshed every 4 s; last ${at.toISOString().slice(11, 19)} UTC.</p>
    <${Problem} error=${state.error} />
    ${providers.length === 0 && html`<p class="empty">No providers.</p>`}${Object.keys(d.mcp_servers ?? {}).length > 0 && html`<section class="provider" aria-labelledby="p-mcp"><h2 id="p-mcp">MCP servers</h2><div class="scroll"><table><thead><tr><th scope="col">Server</th><th scope="col">URL</th><th scope="col">State</th><th scope="col" class="num">Tools</th></tr></thead><tbody>${Object.entries(d.mcp_servers).map(([n, m]) => html`<tr><td class="id">${n}</td><td class="id">${m.url}</td><td>${m.reachable === null ? html`<span class="muted">not tried yet</span>` : m.reachable ? html`<span class="good">reachable</span>` : html`<span class="bad">unreachable${m.error ? `: ${m.error}` : ''}</span>`}</td><td class="num">${m.tools === null ? '—' : fmt(m.tools)}</td></tr>`)}</tbody></table></div></section>`}
    ${providers.map(([name, p]) => html`<section class="provider" aria-labelledby=${`p-${name}`}>
      <h2 id=${`p-${name}`}>${name} <span class="muted">${p.balance ?? ''}${p.queued ? ` · ${p.queued} queued` : ''}${p.discovery ? ` · from DNS ${p.discovery.dns}:${p.discovery.port}${p.discovery.draining.length ? ` · ${p.discovery.draining.length} draining` : ''}` : ''}</span>${p.discovery?.consecutive_failures ? html` <span class="bad">lookups failing (${p.discovery.last_error}); the last set serves</span>` : ''}</h2>
      <div class="scroll"><table><thead><tr><th scope="col">URL</th><th scope="col">State</th><th scope="col" class="num">Outstanding</th><th scope="col" class="num">Queue depth</th><th scope="col" class="num">KV cache</th><th scope="col" class="num">Failures</th></tr></thead>
      <tbody>${p.replicas.map((r) => html`<tr>
        <td class="id">${r.url}</td>
        <td>${r.ejected_until ? html`<span class="bad">ejected until ${when(r.ejected_until)}</span>` : r.healthy ? html`<span class="good">healthy</span>` : html`<span class="bad">unhealthy</span>`}</td>
        <td class="num">${fmt(r.outstanding)}</td><td class="num">${fmt(r.queue_depth)}</td>
        <td class="num">${r.kv_cache_usage === null ? '—' : `${Math.round(r.kv_cache_usage * 100)}%`}</td><td class="num">${fmt(r.failures)}</td>
      </tr>`)}</tbody></table></div>
      ${(() => { const open = (p.circuits ?? []).filter((c) => c.open); return open.length === 0 ? html`<p class="muted">No open circuits.</p>`
        : html`<p class="bad">Open circuits: ${open.map((c) => `${c.upstream_model}${c.open_until ? ` (until ${when(c.open_until)})` : ''}`).join(', ')}</p>`; })()}
    </section>`)}`;
}

// ---- Config ----------------------------------------------------------------------------

function Config({ session }) {
  const [state] = useLoad(() => call('GET', '/console/api/config'), []);
  const [text, setText] = useState('');
  const [check, setCheck] = useState(null);
  const [reload, setReload] = useState(null);
  const [error, setError] = useState(null);
  const run = async (fn, set) => { // never rejects: a failure is shown through setError
    setError(null);
    try { set(await fn()); } catch (err) { setError(err); }
  };
  return html`<section aria-labelledby="h-effective"><h2 id="h-effective">Effective config</h2>
      <p class="muted">Secrets are shown as ***.</p>
      ${state.data === undefined ? html`<${Loading} state=${state} />` : html`<pre class="yaml" tabindex="0" aria-label="Effective config (YAML)">${state.data.yaml}</pre>`}
    </section>
    <section aria-labelledby="h-check"><h2 id="h-check">Check a config</h2>
      <form onSubmit=${(e) => { e.preventDefault(); void run(() => call('POST', '/console/api/config/check', { yaml: text }), setCheck); }}>
        <label for="check-yaml">YAML to check</label>
        <textarea id="check-yaml" rows="10" spellcheck="false" value=${text} onInput=${(e) => setText(e.currentTarget.value)}></textarea>
        <button type="submit">Check</button>
      </form>
      ${check && (check.ok ? html`<p role="status" class="good">No problems.</p>` : html`<ul class="problems" aria-label="Problems">${check.problems.map((p) => html`<li>${p}</li>`)}</ul>`)}
      ${check && check.warnings.length > 0 && html`<ul class="warnings" aria-label="Warnings">${check.warnings.map((w) => html`<li>${w}</li>`)}</ul>`}
    </section>
    ${session.role === 'admin' && html`<section aria-labelledby="h-reload"><h2 id="h-reload">Reload</h2>
      <p>Reads the config file again, as SIGHUP does.</p>
      <button type="button" onClick=${() => run(() => call('POST', '/console/api/reload'), setReload)}>Reload</button>
      ${reload && (reload.reloaded ? html`<p role="status" class="good">Reloaded.</p>` : html`<ul class="problems" aria-label="Reload problems">${reload.problems.map((p) => html`<li>${p}</li>`)}</ul>`)}
    </section>`}
    <${Problem} error=${error} />`;
}

// ---- Audit -----------------------------------------------------------------------------

function Audit() {
  const [cursors, setCursors] = useState([undefined]);
  const cursor = cursors[cursors.length - 1];
  const [state] = useLoad(() => call('GET', `/admin/audit${query({ limit: 50, cursor })}`), [cursor]);
  const d = state.data;
  if (d === undefined) return html`<${Loading} state=${state} />`;
  return html`<${Problem} error=${state.error} /><div class="scroll"><table>
      <caption class="sr-only">Audit log, newest first</caption>
      <thead><tr><th scope="col">When</th><th scope="col">Actor</th><th scope="col">Role</th><th scope="col">Action</th><th scope="col">Target</th><th scope="col">Address</th><th scope="col">Request id</th></tr></thead>
      <tbody>${d.events.map((e) => html`<tr><td class="when">${when(e.at)}</td><td>${e.actor}</td><td>${e.role}</td><td>${e.action}</td><td class="id">${e.target}</td><td>${e.ip}</td><td class="id">${e.request_id}</td></tr>`)}</tbody>
    </table></div>
    ${d.events.length === 0 && html`<p class="empty">No writes yet.</p>`}
    <div class="pager">
      ${cursors.length > 1 && html`<button type="button" onClick=${() => setCursors(cursors.slice(0, -1))}>Previous page</button>`}
      ${d.next_cursor && html`<button type="button" onClick=${() => setCursors([...cursors, d.next_cursor])}>Next page</button>`}
    </div>`;
}

// ---- the app ---------------------------------------------------------------------------

function App() {
  const [info, setInfo] = useState(null);
  const [session, setSession] = useState(undefined);
  const [error, setError] = useState(null);
  useEffect(() => {
    void (async () => { // never rejects: every failure ends in setSession or setError
      try {
        setInfo(await call('GET', '/console/api/info'));
        const s = await call('GET', '/console/api/session');
        setCsrf(s.csrf);
        setSession(s);
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) setSession(null);
        else setError(err);
      }
    })();
  }, []);
  const signedIn = (s) => { setCsrf(s.csrf); setSession(s); if (location.search) history.replaceState(null, '', '/console/'); };
  const signOut = async () => {
    try { await call('POST', '/console/api/logout'); } catch { /* ended anyway below */ }
    setCsrf('');
    setSession(null);
  };
  if (error) return html`<main class="signin"><${Problem} error=${error} /></main>`;
  if (info === null || session === undefined) return html`<p class="muted">Loading the console…</p>`;
  if (session === null) return html`<${SignIn} info=${info} onSignedIn=${signedIn} />`;
  return html`<${Shell} session=${session} onSignOut=${signOut} />`;
}

render(html`<${App} />`, document.getElementById('app'));
