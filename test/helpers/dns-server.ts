// A tiny authoritative DNS server on a loopback UDP port, for replica discovery's tests
// (CONTRACT section 19, `discover.resolver`): it answers A and AAAA questions from a table the
// test changes as it runs, and can be told to answer SERVFAIL or to stop answering. It speaks
// just enough of RFC 1035 for node:dns (c-ares): one question per query, answers by pointer
// to the question's name, no EDNS (an OPT record in a query is ignored).

import { createSocket, type Socket } from 'node:dgram';
import { isIPv4, isIPv6 } from 'node:net';
import type { AddressInfo } from 'node:net';

const TYPE_A = 1;
const TYPE_AAAA = 28;
const RCODE_NXDOMAIN = 3;
const RCODE_SERVFAIL = 2;

export type DnsMode = 'answer' | 'servfail' | 'silent';

export interface FakeDns {
  /** host:port, as `discover.resolver` takes it. */
  resolver: string;
  /** Name (lower case, no trailing dot) -> its addresses (IPv4 and IPv6 mixed). Changed freely. */
  records: Map<string, string[]>;
  mode: DnsMode;
  /** Questions received, as "name type". */
  queries: string[];
  close(): Promise<void>;
}

/** The question's name (lower case), its type, and where the question section ends. */
function readQuestion(msg: Buffer): { name: string; type: number; end: number } | undefined {
  let at = 12;
  const labels: string[] = [];
  while (at < msg.length) {
    const len = msg[at]!;
    if (len === 0) { at++; break; }
    if (len > 63 || at + 1 + len > msg.length) return undefined;
    labels.push(msg.toString('latin1', at + 1, at + 1 + len));
    at += 1 + len;
  }
  if (at + 4 > msg.length) return undefined;
  return { name: labels.join('.').toLowerCase(), type: msg.readUInt16BE(at), end: at + 4 };
}

function addressBytes(address: string): Buffer {
  if (isIPv4(address)) return Buffer.from(address.split('.').map(Number));
  // IPv6: expand "::" and write 8 groups.
  const [head, tail] = address.includes('::') ? address.split('::') as [string, string] : [address, undefined];
  const h = head === '' ? [] : head.split(':');
  const tl = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? h : [...h, ...new Array(8 - h.length - tl.length).fill('0'), ...tl];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

/** The answer to `query`: its header and question echoed, then the records of the asked type. */
export function answer(query: Buffer, records: ReadonlyMap<string, readonly string[]>, mode: 'answer' | 'servfail'): Buffer | undefined {
  if (query.length < 12) return undefined;
  const q = readQuestion(query);
  if (q === undefined) return undefined;
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2);
  const rd = query[2]! & 0x01;
  const known = records.get(q.name.replace(/\.$/, ''));
  const rcode = mode === 'servfail' ? RCODE_SERVFAIL : known === undefined ? RCODE_NXDOMAIN : 0;
  const family = q.type === TYPE_A ? isIPv4 : q.type === TYPE_AAAA ? isIPv6 : () => false;
  const addresses = rcode === 0 ? (known ?? []).filter((a) => family(a)) : [];
  header[2] = 0x80 | 0x04 | rd; // QR, AA, RD copied
  header[3] = 0x80 | rcode; // RA
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(addresses.length, 6);
  const answers = addresses.map((a) => {
    const data = addressBytes(a);
    const rr = Buffer.alloc(12);
    rr.writeUInt16BE(0xc00c, 0); // the question's name
    rr.writeUInt16BE(q.type, 2);
    rr.writeUInt16BE(1, 4); // IN
    rr.writeUInt32BE(1, 6); // TTL 1 s
    rr.writeUInt16BE(data.length, 10);
    return Buffer.concat([rr, data]);
  });
  return Buffer.concat([header, query.subarray(12, q.end), ...answers]);
}

export async function startDns(records: Record<string, string[]> = {}): Promise<FakeDns> {
  const socket: Socket = createSocket('udp4');
  const fake: FakeDns = {
    resolver: '',
    records: new Map(Object.entries(records)),
    mode: 'answer',
    queries: [],
    close: () => new Promise<void>((r) => socket.close(() => r())),
  };
  socket.on('message', (msg, from) => {
    const q = readQuestion(msg);
    if (q !== undefined) fake.queries.push(`${q.name} ${q.type === TYPE_A ? 'A' : q.type === TYPE_AAAA ? 'AAAA' : q.type}`);
    if (fake.mode === 'silent') return;
    const out = answer(msg, fake.records, fake.mode);
    if (out !== undefined) socket.send(out, from.port, from.address);
  });
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
  fake.resolver = `127.0.0.1:${(socket.address() as AddressInfo).port}`;
  return fake;
}
