// An account's teams and a budget's spend, as the Accounts and Keys pages show them.

import { html } from 'htm/preact';
import { enc, optional } from './api.js';
import { Loading, fmt, useLoad } from './common.js';

export function Teams({ account, state: given }) {
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
export function Budget({ b }) {
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
