// The console's Keys page (CONTRACT section 12): an account's keys, a new key (its secret shown
// once), rotation and revocation, and the account's teams.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { call, enc, optional } from './api.js';
import { Loading, Problem, useLoad, when } from './common.js';
import { Budget, Teams } from './teams.js';

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

export function Keys({ session }) {
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
