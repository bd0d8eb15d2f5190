// The console's Usage page (CONTRACT sections 12, 18 and 20): usage records filtered by account,
// key, model, tag, end user and batch, page by page, with their downloads; and the same usage grouped
// by tag, end user, key, team, model or day (GET /admin/usage?group_by=, read from totals),
// biggest first, each group's units a link to its records.

import { html } from 'htm/preact';
import { useMemo, useState } from 'preact/hooks';
import { call, query } from './api.js';
import { Loading, Problem, fmt, useLoad, when } from './common.js';
import { GroupChart } from './group-chart.js';

/** What the page may group by (one or two dimensions), with their labels. */
const GROUPINGS = [
  ['', 'No grouping (records)'], ['tag', 'Tag'], ['end_user', 'End user'], ['key', 'Key'], ['team', 'Team'], ['model', 'Model'], ['day', 'Day'],
  ['day,tag', 'Day and tag'], ['day,end_user', 'Day and end user'], ['day,model', 'Day and model'], ['tag,model', 'Tag and model'],
  ['end_user,model', 'End user and model'], ['tag,end_user', 'Tag and end user'],
];
const LABELS = { tag: 'Tag', end_user: 'End user', key: 'Key', team: 'Team', model: 'Model', day: 'Day' };
const EMPTY = { account: '', key: '', team: '', model: '', tag: '', end_user: '', batch_id: '', since: '', until: '', group_by: '' };
const DAY = 86_400_000;

export function Usage({ session }) {
  const member = session.role === 'member';
  const [filters, setFilters] = useState({ ...EMPTY, account: member ? session.account : '' });
  const [cursors, setCursors] = useState([undefined]);
  const cursor = cursors[cursors.length - 1];
  const params = useMemo(() => ({
    account: filters.account, key: filters.key, team: filters.team, model: filters.model, tag: filters.tag, end_user: filters.end_user, batch_id: filters.batch_id,
    since: filters.since ? new Date(`${filters.since}Z`).toISOString() : undefined,
    until: filters.until ? new Date(`${filters.until}Z`).toISOString() : undefined,
  }), [filters]);
  const apply = (e) => {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const next = { ...EMPTY };
    for (const k of Object.keys(EMPTY)) next[k] = String(f.get(k) ?? '');
    if (member) next.account = session.account;
    setFilters(next);
    setCursors([undefined]);
  };
  // A group's records: its values as the records' filters (a day as its range), grouping off.
  const showRecords = (g) => {
    const next = { ...filters, group_by: '' };
    for (const d of ['tag', 'end_user', 'key', 'team', 'model']) if (d in g) next[d] = g[d] ?? '';
    if ('day' in g) Object.assign(next, { since: `${g.day}T00:00`, until: new Date(Date.parse(`${g.day}T00:00:00Z`) + DAY).toISOString().slice(0, 16) });
    setFilters(next);
    setCursors([undefined]);
  };
  const exportUrl = (format) => `/console/api/usage/export${query({ ...params, format })}`;
  const field = (name, label, extra = {}) => html`<div class="field"><label for=${`f-${name}`}>${label}</label><input id=${`f-${name}`} name=${name} value=${filters[name]} ...${extra} /></div>`;
  return html`<form class="filters" onSubmit=${apply} aria-label="Filter usage records">
      ${field('account', 'Account', { disabled: member })}
      ${field('key', 'Key id')}
      ${field('team', 'Team')}
      ${field('model', 'Model')}
      ${field('tag', 'Tag')}
      ${field('end_user', 'End user')}
      ${field('batch_id', 'Batch id')}
      ${field('since', 'From (UTC)', { type: 'datetime-local' })}
      ${field('until', 'To (UTC)', { type: 'datetime-local' })}
      <div class="field"><label for="f-group_by">Group by</label><select id="f-group_by" name="group_by" value=${filters.group_by}>
        ${GROUPINGS.map(([v, label]) => html`<option value=${v} selected=${v === filters.group_by}>${label}</option>`)}
      </select></div>
      <div class="field buttons"><button type="submit">Apply</button></div>
    </form>
    <p class="downloads"><a href=${exportUrl('csv')} download="usage.csv">Download CSV</a> <a href=${exportUrl('jsonl')} download="usage.jsonl">Download JSONL</a></p>
    ${filters.group_by && filters.batch_id && html`<p class="muted" data-testid="batch-records">A batch's usage is shown as its lines' records: grouping does not apply to a batch filter.</p>`}
    ${filters.group_by && !filters.batch_id ? html`<${Groups} filters=${filters} params=${params} onPick=${showRecords} />` : html`<${Records} params=${params} cursor=${cursor} cursors=${cursors} setCursors=${setCursors} />`}`;
}

/** The usage grouped (GET /admin/usage?group_by=): biggest groups first, each linking to its records. */
function Groups({ filters, params, onPick }) {
  const dims = filters.group_by.split(',');
  const [state] = useLoad(() => call('GET', `/admin/usage${query({ account: params.account, tag: params.tag, end_user: params.end_user, since: params.since, group_by: filters.group_by })}`), [params, filters.group_by]);
  // With one dimension (not the day), its top groups per day too, for the chart.
  const one = dims.length === 1 && dims[0] !== 'day' ? dims[0] : undefined;
  const [daily] = useLoad(() => (one === undefined ? Promise.resolve(undefined)
    : call('GET', `/admin/usage${query({ account: params.account, tag: params.tag, end_user: params.end_user, since: params.since, group_by: `day,${one}` })}`)), [params, one]);
  const d = state.data;
  if (d === undefined) return html`<${Loading} state=${state} />`;
  const groups = [...d.groups].sort((a, b) => (a.day && b.day && a.day !== b.day ? (a.day < b.day ? 1 : -1) : b.units - a.units));
  const shown = (g, dim) => (g[dim] === null ? (dim === 'tag' ? '(no tag)' : `(no ${LABELS[dim].toLowerCase()})`) : g[dim]);
  return html`<${Problem} error=${state.error} />
    <p class="muted" data-testid="group-totals">Totals from ${when(d.since)}: ${fmt(d.totals.requests)} requests, ${fmt(d.totals.units)} units.
      ${dims.includes('tag') ? ' A request with several tags counts in each of their groups.' : ''}</p>
    ${one !== undefined && daily.data !== undefined && html`<${GroupChart} rows=${daily.data.groups} dim=${one} name=${(v) => shown({ [one]: v }, one)} />`}
    ${groups.length === 0 ? html`<p class="empty">No usage in this range.</p>` : html`<div class="scroll"><table data-testid="usage-groups">
      <caption class="sr-only">Usage by ${dims.map((x) => LABELS[x]).join(' and ')}</caption>
      <thead><tr>${dims.map((x) => html`<th scope="col">${LABELS[x]}</th>`)}<th scope="col" class="num">Requests</th><th scope="col" class="num">Tokens</th><th scope="col" class="num">Units</th></tr></thead>
      <tbody>${groups.map((g) => html`<tr>
        ${dims.map((x) => html`<td class=${x === 'key' ? 'id' : ''}>${shown(g, x)}</td>`)}
        <td class="num">${fmt(g.requests)}</td><td class="num">${fmt(g.prompt_tokens + g.completion_tokens)}</td>
        <td class="num"><button type="button" class="link" title="Show these records" onClick=${() => onPick(g)}>${fmt(g.units)}</button></td>
      </tr>`)}</tbody>
    </table></div>`}`;
}

/** One page of usage records, with the pager. */
function Records({ params, cursor, cursors, setCursors }) {
  const [state] = useLoad(() => call('GET', `/admin/usage/records${query({ ...params, limit: 50, cursor })}`), [params, cursor]);
  const d = state.data;
  if (d === undefined) return html`<${Loading} state=${state} />`;
  if (d.records.length === 0) return html`<${Problem} error=${state.error} /><p class="empty">No usage records match.</p>`;
  return html`<${Problem} error=${state.error} />
    <div class="scroll"><table>
      <caption class="sr-only">Usage records</caption>
      <thead><tr><th scope="col">Time</th><th scope="col">Request id</th><th scope="col">Account</th><th scope="col">Key</th><th scope="col">Model</th><th scope="col">Route</th><th scope="col">Tags</th><th scope="col">End user</th><th scope="col" title="A batch line's custom_id (its request id is BATCH_ID-LINE)">Custom id</th><th scope="col" class="num">Status</th><th scope="col" class="num">Tokens</th><th scope="col" class="num">Units</th></tr></thead>
      <tbody>${d.records.map((r) => html`<tr>
        <td class="when">${when(r.at)}</td><td class="id">${r.request_id}</td><td class="id">${r.account}</td><td class="id">${r.key_id ?? '—'}</td><td>${r.model}</td><td>${r.route}</td>
        <td>${(r.tags ?? []).join(', ') || '—'}</td><td>${r.end_user ?? '—'}</td><td class="id" title=${r.batch_id}>${r.custom_id ?? '—'}</td>
        <td class="num">${r.status}</td><td class="num">${fmt(r.prompt_tokens + r.completion_tokens)}</td><td class="num">${fmt(r.units)}</td>
      </tr>`)}</tbody>
    </table></div>
    <div class="pager">
      ${cursors.length > 1 && html`<button type="button" onClick=${() => setCursors(cursors.slice(0, -1))}>Previous page</button>`}
      ${d.next_cursor && html`<button type="button" onClick=${() => setCursors([...cursors, d.next_cursor])}>Next page</button>`}
    </div>`;
}
