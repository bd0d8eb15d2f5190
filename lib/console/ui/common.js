// Small pieces every console page uses: number and time formats, a loader hook, and the
// loading and problem lines (their text is always rendered as text, never as markup).

import { html } from 'htm/preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { ApiError } from './api.js';

export const fmt = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : n === null || n === undefined ? '—' : String(n));
export const when = (iso) => (iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '—');

/** Runs `load` and keeps its result, error and a reload function. */
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: undefined, error: null, loading: true });
  const run = useCallback(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then((data) => live && setState({ data, error: null, loading: false }), (error) => live && setState({ data: undefined, error, loading: false }));
    return () => { live = false; };
  }, deps);
  useEffect(run, [run]);
  return [state, run];
}

export function Problem({ error }) {
  if (!error) return null;
  return html`<p class="problem" role="alert">${error instanceof ApiError ? error.message : String(error.message ?? error)}</p>`;
}

export function Loading({ state }) {
  if (state.loading && state.data === undefined) return html`<p class="muted" aria-live="polite">Loading…</p>`;
  return html`<${Problem} error=${state.error} />`;
}
