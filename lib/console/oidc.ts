// "Sign in with SSO" (CONTRACT section 12): the OpenID Connect authorization code flow with
// PKCE (S256), state and nonce, through openid-client (discovery document, token request,
// the ID token's claims, state and nonce checks) and jose (the ID token's signature against
// the issuer's JWKS, its issuer, audience and expiry, checked again here so that the JWKS is
// always used, whatever the token endpoint's transport). An ID token issued more than
// IAT_SKEW_S in the future is refused (CONTRACT section 21): neither library checks that. The
// issuer is discovered at the first sign-in and kept; a failed discovery is tried again at the next.

// Both libraries are imported at the first SSO sign-in: a gateway without console.oidc never loads them.
import type * as Client from 'openid-client';
import type { JWTPayload, createRemoteJWKSet } from 'jose';
import type { Config } from '../config/types.js';
import type { Principal } from '../admin/permissions.js';

type Oidc = NonNullable<Config['console']['oidc']>;

/** The state of one sign-in, kept in a signed cookie between the redirect and the callback. */
export interface Flow { state: string; nonce: string; verifier: string; exp: number }

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);
/** How far in the future an ID token's iat may be (the two clocks' skew), in seconds. */
export const IAT_SKEW_S = 60;

interface Discovered {
  client: typeof Client;
  jose: typeof import('jose');
  config: Client.Configuration;
  jwks: ReturnType<typeof createRemoteJWKSet>;
}

export class OidcSignIn {
  readonly #oidc: Oidc;
  #discovered: Promise<Discovered> | undefined;

  constructor(oidc: Oidc) {
    this.#oidc = oidc;
  }

  /** The path the gateway serves the callback at (redirect_url's). */
  get callbackPath(): string {
    return new URL(this.#oidc.redirect_url).pathname;
  }

  #discover(): Promise<Discovered> {
    this.#discovered ??= (async () => {
      const [client, jose] = await Promise.all([import('openid-client'), import('jose')]);
      const issuer = new URL(this.#oidc.issuer);
      // Plain http only to a provider on this machine (a development or test provider).
      const insecure = issuer.protocol === 'http:' && LOOPBACK.has(issuer.hostname);
      const secret = this.#oidc.client_secret;
      const config = await client.discovery(
        issuer, this.#oidc.client_id, secret ?? undefined,
        secret === null ? client.None() : client.ClientSecretPost(secret),
        insecure ? { execute: [client.allowInsecureRequests], timeout: 10 } : { timeout: 10 },
      );
      const jwksUri = config.serverMetadata().jwks_uri;
      if (jwksUri === undefined) throw new Error('the issuer\'s discovery document names no jwks_uri');
      return { client, jose, config, jwks: jose.createRemoteJWKSet(new URL(jwksUri), { timeoutDuration: 10_000 }) };
    })();
    this.#discovered.catch(() => { this.#discovered = undefined; });
    return this.#discovered;
  }

  /** Where to send the browser, and the flow to keep for the callback. */
  async start(): Promise<{ url: string; flow: Flow }> {
    const { client, config } = await this.#discover();
    const verifier = client.randomPKCECodeVerifier();
    const flow: Flow = { state: client.randomState(), nonce: client.randomNonce(), verifier, exp: Date.now() + 600_000 };
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: this.#oidc.redirect_url,
      scope: 'openid profile email',
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state: flow.state,
      nonce: flow.nonce,
    });
    return { url: url.href, flow };
  }

  /**
   * The callback: exchanges the code (state, nonce and PKCE checked), verifies the ID token
   * against the JWKS, and maps its claims to a role. Throws on any failure; `refused` when the
   * user is valid but has no role and no account.
   */
  async finish(query: string, flow: Flow): Promise<Omit<Principal, 'sid'> | { refused: string }> {
    const { client, jose, config, jwks } = await this.#discover();
    const current = new URL(this.#oidc.redirect_url);
    current.search = query;
    const tokens = await client.authorizationCodeGrant(config, current, {
      pkceCodeVerifier: flow.verifier, expectedState: flow.state, expectedNonce: flow.nonce, idTokenExpected: true,
    });
    if (tokens.id_token === undefined) throw new Error('the token response has no id_token');
    const { payload } = await jose.jwtVerify(tokens.id_token, jwks, {
      issuer: config.serverMetadata().issuer, audience: this.#oidc.client_id,
    });
    if (payload.nonce !== flow.nonce) throw new Error('the ID token\'s nonce does not match');
    const now = Math.floor(Date.now() / 1000);
    if (typeof payload.iat !== 'number' || payload.iat > now + IAT_SKEW_S) {
      throw new Error(`the ID token's iat (${String(payload.iat)}) is more than ${IAT_SKEW_S} s ahead of this clock (${now}), or missing`);
    }
    return this.principalOf(payload);
  }

  /** The role the claims give: admin, viewer, member of an account, or refused. */
  principalOf(claims: JWTPayload): Omit<Principal, 'sid'> | { refused: string } {
    const o = this.#oidc;
    const raw = claims[o.roles_claim];
    const roles = typeof raw === 'string' ? raw.split(/[\s,]+/) : Array.isArray(raw) ? raw.filter((r): r is string => typeof r === 'string') : [];
    const who = [claims.email, claims.preferred_username, claims.sub].find((v): v is string => typeof v === 'string' && v !== '') ?? 'unknown';
    const actor = `sso:${who}`.slice(0, 256);
    if (roles.some((r) => o.admin_values.includes(r))) return { actor, role: 'admin', account: null };
    if (roles.some((r) => o.viewer_values.includes(r))) return { actor, role: 'viewer', account: null };
    const account = o.account_claim === null ? undefined : claims[o.account_claim];
    if (typeof account === 'string' && account !== '') return { actor, role: 'member', account };
    return { refused: `${actor} has neither the admin nor the viewer role and names no account` };
  }
}
