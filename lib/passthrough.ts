// Passthrough: paths outside /v1, /admin and the ops paths are reverse-proxied to the model
// server (http-proxy-3), WebSocket upgrades included, so its own endpoints stay reachable
// through the sidecar. With passthrough_auth the caller needs a Tollgate credential, which is
// not forwarded (the model server never sees Tollgate keys). http-proxy-3 is loaded only when a
// config names a passthrough target: a gateway without one does not carry it (about 2 MB of heap).

import { Agent as HttpAgent, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { Duplex } from 'node:stream';
import type { ProxyServer, createProxyServer } from 'http-proxy-3';
import { GatewayError } from './errors.js';
import { sendError } from './http/respond.js';
import type { Logger } from './observe/log.js';

let proxyModule: Promise<{ createProxyServer: typeof createProxyServer }> | undefined;

export class Passthrough {
  #proxy: ProxyServer | undefined;
  /** Settles once http-proxy-3 is loaded and the proxy made (GatewayState.start waits for it). */
  readonly loaded: Promise<void>;
  #closed = false;
  readonly #agent: HttpAgent;
  readonly #stripAuth: boolean;
  readonly #logger: Logger;

  constructor(target: string, stripAuth: boolean, logger: Logger) {
    const https = target.startsWith('https:');
    this.#agent = https ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
    proxyModule ??= import('http-proxy-3');
    this.loaded = proxyModule!.then(({ createProxyServer }) => {
      this.#proxy = createProxyServer({ target, agent: this.#agent, xfwd: true, changeOrigin: true, ws: true });
      if (this.#closed) this.#proxy.close();
    });
    this.loaded.catch(() => {}); // surfaced by GatewayState.start(), which fails with it
    this.#stripAuth = stripAuth;
    this.#logger = logger;
  }

  web(req: IncomingMessage, res: ServerResponse, requestId: string): void {
    if (this.#stripAuth) delete req.headers.authorization;
    this.#loadedProxy().web(req, res, {}, (err: Error) => {
      this.#logger.warn({ request_id: requestId, err: err.message, path: req.url }, 'passthrough upstream failed');
      sendError(res, new GatewayError('provider_error', 'The model server behind this gateway did not answer.'), requestId);
    });
  }

  ws(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.#stripAuth) delete req.headers.authorization;
    this.#loadedProxy().ws(req, socket, head, {}, (err: Error) => {
      this.#logger.warn({ err: err.message, path: req.url }, 'passthrough WebSocket failed');
      socket.destroy();
    });
  }

  /** The proxy; the gateway serves a state only once its start() has loaded it. */
  #loadedProxy(): ProxyServer {
    if (this.#proxy === undefined) throw new Error('passthrough used before GatewayState.start() loaded http-proxy-3');
    return this.#proxy;
  }

  close(): void {
    this.#closed = true;
    this.#proxy?.close();
    this.#agent.destroy();
  }
}
