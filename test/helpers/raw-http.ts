// A raw HTTP/1.1 client over a TCP socket, for tests that need control no HTTP client gives:
// trickling or stalling a body byte by byte, and watching whether the server closes the
// connection.

import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';

export interface RawResponse {
  status: number;
  /** Header names in lower case. */
  headers: Record<string, string>;
  body: string;
  json: () => any;
}

export interface RawConnection {
  socket: Socket;
  /** Everything received so far. */
  received: () => string;
  /** True once the server closed the connection (or it broke). */
  closed: () => boolean;
  /** Writes unless the connection is gone; never throws. */
  write: (data: string) => void;
  /** Writes one byte every `everyMs` until stop() or the connection closes. */
  trickle: (everyMs: number, byte?: string) => { stop: () => void; sent: () => number };
  /** The next whole response (by content-length); rejects after `guardMs`. */
  response: (guardMs?: number) => Promise<RawResponse>;
  /** Resolves true when the server closed the connection within `guardMs`, else false. */
  waitClosed: (guardMs?: number) => Promise<boolean>;
  close: () => void;
}

/** Splits one response off the front of `text`, or undefined when it is not whole yet. */
function takeResponse(text: string): { res: RawResponse; rest: string } | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end === -1) return undefined;
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const l of lines) {
    const colon = l.indexOf(':');
    headers[l.slice(0, colon).trim().toLowerCase()] = l.slice(colon + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  // Test bodies are ASCII JSON, so characters are bytes.
  if (text.length < end + 4 + length) return undefined;
  const body = text.slice(end + 4, end + 4 + length);
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine!)![1]);
  return { res: { status, headers, body, json: () => JSON.parse(body) }, rest: text.slice(end + 4 + length) };
}

export async function rawConnect(url: string): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  await once(socket, 'connect');
  let text = '';
  let unread = '';
  let isClosed = false;
  const waiters: Array<() => void> = [];
  const wake = () => { for (const w of waiters.splice(0)) w(); };
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => { text += d; unread += d; wake(); });
  socket.on('error', () => {});
  socket.on('close', () => { isClosed = true; wake(); });
  const changed = (ms: number) => new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    waiters.push(() => { clearTimeout(timer); resolve(); });
  });

  const conn: RawConnection = {
    socket,
    received: () => text,
    closed: () => isClosed,
    write: (data) => { if (!isClosed && !socket.destroyed && socket.writable) socket.write(data); },
    trickle(everyMs, byte = ' ') {
      let sent = 0;
      let running = true;
      void (async () => {
        while (running && !isClosed) {
          conn.write(byte);
          sent++;
          await sleep(everyMs);
        }
      })();
      return { stop: () => { running = false; }, sent: () => sent };
    },
    async response(guardMs = 10_000) {
      const deadline = Date.now() + guardMs;
      for (;;) {
        const taken = takeResponse(unread);
        if (taken !== undefined) { unread = taken.rest; return taken.res; }
        if (isClosed) throw new Error(`connection closed before a whole response: ${JSON.stringify(unread.slice(0, 300))}`);
        if (Date.now() > deadline) throw new Error(`no whole response within ${guardMs} ms: ${JSON.stringify(unread.slice(0, 300))}`);
        await changed(Math.max(1, deadline - Date.now()));
      }
    },
    async waitClosed(guardMs = 10_000) {
      const deadline = Date.now() + guardMs;
      while (!isClosed && Date.now() < deadline) await changed(Math.max(1, deadline - Date.now()));
      return isClosed;
    },
    close: () => socket.destroy(),
  };
  return conn;
}
