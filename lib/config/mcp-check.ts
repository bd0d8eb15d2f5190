// What `tollgate check` refuses in the MCP section (CONTRACT section 17) beyond the schema's
// shapes: a server name that cannot stand in `/mcp/<server>` or before the `__` of
// `<server>__<tool>`, a server named twice (names that differ only in case), a URL that is not
// http(s), and a plan's `mcp_tools` pattern that can match no tool of any configured server.
// Like cross-check.ts, it reads a possibly schema-invalid config and skips what has the wrong shape.

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const obj = (v: unknown): Obj => (isObj(v) ? v : {});
const q = (v: unknown): string => JSON.stringify(v);

/** The separator of `<server>__<tool>`. */
export const TOOL_SEPARATOR = '__';
/** A server name: a path segment of letters, digits, `.`, `-` and single `_` not at either end. */
const NAME = /^[A-Za-z0-9](?:[A-Za-z0-9.-]|_(?!_))*$/;
const MAX_NAME = 64;

/** The problem of one server name, or undefined. */
export function serverNameProblem(name: string): string | undefined {
  if (name.includes('/')) return 'a server name must not contain "/" (it is one path segment of /mcp/<server>)';
  if (name.includes(TOOL_SEPARATOR)) return 'a server name must not contain "__" (it separates server and tool in <server>__<tool>)';
  if (name.length > MAX_NAME || !NAME.test(name) || name.endsWith('_')) {
    return `a server name must be 1 to ${MAX_NAME} letters, digits, ".", "-" or "_", beginning with a letter or digit and not ending with "_"`;
  }
  return undefined;
}

/**
 * True when the glob `pattern` (`*` any run of characters) matches `<server>__<tool>` for some
 * non-empty tool of one of `servers`: its text before the first `*` must agree with
 * `<server>__` as far as both go (the rest is free: a `*` or the tool's own characters).
 */
export function patternCanMatch(pattern: string, servers: readonly string[]): boolean {
  const star = pattern.indexOf('*');
  const head = star === -1 ? pattern : pattern.slice(0, star);
  return servers.some((s) => {
    const prefix = s + TOOL_SEPARATOR;
    if (star === -1) return pattern.length > prefix.length && pattern.startsWith(prefix);
    return head.startsWith(prefix) || prefix.startsWith(head);
  });
}

/** Every problem of the MCP section and of the plans' `mcp_tools`, as `path: message`. */
export function mcpProblems(c: Obj): string[] {
  const problems: string[] = [];
  const servers = obj(obj(c.mcp).servers);
  const seen = new Map<string, string>();
  const names: string[] = [];
  for (const [name, raw] of Object.entries(servers)) {
    const at = `mcp.servers.${q(name).slice(1, -1) === name && /^[\w.-]+$/.test(name) ? name : q(name)}`;
    const why = serverNameProblem(name);
    if (why !== undefined) problems.push(`${at}: ${why}`);
    const folded = name.toLowerCase();
    const other = seen.get(folded);
    if (other !== undefined) problems.push(`${at}: the server ${q(other)} is named twice (names are compared without case)`);
    seen.set(folded, name);
    names.push(name);
    const url = obj(raw).url;
    if (typeof url === 'string') {
      let ok = false;
      try { ok = /^https?:$/.test(new URL(url).protocol); } catch { ok = false; }
      if (!ok) problems.push(`${at}.url: must be an http:// or https:// URL`);
    }
  }
  for (const [plan, raw] of Object.entries(obj(c.plans))) {
    const patterns = obj(raw).mcp_tools;
    if (!Array.isArray(patterns)) continue;
    patterns.forEach((p, i) => {
      if (typeof p === 'string' && p !== '' && !patternCanMatch(p, names)) {
        problems.push(`plans.${plan}.mcp_tools[${i}]: the pattern ${q(p)} can match no tool: patterns are <server>__<tool> over mcp.servers (${names.length === 0 ? 'none configured' : names.map((n) => q(n)).join(', ')})`);
      }
    });
  }
  return problems;
}
