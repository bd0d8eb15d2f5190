// An allowed_ips entry (CONTRACT section 9): a CIDR or one address, read the same way by the
// config check, the admin API, a key's narrowing and the client address's match.

import { isIP } from 'node:net';

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
