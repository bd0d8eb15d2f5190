// One 24-hour chart (uPlot on a canvas): values per hour, sized to its container, redrawn when
// the container's width changes. The numbers are also given as text (figcaption) for screen
// readers and small screens.

import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

export function HourChart({ title, hours, field, color }) {
  const box = useRef(null);
  useEffect(() => {
    const el = box.current;
    if (el === null) return undefined;
    const xs = hours.map((h) => Date.parse(h.hour) / 1000);
    const ys = hours.map((h) => Number(h[field] ?? 0));
    const width = () => Math.max(240, Math.floor(el.clientWidth || 300));
    const plot = new uPlot({
      width: width(), height: 160, legend: { show: false }, cursor: { show: true },
      scales: { x: { time: true } },
      axes: [{ stroke: '#445', grid: { stroke: '#e3e6ee' } }, { stroke: '#445', grid: { stroke: '#e3e6ee' }, size: 56 }],
      series: [{}, { label: title, stroke: color, fill: `${color}22`, width: 2, paths: uPlot.paths.stepped({ align: 1 }) }],
    }, [xs, ys], el);
    const ro = new ResizeObserver(() => plot.setSize({ width: width(), height: 160 }));
    ro.observe(el);
    return () => { ro.disconnect(); plot.destroy(); };
  }, [hours, field]);
  const total = hours.reduce((n, h) => n + Number(h[field] ?? 0), 0);
  return html`<figure class="chart">
    <figcaption><span class="chart-title">${title}</span> <span class="chart-total">${total.toLocaleString('en-US')} in 24 h</span></figcaption>
    <div class="chart-box" ref=${box} role="img" aria-label=${`${title} per hour over the last 24 hours, ${total} in total`}></div>
  </figure>`;
}
