// The console's Config page (CONTRACT section 12): the config in force, secrets hidden, and its
// reload.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { call } from './api.js';
import { Loading, Problem, useLoad } from './common.js';

export function Config({ session }) {
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
