// The layering rule (docs/contributing.md, STYLE "Calls go down", Tollgate #41): lib/'s units (its
// folders and top-level files) stand in LAYERS, bottom first, and an import goes down: to a unit
// of a lower layer, or to a peer of its own layer as long as no loop of units forms. Two things
// fail: an import to a higher layer ("up") and a loop between units ("cycle"). ALLOWED names the
// exact imports that broke the rule when it came; each entry must still break it, so the list
// only shrinks. Imports are read by TypeScript's parser: static `import`/`export ... from`,
// `import('x')` with a literal, `import('x').T` types and `import x = require('x')`.

import ts from 'typescript';
import { readdir, readFile } from 'node:fs/promises';
import { join, posix, relative, sep } from 'node:path';

/**
 * lib/'s units, bottom layer first: a folder as `name/`, a top-level file as `name.ts`. A new
 * folder or top-level file must be placed here, in the layer of what it is for.
 */
export const LAYERS: ReadonlyArray<readonly string[]> = [
  // 1 base: small helpers and the one table of error codes; they import nothing of lib above them.
  ['errors.ts', 'lru.ts', 'objects.ts', 'slice.ts', 'strings.ts', 'types/', 'utc-day.ts'],
  // 2 what the config and a request are made of: the config, HTTP plumbing, the hub's form;
  //   token counting, over the hub's form, which the config's check loads tokenizers with.
  ['config/', 'http/', 'hub/', 'tokens/'],
  // 3 instruments every part uses: logs, metrics, traces.
  ['observe/'],
  // 4 the store: money, keys, usage, the alerts outbox.
  ['store/'],
  // 5 the way out to model servers: pools, balance, circuits, abort; event streams.
  ['upstream/', 'sse/'],
  // 6 the services of a call: who calls, what they may, what they pay, alerts; the translators
  //   to each upstream kind and the passthrough proxy.
  ['auth/', 'alerts/', 'limits/', 'billing/', 'providers/', 'passthrough.ts'],
  // 7 models and plans; the client APIs' codecs; the admin API.
  ['catalog/', 'dialects/', 'admin/'],
  // 8 the operator console, over the admin API (admin never imports it).
  ['console/'],
  // 9 everything built from one config.
  ['state.ts'],
  // 10 the one metered pipeline.
  ['pipeline/'],
  // 11 the /v1 route table and the routes that are not a dialect's generation; MCP's endpoints; files and batches.
  ['routes/', 'mcp/', 'batch/'],
  // 12 the config's lifecycle and the top-level dispatch.
  ['gateway.ts'],
  // 13 the standalone node:http server.
  ['server.ts'],
  // 14 the ways in: the `tollgate` command and the public API.
  ['cli/', 'index.ts'],
];

/**
 * Imports that broke the rule when it came, `from -> to`, with why and the way out. Remove an
 * entry once its import is gone; the test says when. Never add one: move the code instead.
 */
export const ALLOWED: Readonly<Record<string, string>> = {};

/**
 * Imports from one unit to another that fail even though the layers allow them, `[from, to,
 * why]`: the clients' dialects and the upstreams' translators meet only in the hub's forms
 * (hub/), so a change to either side's wire format cannot reach the other. (store/ never
 * importing auth/ needs no entry: auth/ stands above it.)
 */
export const APART: ReadonlyArray<readonly [string, string, string]> = [
  ['dialects/', 'providers/', "a client's dialect and an upstream's translator meet only in hub/ (the hub's forms)"],
];

/** An import of one lib file by another (paths like lib/x/y.ts). */
export interface Edge {
  from: string;
  to: string;
}

/** lib's .ts files and the imports between them; `problems`: imports the rule cannot follow. */
export interface Graph {
  files: string[];
  edges: Edge[];
  problems: string[];
}

/** The unit of a lib path: `lib/config/load.ts` -> `config/`, `lib/errors.ts` -> `errors.ts`. */
export function unitOf(path: string): string {
  const parts = path.split('/');
  return parts.length > 2 ? `${parts[1]}/` : parts[1]!;
}

/** The module specifiers a file imports, read by the parser; `opaque`: `import(expr)` calls it cannot name. */
export function specifiers(path: string, text: string): { specs: string[]; opaque: number[] } {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const specs: string[] = [];
  const opaque: number[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined && ts.isStringLiteral(node.moduleSpecifier)) {
      specs.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const arg = node.arguments[0];
      if (arg !== undefined && ts.isStringLiteralLike(arg)) specs.push(arg.text);
      else opaque.push(source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      specs.push(node.argument.literal.text);
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference) && ts.isStringLiteral(node.moduleReference.expression)) {
      specs.push(node.moduleReference.expression.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return { specs, opaque };
}

/**
 * The lib file a relative specifier names (`./x.js` is `x.ts`, as NodeNext resolves it), null
 * for a package or a file outside lib, undefined when it names no file of lib.
 */
export function resolveSpecifier(from: string, spec: string, files: ReadonlySet<string>): string | null | undefined {
  if (!spec.startsWith('./') && !spec.startsWith('../')) return null;
  const target = posix.normalize(posix.join(posix.dirname(from), spec));
  if (!target.startsWith('lib/')) return null;
  const candidates = [target, target.replace(/\.js$/, '.ts'), `${target}.ts`, `${target}/index.ts`];
  return candidates.find((c) => files.has(c));
}

/** Every .ts file under lib/ of the repository at `root` and the imports between them. */
export async function libGraph(root: string): Promise<Graph> {
  const entries = await readdir(join(root, 'lib'), { recursive: true, withFileTypes: true });
  const files = entries.filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => relative(root, join(e.parentPath, e.name)).split(sep).join('/')).sort();
  const known = new Set(files);
  const edges: Edge[] = [];
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const from of files) {
    const { specs, opaque } = specifiers(from, await readFile(join(root, from), 'utf8'));
    for (const line of opaque) problems.push(`${from}:${line} (unread: import() of an expression; name the module with a literal)`);
    for (const spec of specs) {
      const to = resolveSpecifier(from, spec, known);
      if (to === null) continue;
      if (to === undefined) {
        problems.push(`${from} -> ${spec} (unresolved: names no file of lib)`);
        continue;
      }
      const key = `${from} -> ${to}`;
      if (!seen.has(key)) edges.push({ from, to });
      seen.add(key);
    }
  }
  return { files, edges, problems };
}

/** The strongly connected components of a graph of units with more than one unit (Tarjan). */
export function cycles(graph: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const connect = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1) out.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) connect(v);
  return out.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** Whether `to` can be reached from `from` over the graph's arrows. */
function reaches(graph: ReadonlyMap<string, ReadonlySet<string>>, from: string, to: string): boolean {
  const seen = new Set([from]);
  const todo = [from];
  while (todo.length > 0) {
    for (const w of graph.get(todo.pop()!) ?? []) {
      if (w === to) return true;
      if (seen.has(w)) continue;
      seen.add(w);
      todo.push(w);
    }
  }
  return false;
}

/**
 * What breaks the rule, one line each, as `from -> to (rule: why)`: an import up the layers, an
 * import on a loop of units, a unit LAYERS does not place (or places twice, or that is gone), an
 * ALLOWED entry whose import is gone or no longer breaks the rule, and the graph's own problems.
 */
export function layerProblems(
  graph: Graph, layers: ReadonlyArray<readonly string[]> = LAYERS, allowed: Readonly<Record<string, string>> = ALLOWED,
  apart: ReadonlyArray<readonly [string, string, string]> = APART,
): string[] {
  const problems = [...graph.problems];
  const layerOf = new Map<string, number>();
  layers.forEach((units, i) => {
    for (const u of units) {
      if (layerOf.has(u)) problems.push(`lib/${u} (misplaced: in layers ${layerOf.get(u)! + 1} and ${i + 1} of LAYERS; keep one)`);
      else layerOf.set(u, i);
    }
  });
  const units = new Set(graph.files.map(unitOf));
  for (const u of [...units].sort()) {
    if (!layerOf.has(u)) problems.push(`lib/${u} (unplaced: not in LAYERS in test/rules/layers.ts; add it to the layer of what it is for)`);
  }
  for (const u of [...layerOf.keys()].sort()) {
    if (!units.has(u)) problems.push(`lib/${u} (stale layer entry: no such unit in lib; remove it from LAYERS)`);
  }
  const layer = (u: string): string => `${u} (layer ${layerOf.get(u)! + 1})`;

  // Imports between two placed units. The allowlisted ones stay out of the loop search; a loop
  // with an import up is named by that import, so loops are sought among the rest: peers.
  const across = graph.edges.filter((e) => unitOf(e.from) !== unitOf(e.to) && layerOf.has(unitOf(e.from)) && layerOf.has(unitOf(e.to)));
  const present = new Set(graph.edges.map((e) => `${e.from} -> ${e.to}`));
  const isUp = (a: string, b: string): boolean => layerOf.get(b)! > layerOf.get(a)!;
  const unitGraph = new Map<string, Set<string>>();
  const peerGraph = new Map<string, Set<string>>();
  const add = (g: Map<string, Set<string>>, a: string, b: string): void => {
    const set = g.get(a) ?? new Set<string>();
    g.set(a, set.add(b));
  };
  for (const e of across) {
    if (`${e.from} -> ${e.to}` in allowed) continue;
    add(unitGraph, unitOf(e.from), unitOf(e.to));
    if (!isUp(unitOf(e.from), unitOf(e.to))) add(peerGraph, unitOf(e.from), unitOf(e.to));
  }
  const loopOf = new Map<string, string[]>();
  for (const loop of cycles(peerGraph)) for (const u of loop) loopOf.set(u, loop);

  const found: string[] = [];
  for (const e of across) {
    const key = `${e.from} -> ${e.to}`;
    if (key in allowed) continue;
    const [a, b] = [unitOf(e.from), unitOf(e.to)];
    const kept = apart.find(([x, y]) => x === a && y === b);
    if (kept !== undefined) {
      found.push(`${key} (apart: ${kept[2]})`);
    } else if (isUp(a, b)) {
      found.push(`${key} (up: ${layer(a)} imports ${layer(b)}${reaches(unitGraph, b, a) ? ', closing a loop' : ''})`);
    } else if (loopOf.get(a) !== undefined && loopOf.get(a) === loopOf.get(b)) {
      found.push(`${key} (cycle: ${loopOf.get(a)!.join(', ')} import each other)`);
    }
  }
  problems.push(...found.sort());

  for (const key of Object.keys(allowed).sort()) {
    const m = /^(lib\/\S+) -> (lib\/\S+)$/.exec(key);
    if (m === null) {
      problems.push(`${key} (malformed allowlist entry: write it as lib/a.ts -> lib/b.ts)`);
      continue;
    }
    const [a, b] = [unitOf(m[1]!), unitOf(m[2]!)];
    if (!present.has(key)) {
      problems.push(`${key} (stale allowlist entry: the import is gone; remove it from ALLOWED in test/rules/layers.ts)`);
    } else if (layerOf.has(a) && layerOf.has(b) && !isUp(a, b) && (a === b || !reaches(unitGraph, b, a))) {
      problems.push(`${key} (stale allowlist entry: it no longer goes up or closes a loop; remove it from ALLOWED in test/rules/layers.ts)`);
    }
  }
  return problems;
}

/**
 * Loops of files (Tollgate #41): files that import each other in a loop, inside one unit as across
 * units (an `import type` counts: the two files cannot be read apart either). One line per import
 * on a loop, as `from -> to (file loop: the files)`. No allowlist: a loop is broken by moving what
 * both need into a file of its own.
 */
export function fileLoops(graph: Graph): string[] {
  const arrows = new Map<string, Set<string>>();
  for (const e of graph.edges) {
    if (e.from === e.to) continue;
    let set = arrows.get(e.from);
    if (set === undefined) arrows.set(e.from, set = new Set());
    set.add(e.to);
  }
  const out: string[] = [];
  for (const loop of cycles(arrows)) {
    const members = new Set(loop);
    const names = loop.map((f) => f.slice('lib/'.length)).join(', ');
    for (const from of loop) {
      for (const to of [...(arrows.get(from) ?? [])].sort()) {
        if (members.has(to)) out.push(`${from} -> ${to} (file loop: ${names} import each other)`);
      }
    }
  }
  return out;
}
