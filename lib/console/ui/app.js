// The Tollgate operator console (CONTRACT section 12): Preact components in htm templates.
// Every value from the gateway is rendered as a text child or attribute (Preact escapes it);
// nothing here ever writes markup from data. Pages: Overview, Accounts, Keys, Usage, Upstreams,
// Config, Audit, one file each (./overview.js, ...); this file signs in and routes between
// them. The server decides what each role may do, the page only hides what it may not.

import { html, render } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, call, setCsrf } from './api.js';
import { Problem } from './common.js';
import { Overview } from './overview.js';
import { Accounts } from './accounts.js';
import { Keys } from './keys.js';
import { Usage } from './usage.js';
import { Upstreams } from './upstreams.js';
import { Config } from './config.js';
import { Audit } from './audit.js';

const PAGES = ['Overview', 'Accounts', 'Keys', 'Usage', 'Upstreams', 'Config', 'Audit'];
const MEMBER_PAGES = ['Overview', 'Keys', 'Usage'];

function useRoute() {
  const read = () => decodeURIComponent((location.hash.replace(/^#\/?/, '') || 'Overview').split('?')[0]);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

// ---- sign-in ---------------------------------------------------------------------------

function SignIn({ info, onSignedIn }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const sso = new URLSearchParams(location.search).get('sso');
  const ssoMessage = sso === 'refused' ? 'Your SSO account has no console role and names no account.'
    : sso === 'failed' ? 'SSO sign-in failed; try again.' : sso === 'unavailable' ? 'The SSO provider could not be reached.' : '';
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      const s = await call('POST', '/console/api/login', { token });
      setToken('');
      onSignedIn(s);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? 'Wrong admin token.' : err.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<main class="signin">
    <h1>Tollgate console</h1>
    ${ssoMessage && html`<p class="problem" role="alert">${ssoMessage}</p>`}
    ${info.token && html`<form onSubmit=${submit} aria-label="Token sign-in">
      <label for="admin-token">Admin token</label>
      <input id="admin-token" name="token" type="password" autocomplete="current-password" required value=${token} onInput=${(e) => setToken(e.currentTarget.value)} />
      ${error && html`<p class="problem" role="alert">${error}</p>`}
      <button type="submit" disabled=${busy}>Sign in</button>
    </form>`}
    ${info.sso && html`<div class="sso"><button type="button" onClick=${() => location.assign('/console/sso')}>Sign in with SSO</button></div>`}
  </main>`;
}

// ---- the shell -------------------------------------------------------------------------

function Shell({ session, onSignOut }) {
  const route = useRoute();
  const pages = session.role === 'member' ? MEMBER_PAGES : PAGES;
  const page = pages.includes(route) ? route : 'Overview';
  useEffect(() => { document.title = `${page} · Tollgate console`; }, [page]);
  const Page = { Overview, Accounts, Keys, Usage, Upstreams, Config, Audit }[page];
  return html`<div class="shell">
    <a class="skip" href="#main">Skip to content</a>
    <header class="top">
      <span class="brand">Tollgate</span>
      <nav aria-label="Console">
        <ul>${pages.map((p) => html`<li><a href=${`#/${p}`} aria-current=${p === page ? 'page' : undefined}>${p}</a></li>`)}</ul>
      </nav>
      <div class="who">
        <span class="actor" title=${session.actor}>${session.actor}</span>
        <span class="role">${session.role === 'member' ? `member of ${session.account}` : session.role}</span>
        <button type="button" class="link" onClick=${onSignOut}>Sign out</button>
      </div>
    </header>
    <main id="main" tabindex="-1"><h1>${page}</h1><${Page} session=${session} /></main>
  </div>`;
}

// ---- the app ---------------------------------------------------------------------------

function App() {
  const [info, setInfo] = useState(null);
  const [session, setSession] = useState(undefined);
  const [error, setError] = useState(null);
  useEffect(() => {
    void (async () => { // never rejects: every failure ends in setSession or setError
      try {
        setInfo(await call('GET', '/console/api/info'));
        const s = await call('GET', '/console/api/session');
        setCsrf(s.csrf);
        setSession(s);
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) setSession(null);
        else setError(err);
      }
    })();
  }, []);
  const signedIn = (s) => { setCsrf(s.csrf); setSession(s); if (location.search) history.replaceState(null, '', '/console/'); };
  const signOut = async () => {
    try { await call('POST', '/console/api/logout'); } catch { /* ended anyway below */ }
    setCsrf('');
    setSession(null);
  };
  if (error) return html`<main class="signin"><${Problem} error=${error} /></main>`;
  if (info === null || session === undefined) return html`<p class="muted">Loading the console…</p>`;
  if (session === null) return html`<${SignIn} info=${info} onSignedIn=${signedIn} />`;
  return html`<${Shell} session=${session} onSignOut=${signOut} />`;
}

render(html`<${App} />`, document.getElementById('app'));
