// Who is calling, by address (CONTRACT section 8): what a key's allowed_ips are matched against.
// The socket's peer, or behind proxies the operator trusts (server.trust_proxy) the
// X-Forwarded-For entry that the nearest untrusted hop is known by. Each proxy appends the
// address it saw to the right of that header, and the client writes whatever it likes to the
// left of it; so the entry is read from the right, never the leftmost one a client can forge:
//   true      one hop: the rightmost entry (the one the proxy in front of us appended)
//   N         N hops: the N-th entry from the right (the leftmost when there are fewer)
//   [CIDRs]   a peer inside them is a proxy: the rightmost entry outside them (all inside: the
//             leftmost); a socket peer outside them is the client itself
//   false, 0  the socket's peer
// Several X-Forwarded-For headers are one list, in order (node:http joins them so); empty
// elements are ignored, as HTTP list syntax says. An entry that must be read and is not an
// address (`unknown`, garbage) gives no address at all: undefined, refused by allowed_ips.
// Compiled once per config; read only for keys that carry allowed_ips.

import { isIP } from 'node:net';
import type { IncomingMessage } from 'node:http';
import { cidrMatcher } from '../http/cidr.js';

/** server.trust_proxy: a boolean, a number of hops, or the CIDRs of trusted proxies. */
export type TrustProxy = boolean | number | readonly string[];

/** The client's address of a request; undefined when the entry that names it is no address. */
export type AddressOf = (req: IncomingMessage) => string | undefined;

/** "203.0.113.5", "203.0.113.5:8080", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:443" as its address. */
export function forwardedAddress(entry: string): string | undefined {
  let addr = entry.trim();
  if (addr.startsWith('[')) {
    const m = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(addr);
    if (m === null) return undefined;
    addr = m[1]!;
    return isIP(addr) === 6 ? addr : undefined;
  }
  const v4port = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(addr);
  if (v4port !== null) addr = v4port[1]!;
  return isIP(addr) === 0 ? undefined : addr;
}

/** The X-Forwarded-For entries, left to right, empty elements left out. */
function forwardedFor(req: IncomingMessage): string[] {
  const header = req.headers['x-forwarded-for'];
  if (header === undefined) return [];
  const entries: string[] = [];
  for (const raw of (Array.isArray(header) ? header.join(',') : header).split(',')) {
    if (raw.trim() !== '') entries.push(raw);
  }
  return entries;
}

/** A CIDR list as a test (IPv4-mapped IPv6 addresses match their IPv4 ranges). */
export const cidrTest = cidrMatcher;

/** How a request's client address is read under `trust` (server.trust_proxy). */
export function addressReader(trust: TrustProxy): AddressOf {
  if (trust === false || trust === 0) return (req) => req.socket.remoteAddress;
  if (typeof trust === 'boolean' || typeof trust === 'number') {
    const hops = trust === true ? 1 : trust;
    return (req) => {
      const entries = forwardedFor(req);
      if (entries.length === 0) return req.socket.remoteAddress;
      return forwardedAddress(entries[Math.max(0, entries.length - hops)]!);
    };
  }
  const trusted = cidrTest(trust);
  return (req) => {
    const peer = req.socket.remoteAddress;
    if (peer === undefined || !trusted(peer)) return peer;
    const entries = forwardedFor(req);
    let addr: string | undefined = peer;
    for (let i = entries.length - 1; i >= 0; i--) {
      addr = forwardedAddress(entries[i]!);
      if (addr === undefined || !trusted(addr)) return addr;
    }
    // Every hop is a trusted proxy: the leftmost is as near the client as anyone knows.
    return addr;
  };
}
