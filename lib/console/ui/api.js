// The console's calls to the gateway: same origin, the session cookie, and on every write the
// CSRF token the session answer gave. An error answer becomes an ApiError with the envelope's
// message (shown as text, never markup).

let csrf = '';

export function setCsrf(token) { csrf = token ?? ''; }

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function call(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD') headers['x-csrf-token'] = csrf;
  let res;
  try {
    res = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new ApiError(0, 'network', 'The gateway could not be reached.');
  }
  if (res.status === 204) return null;
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (!res.ok) {
    const e = data && data.error ? data.error : {};
    throw new ApiError(res.status, e.code ?? 'error', e.message ?? `HTTP ${res.status}`);
  }
  return data;
}

/** GET that answers null for a 404 (a route another feature adds: "none yet"). */
export async function optional(path) {
  try {
    return await call('GET', path);
  } catch (e) {
    // 404 unknown_url, or 405 on a path that takes only other methods so far: not there yet.
    if (e instanceof ApiError && ((e.status === 404 && (e.code === 'unknown_url' || e.code === 'error')) || e.status === 405)) return null;
    throw e;
  }
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

export const enc = encodeURIComponent;
