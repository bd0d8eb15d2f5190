// The console's Upstreams page (CONTRACT section 12): each upstream's replicas and their state.

import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { call } from './api.js';
import { Loading, Problem, fmt, useLoad, when } from './common.js';

export function Upstreams() {
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
