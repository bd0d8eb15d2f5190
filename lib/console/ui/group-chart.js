// The top groups of a usage grouping over time (CONTRACT section 20): units per UTC day of the
// five groups with the most units, one line each (uPlot on a canvas), with the same figures as
// text in the caption for screen readers and small screens.

import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

const COLORS = ['#2f6fdb', '#d9822b', '#2e9e6b', '#b8448f', '#7a5cc7'];
const DAY = 86_400_000;

/** `rows`: groups by day and `dim` ({day, [dim], units}); `name(v)`: a value as shown. */
export function GroupChart({ rows, dim, name }) {
  const box = useRef(null);
  const totals = new Map();
  for (const r of rows) totals.set(r[dim], (totals.get(r[dim]) ?? 0) + r.units);
  const top = [...totals].sort((a, b) => b[1] - a[1]).slice(0, COLORS.length).map(([v]) => v);
  const days = [...new Set(rows.map((r) => Date.parse(`${r.day}T00:00:00Z`)))].sort((a, b) => a - b);
  // Every day from the day before the first to the day after the last, so a day without usage
  // shows as 0 (and a single day as a point between two, not on a span the axis makes up).
  const xs = [];
  for (let d = (days[0] ?? 0) - DAY; days.length > 0 && d <= days[days.length - 1] + DAY; d += DAY) xs.push(d);
  const key = JSON.stringify([top, xs.length, rows.length]);
  useEffect(() => {
    const el = box.current;
    if (el === null || xs.length === 0) return undefined;
    const series = top.map((v) => xs.map((d) => rows.find((r) => r[dim] === v && Date.parse(`${r.day}T00:00:00Z`) === d)?.units ?? 0));
    const width = () => Math.max(240, Math.floor(el.clientWidth || 300));
    const plot = new uPlot({
      width: width(), height: 200, legend: { show: true }, cursor: { show: true }, scales: { x: { time: true } },
      axes: [{ stroke: '#445', grid: { stroke: '#e3e6ee' } }, { stroke: '#445', grid: { stroke: '#e3e6ee' }, size: 56 }],
      series: [{}, ...top.map((v, i) => ({ label: String(name(v)), stroke: COLORS[i], width: 2, points: { show: true } }))],
    }, [xs.map((d) => d / 1000), ...series], el);
    const ro = new ResizeObserver(() => plot.setSize({ width: width(), height: 200 }));
    ro.observe(el);
    return () => { ro.disconnect(); plot.destroy(); };
  }, [key]);
  if (xs.length === 0) return null;
  const caption = top.map((v) => `${name(v)}: ${totals.get(v).toLocaleString('en-US')}`).join(', ');
  return html`<figure class="chart" data-testid="group-chart">
    <figcaption><span class="chart-title">Units per day, top ${top.length}</span> <span class="chart-total">${caption}</span></figcaption>
    <div class="chart-box" ref=${box} role="img" aria-label=${`Units per day of the top ${top.length} groups: ${caption}`}></div>
  </figure>`;
}
