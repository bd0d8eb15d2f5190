// The standalone server: node:http around the gateway's handler, and a graceful drain.

import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { AddressInfo } from 'node:net';
import type { Gateway } from '../gateway.js';
import { GatewayError, envelope } from '../errors.js';
import { requestIdFor } from './request-id.js';

export interface RunningServer {
  server: Server;
  url: string;
  /** Stops accepting, lets requests in flight finish (up to `timeoutMs`), closes the gateway. */
  drain(timeoutMs: number): Promise<void>;
}

export async function listen(gateway: Gateway, host: string, port: number): Promise<RunningServer> {
  await gateway.ready;
  // headersTimeout bounds a client trickling its headers. No requestTimeout: it would cut a
  // large upload that is still making progress. Bodies are bounded by the handler itself, so
  // that an embedding host app gets the same: readBody answers 408 when a body stalls for
  // server.body_timeout_ms, and any answer given before the body arrived closes the connection.
  const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0, headersTimeout: 60_000 }, gateway.handler);
  server.on('clientError', answerClientError);
  // Upgraded (WebSocket) sockets leave the HTTP server's connection tracking, so
  // closeAllConnections() does not see them: the drain ends them itself.
  const tunnels = new Set<Duplex>();
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    tunnels.add(socket);
    socket.once('close', () => tunnels.delete(socket));
    gateway.upgrade(req, socket, head);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => { server.off('error', reject); resolve(); });
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
 * node:http's own answer to a request it cannot parse is a bare "400 Bad Request". When the
 * request being answered is one the gateway already took (its body ended before its
 * Content-Length, say), the client gets the envelope instead: 400 invalid_json, with that
 * request's id. Anything else keeps node's default (the bytes are not an HTTP request).
 */
function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  const res = (socket as Duplex & { _httpMessage?: { headersSent: boolean; req?: IncomingMessage } })._httpMessage;
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
