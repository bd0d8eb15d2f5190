// An allowed_ips entry (CONTRACT section 9): a CIDR or one address, read the same way by the
// config check, the admin API, a key's narrowing and the client address's match.

import { BlockList, isIP } from 'node:net';

/** A CIDR (or a single address) as [address, prefix, family]; undefined when malformed. */
export function parseCidr(v: string): [string, number, 'ipv4' | 'ipv6'] | undefined {
  const slash = v.indexOf('/');
  const addr = slash === -1 ? v : v.slice(0, slash);
  const family = isIP(addr);
  if (family === 0) return undefined;
  const max = family === 4 ? 32 : 128;
  let prefix = max;
  if (slash !== -1) {
    const p = v.slice(slash + 1);
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > max) return undefined;
    prefix = Number(p);
  }
  return [addr, prefix, family === 4 ? 'ipv4' : 'ipv6'];
}

/**
 * A list of CIDRs (malformed entries skipped: the config check and the admin API refuse them
 * first) as a test of an address. An IPv4 client on a dual-stack socket shows as
 * ::ffff:a.b.c.d: its IPv4 ranges apply to it.
 */
export function cidrMatcher(cidrs: readonly string[]): (ip: string) => boolean {
  const list = new BlockList();
  for (const c of cidrs) {
    const parsed = parseCidr(c);
    if (parsed !== undefined) list.addSubnet(parsed[0], parsed[1], parsed[2]);
  }
  return (ip) => {
    const family = isIP(ip);
    if (family === 0) return false;
    if (family === 6) {
      const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
      if (mapped !== null && list.check(mapped[1]!, 'ipv4')) return true;
      return list.check(ip, 'ipv6');
    }
    return list.check(ip, 'ipv4');
  };
}
