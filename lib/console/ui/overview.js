// The console's Overview page (CONTRACT section 12): the last 24 hours by the hour, the top
// accounts, keys and models, and the alerts of the outbox with their deliveries.

import { html } from 'htm/preact';
import { optional, query } from './api.js';
import { HourChart } from './chart.js';
import { Loading, fmt, useLoad, when } from './common.js';

const HOUR = 3_600_000;

export function Overview({ session }) {
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
