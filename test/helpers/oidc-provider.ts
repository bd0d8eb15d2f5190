// A small OpenID provider for the console's SSO tests, faithful to what the console relies on:
// the discovery document, a JWKS (RS256), /authorize (response_type=code; the registered
// redirect_uri only; PKCE S256 required; state and nonce passed through) and /token (the
// client's secret, the code once, the same redirect_uri, the PKCE verifier checked against the
// challenge) answering an RS256 ID token with iss, aud, sub, nonce, iat, exp and the claims of
// the user the test signs in next (`provider.user = {...}`), issued `provider.iatOffsetS` seconds
// from now (0; a test of the gateway's clock check moves it). No login form: /authorize signs
// that user in at once. `refusals` lists why any request was refused, so a test can see the
// checks ran.

import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { asyncHandler } from './async-handler.js';

export interface TestProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** The claims of the next user to sign in (sub is required). */
  user: Record<string, unknown>;
  /** Seconds added to the ID token's iat (and exp): a provider whose clock runs ahead. */
  iatOffsetS: number;
  /** Why requests were refused, in order. */
  refusals: string[];
  /** Codes issued and redeemed. */
  redeemed: number;
  close(): Promise<void>;
}

interface Grant { clientId: string; redirectUri: string; challenge: string; nonce: string | null; user: Record<string, unknown>; used: boolean }

export async function startProvider(redirectUri: string, opts: { clientId?: string; clientSecret?: string } = {}): Promise<TestProvider> {
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  const kid = randomBytes(8).toString('hex');
  const jwk = { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' };
  const grants = new Map<string, Grant>();
  const clientId = opts.clientId ?? 'tollgate-console';
  const clientSecret = opts.clientSecret ?? 'op-client-secret';
  let issuer = '';
  const provider: TestProvider = {
    issuer: '', clientId, clientSecret, user: { sub: 'nobody' }, iatOffsetS: 0, refusals: [], redeemed: 0,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
  const json = (res: import('node:http').ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
    res.end(JSON.stringify(body));
  };
  const refuse = (res: import('node:http').ServerResponse, why: string, error = 'invalid_request') => {
    provider.refusals.push(why);
    json(res, 400, { error, error_description: why });
  };
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', issuer);
    if (req.method === 'GET' && url.pathname === '/.well-known/openid-configuration') {
      return json(res, 200, {
        issuer, authorization_endpoint: `${issuer}/authorize`, token_endpoint: `${issuer}/token`, jwks_uri: `${issuer}/jwks`,
        response_types_supported: ['code'], subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['RS256'],
        code_challenge_methods_supported: ['S256'], token_endpoint_auth_methods_supported: ['client_secret_post', 'client_secret_basic'],
        scopes_supported: ['openid', 'profile', 'email'], grant_types_supported: ['authorization_code'],
      });
    }
    if (req.method === 'GET' && url.pathname === '/jwks') return json(res, 200, { keys: [jwk] });
    if (req.method === 'GET' && url.pathname === '/authorize') {
      const q = url.searchParams;
      if (q.get('response_type') !== 'code') return refuse(res, 'response_type must be code', 'unsupported_response_type');
      if (q.get('client_id') !== clientId) return refuse(res, 'unknown client_id', 'unauthorized_client');
      if (q.get('redirect_uri') !== redirectUri) return refuse(res, 'redirect_uri is not the registered one');
      if (!(q.get('scope') ?? '').split(' ').includes('openid')) return refuse(res, 'scope must include openid', 'invalid_scope');
      if (q.get('code_challenge_method') !== 'S256' || !q.get('code_challenge')) return refuse(res, 'PKCE S256 is required');
      const code = randomBytes(24).toString('base64url');
      grants.set(code, { clientId, redirectUri, challenge: q.get('code_challenge')!, nonce: q.get('nonce'), user: { ...provider.user }, used: false });
      const back = new URL(redirectUri);
      back.searchParams.set('code', code);
      if (q.get('state') !== null) back.searchParams.set('state', q.get('state')!);
      res.writeHead(302, { location: back.href });
      return res.end();
    }
    if (req.method === 'POST' && url.pathname === '/token') {
      let raw = '';
      req.setEncoding('utf8');
      req.on('data', (d) => { raw += d; });
      req.on('end', asyncHandler(async () => {
        const f = new URLSearchParams(raw);
        let id = f.get('client_id');
        let secret = f.get('client_secret');
        const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? '');
        if (basic !== null) {
          const [u, p] = Buffer.from(basic[1]!, 'base64').toString().split(':').map((s) => decodeURIComponent(s));
          id = u ?? null;
          secret = p ?? null;
        }
        if (id !== clientId || secret !== clientSecret) return refuse(res, 'client authentication failed', 'invalid_client');
        if (f.get('grant_type') !== 'authorization_code') return refuse(res, 'grant_type must be authorization_code', 'unsupported_grant_type');
        const grant = grants.get(f.get('code') ?? '');
        if (grant === undefined || grant.used) return refuse(res, 'unknown or used code', 'invalid_grant');
        grant.used = true;
        if (f.get('redirect_uri') !== grant.redirectUri) return refuse(res, 'redirect_uri differs from the authorization request', 'invalid_grant');
        const verifier = f.get('code_verifier') ?? '';
        if (createHash('sha256').update(verifier).digest('base64url') !== grant.challenge) return refuse(res, 'PKCE verifier does not match the challenge', 'invalid_grant');
        provider.redeemed++;
        const now = Math.floor(Date.now() / 1000) + provider.iatOffsetS;
        const idToken = await new SignJWT({ ...grant.user, ...(grant.nonce === null ? {} : { nonce: grant.nonce }) })
          .setProtectedHeader({ alg: 'RS256', kid, typ: 'JWT' })
          .setIssuer(issuer).setAudience(clientId).setSubject(String(grant.user.sub)).setIssuedAt(now).setExpirationTime(now + 300)
          .sign(privateKey);
        json(res, 200, { access_token: randomBytes(16).toString('hex'), token_type: 'Bearer', expires_in: 300, id_token: idToken, scope: 'openid profile email' });
      }));
      return;
    }
    json(res, 404, { error: 'not_found' });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  provider.issuer = issuer;
  return provider;
}
