// A raw HTTP/1.1 client on a real socket, for what fetch and undici refuse to send: any header
// bytes Node accepts, duplicate headers, Content-Length that lies, a half-closed request.
// It reads until the server closes (requests carry `connection: close`) or `timeoutMs` passes.

import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface RawResult {
  responses: RawResponse[];
  /** The server kept the connection open past the timeout. */
  timedOut: boolean;
}

export interface RawRequest {
  method: string;
  path: string;
  /** Header lines as [name, value] pairs, written as latin1 bytes, in order. */
  headers: Array<[string, string]>;
  body: Buffer;
  /** Half-close the socket after writing (the request ends, whatever Content-Length said). */
  halfClose?: boolean;
  timeoutMs?: number;
}

export function rawRequest(url: string, req: RawRequest): Promise<RawResult> {
  const { hostname, port } = new URL(url);
  const head = `${req.method} ${req.path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\n${req.headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; socket.destroy(); }, req.timeoutMs ?? 5000);
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ responses: parseResponses(Buffer.concat(chunks)), timedOut });
    });
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), req.body]));
    if (req.halfClose === true) socket.end();
  });
}

/** Splits what the server sent into responses (Content-Length or chunked bodies). */
export function parseResponses(buf: Buffer): RawResponse[] {
  const out: RawResponse[] = [];
  let at = 0;
  while (at < buf.length) {
    const end = buf.indexOf('\r\n\r\n', at);
    if (end === -1) break;
    const lines = buf.subarray(at, end).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0]!)?.[1] ?? NaN);
    const headers: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const i = line.indexOf(':');
      const name = line.slice(0, i).toLowerCase();
      const value = line.slice(i + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    at = end + 4;
    let body: Buffer;
    if (headers['transfer-encoding'] === 'chunked') {
      const parts: Buffer[] = [];
      for (;;) {
        const eol = buf.indexOf('\r\n', at);
        if (eol === -1) { at = buf.length; break; }
        const size = parseInt(buf.subarray(at, eol).toString('latin1'), 16);
        at = eol + 2;
        if (!(size > 0)) { at += 2; break; }
        parts.push(buf.subarray(at, at + size));
        at += size + 2;
      }
      body = Buffer.concat(parts);
    } else {
      const length = headers['content-length'] === undefined ? buf.length - at : Number(headers['content-length']);
      body = buf.subarray(at, at + length);
      at += length;
    }
    out.push({ status, headers, body: body.toString('utf8') });
  }
  return out;
}
