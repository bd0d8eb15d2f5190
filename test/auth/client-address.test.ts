// server.trust_proxy (CONTRACT section 8, changed 2026-11-27): which address a key's
// allowed_ips are matched against. A client writes the left of X-Forwarded-For itself; each
// trusted proxy appends on the right. So `true` reads the rightmost entry, N the N-th from the
// right, a CIDR list the rightmost entry outside it (when the socket peer is inside it), and an
// entry that must be read but is no address gives none. Before this change `true` read the
// leftmost entry: `10.1.1.1, <real>` passed a 10.0.0.0/8 allowlist.
//
// Over real sockets: a node:http server reads each request with addressReader, so several
// X-Forwarded-For header lines reach it as node:http joins them. A table of every form, then
// a property over random header lists (spoofed left entries, garbage, IPv6, IPv4-mapped IPv6,
// whitespace, several headers): a spoofed entry never decides the address once a trusted proxy
// appended the real one.

import t from 'tap';
import fc from 'fast-check';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { addressReader, forwardedAddress, type TrustProxy } from '../../lib/auth/client-address.js';
import { rawRequest } from '../helpers/raw-request.js';

let server: Server;
let port: number;
/** The trust setting the server reads the next request with. */
let trust: TrustProxy = false;

t.before(async () => {
  server = createServer((req, res) => {
    const addr = addressReader(trust)(req);
    res.writeHead(200, { 'content-type': 'application/json', connection: 'close' });
    res.end(JSON.stringify({ addr: addr ?? null }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
t.teardown(() => new Promise<void>((r) => server.close(() => r())));

/** The address the server reads under `setting` for a request with these X-Forwarded-For lines. */
async function read(setting: TrustProxy, xff: string[]): Promise<string | null> {
  trust = setting;
  const { responses } = await rawRequest(`http://127.0.0.1:${port}`, {
    method: 'GET', path: '/', headers: [['connection', 'close'], ...xff.map((v): [string, string] => ['X-Forwarded-For', v])], body: Buffer.alloc(0),
  });
  if (responses.length !== 1 || responses[0]!.status !== 200) throw new Error(`unexpected answer: ${JSON.stringify(responses)}`);
  return JSON.parse(responses[0]!.body).addr;
}

const PEER = '127.0.0.1';

t.test('every form, in a table', async (t) => {
  const cases: Array<[string, TrustProxy, string[], string | null]> = [
    // false / 0: the socket, whatever the header says.
    ['false ignores the header', false, ['203.0.113.9'], PEER],
    ['0 ignores the header', 0, ['203.0.113.9, 198.51.100.1'], PEER],
    ['false with garbage', false, ['garbage'], PEER],
    // true: one hop, the rightmost entry.
    ['true, no header: the socket', true, [], PEER],
    ['true: the rightmost entry', true, ['203.0.113.9'], '203.0.113.9'],
    ['true: a spoofed left entry is not read (the issue)', true, ['10.1.1.1, 203.0.113.9'], '203.0.113.9'],
    ['true: spaces and tabs', true, [' 10.1.1.1 ,\t203.0.113.9\t'], '203.0.113.9'],
    ['true: several headers are one list, in order', true, ['10.1.1.1', '203.0.113.9'], '203.0.113.9'],
    ['true: an empty element is ignored', true, ['203.0.113.9, '], '203.0.113.9'],
    ['true: an empty header line is ignored', true, ['203.0.113.9', ''], '203.0.113.9'],
    ['true: IPv4 with a port', true, ['203.0.113.9:4711'], '203.0.113.9'],
    ['true: IPv6', true, ['10.1.1.1, 2001:db8::5'], '2001:db8::5'],
    ['true: bracketed IPv6 with a port', true, ['[2001:db8::7]:443'], '2001:db8::7'],
    ['true: bracketed IPv6', true, ['[2001:db8::7]'], '2001:db8::7'],
    ['true: IPv4-mapped IPv6', true, ['::ffff:203.0.113.9'], '::ffff:203.0.113.9'],
    ['true: the rightmost is garbage: no address', true, ['203.0.113.9, garbage'], null],
    ['true: "unknown" is no address', true, ['unknown'], null],
    ['true: garbage on the left is never read', true, ['garbage, ::1, 203.0.113.9'], '203.0.113.9'],
    ['true: a bracketed IPv4 is no address', true, ['[203.0.113.9]'], null],
    ['true: leading zeros are no address', true, ['203.0.113.09'], null],
    // N: the N-th entry from the right.
    ['2: the second from the right', 2, ['10.1.1.1, 203.0.113.9, 10.0.0.2'], '203.0.113.9'],
    ['2: across headers', 2, ['10.1.1.1, 203.0.113.9', '10.0.0.2'], '203.0.113.9'],
    ['3: the third from the right', 3, ['6.6.6.6, 203.0.113.9, 10.0.0.2, 10.0.0.3'], '203.0.113.9'],
    ['3: fewer entries than hops: the leftmost', 3, ['203.0.113.9, 10.0.0.2'], '203.0.113.9'],
    ['2: the entry to read is garbage', 2, ['10.1.1.1, nonsense, 10.0.0.2'], null],
    ['2: garbage to its left is not read', 2, ['nonsense, 203.0.113.9, 10.0.0.2'], '203.0.113.9'],
    ['1 is true', 1, ['10.1.1.1, 203.0.113.9'], '203.0.113.9'],
    // CIDRs: the socket peer and entries inside them are proxies.
    ['CIDRs, peer untrusted: the socket', ['10.0.0.0/8'], ['203.0.113.9'], PEER],
    ['CIDRs, no header: the socket', ['127.0.0.0/8'], [], PEER],
    ['CIDRs: the rightmost entry outside them', ['127.0.0.0/8', '10.0.0.0/8'], ['6.6.6.6, 203.0.113.9, 10.0.0.2, 10.9.9.9'], '203.0.113.9'],
    ['CIDRs: a spoofed inside entry on the left is not read', ['127.0.0.0/8', '10.0.0.0/8'], ['10.1.1.1, 203.0.113.9'], '203.0.113.9'],
    ['CIDRs: all inside: the leftmost', ['127.0.0.0/8', '10.0.0.0/8'], ['10.1.1.1, 10.0.0.2'], '10.1.1.1'],
    ['CIDRs: IPv6 ranges', ['127.0.0.1/32', 'fd00::/8'], ['2001:db8::1, fd00::1, fd12::2'], '2001:db8::1'],
    ['CIDRs: IPv4-mapped entries match IPv4 ranges', ['127.0.0.0/8', '10.0.0.0/8'], ['203.0.113.9, ::ffff:10.0.0.2'], '203.0.113.9'],
    ['CIDRs: garbage while walking: no address', ['127.0.0.0/8', '10.0.0.0/8'], ['203.0.113.9, junk, 10.0.0.2'], null],
    ['CIDRs: garbage beyond the client is not read', ['127.0.0.0/8', '10.0.0.0/8'], ['junk, 203.0.113.9, 10.0.0.2'], '203.0.113.9'],
    ['CIDRs: single addresses', ['127.0.0.1', '10.0.0.2'], ['203.0.113.9, 10.0.0.2'], '203.0.113.9'],
    ['an empty list trusts nothing', [], ['203.0.113.9'], PEER],
  ];
  for (const [name, setting, xff, want] of cases) t.equal(await read(setting, xff), want, name);
});

t.test('forwardedAddress: the forms an entry takes', async (t) => {
  t.equal(forwardedAddress(' 192.0.2.1 '), '192.0.2.1');
  t.equal(forwardedAddress('192.0.2.1:80'), '192.0.2.1');
  t.equal(forwardedAddress('[::1]:80'), '::1');
  t.equal(forwardedAddress('::1'), '::1');
  t.equal(forwardedAddress('::1:80'), '::1:80', 'an unbracketed IPv6 keeps its last group (no port there)');
  t.equal(forwardedAddress('192.0.2.1:'), undefined);
  t.equal(forwardedAddress('192.0.2.1:123456'), undefined);
  t.equal(forwardedAddress('[::1'), undefined);
  t.equal(forwardedAddress(''), undefined);
  t.equal(forwardedAddress('_hidden'), undefined, 'an obfuscated identifier (RFC 7239) is no address');
});

// Arbitraries: addresses as written (a port, brackets, whitespace), and what a client may write.
const v4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((p) => p.join('.'));
const v6 = fc.ipV6();
const mapped = v4.map((a) => `::ffff:${a}`);
const anyAddr = fc.oneof(v4, v6, mapped);
const ws = fc.constantFrom('', ' ', '  ', '\t', ' \t');
/** An address and one way of writing it in the header. */
function written(addr: fc.Arbitrary<string>): fc.Arbitrary<{ addr: string; text: string }> {
  return fc.tuple(addr, fc.boolean(), fc.integer({ min: 1, max: 65535 }), ws, ws).map(([a, port, p, l, r]) => {
    const v6form = a.includes(':');
    const text = v6form ? (port ? `[${a}]:${p}` : a) : (port ? `${a}:${p}` : a);
    return { addr: a, text: `${l}${text}${r}` };
  });
}
/** Whatever a client writes on the left: addresses (any range), garbage, empty elements. */
const spoof = fc.oneof(
  anyAddr,
  fc.constantFrom('unknown', '_secret', '', ' ', 'localhost', '[::1', '1.2.3', '999.1.1.1', '10.0.0.0/8', ';', '"'),
  fc.string({ unit: fc.constantFrom(...'abcxyz0123456789.:[]_- \t'.split('')), maxLength: 20 }),
);
/** The list split into header lines at random points (some empty). */
function lines(entries: string[], cuts: number[]): string[] {
  if (entries.length === 0) return [];
  const at = [...new Set(cuts.map((c) => c % (entries.length + 1)))].sort((a, b) => a - b);
  const out: string[] = [];
  let from = 0;
  for (const c of [...at, entries.length]) {
    out.push(entries.slice(from, Math.max(from, c)).join(','));
    from = Math.max(from, c);
  }
  // A header line cannot be sent empty-ended by our raw client if it is only whitespace; keep it.
  return out;
}

t.test('property: a hop count reads the entry the trusted hops appended, whatever the client wrote', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.array(spoof, { maxLength: 5 }), written(anyAddr), fc.array(written(anyAddr), { maxLength: 3 }),
    fc.boolean(), fc.array(fc.nat(20), { maxLength: 3 }),
    async (spoofed, real, proxies, asTrue, cuts) => {
      // The first trusted proxy appended the real client; each further one, the proxy before it.
      const hops = proxies.length + 1;
      const entries = [...spoofed, real.text, ...proxies.map((p) => p.text)];
      const setting: TrustProxy = hops === 1 && asTrue ? true : hops;
      const got = await read(setting, lines(entries, cuts));
      if (got !== real.addr) throw new Error(`read ${got}, not ${real.addr}, from ${JSON.stringify(entries)} with ${setting}`);
    },
  ), { numRuns: 150 });
  t.pass('150 runs');
});

const TRUSTED = ['127.0.0.0/8', '10.0.0.0/8', 'fd00::/8'];
const insideV4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255)).map(([a, b, c]) => `10.${a}.${b}.${c}`);
const inside = fc.oneof(insideV4, insideV4.map((a) => `::ffff:${a}`), fc.tuple(fc.nat(0xff), fc.nat(0xffff)).map(([a, b]) => `fd${a.toString(16).padStart(2, '0')}::${b.toString(16)}`));
/** A public address: outside every trusted range. */
const outsideV4 = fc.tuple(fc.integer({ min: 11, max: 126 }), fc.nat(255), fc.nat(255), fc.nat(255)).map((p) => p.join('.'));
const outside = fc.oneof(outsideV4, outsideV4.map((a) => `::ffff:${a}`), fc.tuple(fc.integer({ min: 0x2001, max: 0x2fff }), fc.nat(0xffff)).map(([a, b]) => `${a.toString(16)}:db8::${b.toString(16)}`));

t.test('property: trusted CIDRs read the rightmost entry outside them, whatever the client wrote', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.array(spoof, { maxLength: 5 }), written(outside), fc.array(written(inside), { maxLength: 3 }), fc.array(fc.nat(20), { maxLength: 3 }),
    async (spoofed, real, proxies, cuts) => {
      const entries = [...spoofed, real.text, ...proxies.map((p) => p.text)];
      const got = await read(TRUSTED, lines(entries, cuts));
      if (got !== real.addr) throw new Error(`read ${got}, not ${real.addr}, from ${JSON.stringify(entries)}`);
    },
  ), { numRuns: 150 });
  t.pass('150 runs');
});

t.test('property: garbage where the address must be read gives none; the socket when the header is empty', async (t) => {
  const garbage = fc.constantFrom('unknown', '_secret', 'localhost', '[::1', '1.2.3', '999.1.1.1', 'x');
  await fc.assert(fc.asyncProperty(
    fc.array(spoof, { maxLength: 3 }), garbage, fc.array(written(inside), { maxLength: 3 }), fc.boolean(),
    async (spoofed, junk, proxies, cidrs) => {
      const entries = [...spoofed, junk, ...proxies.map((p) => p.text)];
      const got = await read(cidrs ? TRUSTED : proxies.length + 1, [entries.join(', ')]);
      if (got !== null) throw new Error(`read ${got} from ${JSON.stringify(entries)}`);
    },
  ), { numRuns: 100 });
  for (const setting of [true, 2, TRUSTED] as TrustProxy[]) t.equal(await read(setting, [' , ,']), PEER, `${JSON.stringify(setting)}: only empty elements`);
});
