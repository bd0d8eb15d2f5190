// Passthrough: paths outside /v1, /admin and the ops paths are reverse-proxied to the model
// server (http-proxy-3), WebSocket upgrades included, so its own endpoints stay reachable
// through the sidecar. With passthrough_auth the caller needs a Tollgate credential, which is
// not forwarded (the model server never sees Tollgate keys). The path it sends on is the one the
// dispatch decided on (http/path.ts: normalised in req.url, never one of the gateway's own, no
// encoded '/' or dot segment left for the proxy or the server to resolve differently), and never
// one that reaches the model server's generation endpoints (http/generation-paths.ts: 404).
// http-proxy-3 is loaded only when a config names a passthrough target: a gateway without one
// does not carry it (about 2 MB of heap).

import { Agent as HttpAgent, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { Duplex } from 'node:stream';
import type { ProxyServer } from 'http-proxy-3';
import { INFERENCE_HEADERS } from './config/types.js';
import { GatewayError } from './errors.js';
import { baseSegments, refuseGeneration } from './http/generation-paths.js';
import { sendError } from './http/respond.js';
import type { Logger } from './observe/log.js';

export class Passthrough {
  readonly #proxy: ProxyServer;
  readonly #agent: HttpAgent;
  readonly #stripAuth: boolean;
  readonly #logger: Logger;
  readonly #base: string[];

  /** Loads http-proxy-3 (once per process) and makes the proxy. */
  static async open(target: string, stripAuth: boolean, logger: Logger): Promise<Passthrough> {
    const { createProxyServer } = await import('http-proxy-3');
    const agent = target.startsWith('https:') ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
    return new Passthrough(createProxyServer({ target, agent, xfwd: true, changeOrigin: true, ws: true }), agent, stripAuth, logger, baseSegments(target));
  }

  private constructor(proxy: ProxyServer, agent: HttpAgent, stripAuth: boolean, logger: Logger, base: string[]) {
    this.#base = base;
    this.#proxy = proxy;
    this.#agent = agent;
    this.#stripAuth = stripAuth;
    this.#logger = logger;
  }

  /**
   * Throws 404 unknown_url for a path that would reach one of the model server's generation
   * endpoints (http/generation-paths.ts): those are metered routes, never passed through.
   */
  refuseGeneration(path: string, method: string | undefined): void {
    refuseGeneration(this.#base, path, method);
  }

  web(req: IncomingMessage, res: ServerResponse, requestId: string): void {
    if (this.#stripAuth) delete req.headers.authorization;
    dropConsoleCookies(req);
    dropInferenceHeaders(req);
    this.#proxy.web(req, res, {}, (err: Error) => {
      this.#logger.warn({ request_id: requestId, err: err.message, path: req.url }, 'passthrough upstream failed');
      sendError(res, new GatewayError('provider_error', 'The model server behind this gateway did not answer.'), requestId);
    });
  }

  ws(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.#stripAuth) delete req.headers.authorization;
    dropConsoleCookies(req);
    dropInferenceHeaders(req);
    this.#proxy.ws(req, socket, head, {}, (err: Error) => {
      this.#logger.warn({ err: err.message, path: req.url }, 'passthrough WebSocket failed');
      socket.destroy();
    });
  }

  close(): void {
    this.#proxy.close();
    this.#agent.destroy();
  }
}

/**
 * An inference gateway's scheduling headers are Tollgate's to set from what it verified
 * (CONTRACT section 19): a client's copies never reach the model server, whatever the path.
 * Node keeps header names lower-cased, so every spelling of them is caught here.
 */
function dropInferenceHeaders(req: IncomingMessage): void {
  for (const h of INFERENCE_HEADERS) delete req.headers[h];
}

/** The console's session cookies (Path=/) are the gateway's: never sent on to the model server. */
function dropConsoleCookies(req: IncomingMessage): void {
  const header = req.headers.cookie;
  if (header === undefined || !header.includes('tg_console')) return;
  const kept = header.split(';').filter((c) => !/^\s*tg_console(_flow)?=/.test(c)).join(';').trim();
  if (kept === '') delete req.headers.cookie;
  else req.headers.cookie = kept;
}
