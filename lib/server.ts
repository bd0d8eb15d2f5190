// The standalone server: node:http around the gateway's handler, a cap on open connections per
// client address, and a graceful drain.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { AddressInfo, Socket } from 'node:net';
import type { Gateway } from './gateway.js';
import { cidrTest, type TrustProxy } from './auth/client-address.js';
import { GatewayError, envelope, retryAfterHeaders } from './errors.js';
import { takeRequest } from './http/body.js';
import { requestIdFor } from './http/request-id.js';
import { sendError } from './http/respond.js';

export interface RunningServer {
  server: Server;
  url: string;
  /** Stops accepting, lets requests in flight finish (up to `timeoutMs`), closes the gateway. */
  drain(timeoutMs: number): Promise<void>;
}

/**
 * Connections the kernel may hold for us before they are accepted (it caps this at
 * net.core.somaxconn). Node's default, 511, overflows when thousands of clients connect at once
 * (a fleet of agents reconnecting): the kernel then drops their handshakes, and a client that
 * had already sent its request is reset. 9,488 streams opened together hit it (#46).
 */
export const LISTEN_BACKLOG = 4096;

export async function listen(gateway: Gateway, host: string, port: number): Promise<RunningServer> {
  await gateway.ready;
  // headersTimeout bounds a client trickling its headers. No requestTimeout: it would cut a
  // large upload that is still making progress. Bodies are bounded by the handler itself, so
  // that an embedding host app gets the same: readBody answers 408 when a body stalls for
  // server.body_timeout_ms, and any answer given before the body arrived closes the connection.
  const cap = new ConnectionCap(gateway);
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    if (cap.refused(req.socket)) refuseConnection(gateway, req, res);
    else gateway.handler(req, res);
  };
  const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0, headersTimeout: 60_000 }, handler);
  server.on('connection', cap.onConnection);
  server.on('clientError', answerClientError);
  // Upgraded (WebSocket) sockets leave the HTTP server's connection tracking, so
  // closeAllConnections() does not see them: the drain ends them itself.
  const tunnels = new Set<Duplex>();
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (cap.refused(req.socket)) {
      refuseUpgrade(gateway, req, socket);
      return;
    }
    tunnels.add(socket);
    socket.once('close', () => tunnels.delete(socket));
    gateway.upgrade(req, socket, head);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, backlog: LISTEN_BACKLOG }, () => { server.off('error', reject); resolve(); });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${shownHost}:${addr.port}`;

  const drain = async (timeoutMs: number): Promise<void> => {
    gateway.startDrain();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const idle = await gateway.waitIdle(timeoutMs);
    if (!idle) gateway.logger.warn({ inflight: gateway.inflight }, 'drain timeout passed; closing the remaining connections');
    server.closeAllConnections();
    for (const socket of tunnels) socket.destroy();
    await closed;
    await gateway.close();
  };
  return { server, url, drain };
}

/**
 * At most server.max_connections_per_ip open connections per client address (CONTRACT section
 * 16): the socket's address, counted as connections open and close. A connection beyond the
 * cap is let in, and its first request answered 429 too_many_connections with Retry-After,
 * then closed (after its body, as any early answer): a client reads why rather than meeting a
 * reset. Refused connections do not count. Peers inside a trust_proxy CIDR list are proxies
 * carrying many clients: they are not capped. The cap and the list are read from the config in
 * force when a connection opens (a reload applies to new connections).
 *
 * Only here: embedded, the host app owns the listener and its connections (a connection the
 * handler never sees a request of would not be counted), so the cap is the host's to set.
 */
class ConnectionCap {
  readonly #gateway: Gateway;
  readonly #open = new Map<string, number>();
  readonly #refused = new WeakSet<Socket>();
  /** The last CIDR list seen and its compiled test. */
  #trust: TrustProxy | undefined;
  #trusted: (ip: string) => boolean = () => false;

  constructor(gateway: Gateway) {
    this.#gateway = gateway;
  }

  onConnection = (socket: Socket): void => {
    const server = this.#gateway.config?.server;
    const addr = socket.remoteAddress;
    if (server === undefined || addr === undefined) return;
    const limit = server.max_connections_per_ip;
    if (limit === null || this.#isProxy(server.trust_proxy, addr)) return;
    const n = this.#open.get(addr) ?? 0;
    if (n >= limit) {
      this.#refused.add(socket);
      return;
    }
    this.#open.set(addr, n + 1);
    socket.once('close', () => {
      const left = (this.#open.get(addr) ?? 1) - 1;
      if (left > 0) this.#open.set(addr, left);
      else this.#open.delete(addr);
    });
  };

  refused(socket: Socket): boolean {
    return this.#refused.has(socket);
  }

  #isProxy(trust: TrustProxy, addr: string): boolean {
    if (!Array.isArray(trust)) return false;
    if (trust !== this.#trust) {
      this.#trust = trust;
      this.#trusted = cidrTest(trust as readonly string[]);
    }
    return this.#trusted(addr);
  }
}

function tooManyConnections(gateway: Gateway): GatewayError {
  const limit = gateway.config?.server.max_connections_per_ip;
  return new GatewayError('too_many_connections', `Too many open connections from this address (at most ${limit ?? 'a few'}); reuse an open one, or retry once one has closed.`, {
    headers: { ...retryAfterHeaders(1000), connection: 'close' },
  });
}

function refuseConnection(gateway: Gateway, req: IncomingMessage, res: ServerResponse): void {
  takeRequest(req, gateway.config?.server);
  gateway.metrics.countRequest('connection', 429, 'too_many_connections');
  sendError(res, tooManyConnections(gateway), requestIdFor(req.headers['x-request-id']));
}

/** The 429 for an upgrade request on a refused connection, as bytes (the socket has left node:http). */
function refuseUpgrade(gateway: Gateway, req: IncomingMessage, socket: Duplex): void {
  const id = requestIdFor(req.headers['x-request-id']);
  const err = tooManyConnections(gateway);
  const body = JSON.stringify(envelope(err, id));
  const headers = Object.entries(err.headers ?? {}).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  gateway.metrics.countRequest('connection', 429, 'too_many_connections');
  socket.end(`HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${id}\r\n${headers}\r\n${body}`);
}

/**
 * node:http's own answer to a request it cannot parse is a bare "400 Bad Request". When the
 * request being answered is one the gateway already took (its body ended before its
 * Content-Length, say), the client gets the envelope instead: 400 invalid_json, with that
 * request's id. Anything else keeps node's default (the bytes are not an HTTP request).
 */
function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  // undefined before the connection's first request; null once an answered one has let go of
  // it (keep-alive): then too the bytes belong to no request the gateway took.
  const res = (socket as Duplex & { _httpMessage?: { headersSent: boolean; req?: IncomingMessage } | null })._httpMessage ?? undefined;
  if (socket.writable && res !== undefined && !res.headersSent && res.req !== undefined) {
    const id = requestIdFor(res.req.headers['x-request-id']);
    const e = new GatewayError('invalid_json', 'The request body ended before its Content-Length: it is not a whole JSON document.');
    const body = JSON.stringify(envelope(e, id));
    socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${id}\r\nconnection: close\r\n\r\n${body}`);
    return;
  }
  if (socket.writable && res === undefined && err.code !== 'ECONNRESET') {
    socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    return;
  }
  socket.destroy();
}
