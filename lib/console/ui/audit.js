// The console's Audit page (CONTRACT section 21): the audit log, newest first, page by page.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { call, query } from './api.js';
import { Loading, Problem, useLoad, when } from './common.js';

export function Audit() {
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
