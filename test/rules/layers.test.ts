// The layering rule (test/rules/layers.ts, Tollgate #41): every import of lib/ goes down LAYERS,
// no units of lib import each other in a loop, beyond the allowlisted imports, each of which must
// still break the rule; and the rule itself catches each way to break it.

import t from 'tap';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { ALLOWED, APART, LAYERS, cycles, fileLoops, layerProblems, libGraph, resolveSpecifier, specifiers, unitOf, type Graph } from './layers.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

t.test('lib/ has no import up its layers and no loop of units, beyond the allowlist', async (t) => {
  const graph = await libGraph(root);
  t.ok(graph.files.length > 150, `${graph.files.length} .ts files under lib/`);
  const edges = new Set(graph.edges.map((e) => `${e.from} -> ${e.to}`));
  for (const [edge, kind] of [
    ['lib/server.ts -> lib/gateway.ts', 'a static import'],
    ['lib/index.ts -> lib/config/load.ts', 'an export ... from'],
    ['lib/console/index.ts -> lib/admin/api.ts', 'an import type'],
    ['lib/config/local.ts -> lib/tokens/count.ts', 'a dynamic import()'],
    ['lib/upstream/balance/fleet.ts -> lib/upstream/balance/scrape.ts', 'a typeof import() type'],
  ]) t.ok(edges.has(edge!), `${kind} is read: ${edge}`);
  const problems = layerProblems(graph);
  t.same(problems, [], `layering problems (see docs/contributing.md, "Layers"):\n${problems.join('\n')}`);
  const loops = fileLoops(graph);
  t.same(loops, [], `files that import each other in a loop (see docs/contributing.md, "Layers"):\n${loops.join('\n')}`);
});

t.test('planted: files that import each other in a loop fail, inside one folder too', async (t) => {
  t.same(fileLoops(graphOf(...clean)), [], 'no loop of files');
  t.same(fileLoops(graphOf(...clean, 'lib/console/permissions.ts -> lib/console/index.ts')), [
    'lib/console/index.ts -> lib/console/permissions.ts (file loop: console/index.ts, console/permissions.ts import each other)',
    'lib/console/permissions.ts -> lib/console/index.ts (file loop: console/index.ts, console/permissions.ts import each other)',
  ], 'two files of one folder');
  t.same(fileLoops(graphOf('lib/store/types.ts -> lib/auth/keys.ts', 'lib/auth/keys.ts -> lib/admin/api.ts', 'lib/admin/api.ts -> lib/store/types.ts')), [
    'lib/admin/api.ts -> lib/store/types.ts (file loop: admin/api.ts, auth/keys.ts, store/types.ts import each other)',
    'lib/auth/keys.ts -> lib/admin/api.ts (file loop: admin/api.ts, auth/keys.ts, store/types.ts import each other)',
    'lib/store/types.ts -> lib/auth/keys.ts (file loop: admin/api.ts, auth/keys.ts, store/types.ts import each other)',
  ], 'three files across units');
});

t.test('planted: a dialect importing a provider fails, though the layers allow it', async (t) => {
  const files = ['lib/errors.ts', 'lib/providers/types.ts', 'lib/dialects/chat/index.ts'];
  const down = { from: 'lib/providers/types.ts', to: 'lib/errors.ts' };
  const across = { from: 'lib/dialects/chat/index.ts', to: 'lib/providers/types.ts' };
  const layered = [['errors.ts'], ['providers/'], ['dialects/']];
  t.same(layerProblems({ files, edges: [down], problems: [] }, layered, {}), [], 'without it, the layers hold');
  t.same(layerProblems({ files, edges: [down, across], problems: [] }, layered, {}), [
    `${across.from} -> ${across.to} (apart: ${APART[0]![2]})`,
  ], 'with it, the import down the layers fails as apart');
});

t.test('the allowlist and the layers are well formed', async (t) => {
  for (const [edge, why] of Object.entries(ALLOWED)) {
    t.match(edge, /^lib\/\S+\.ts -> lib\/\S+\.ts$/, `${edge}: file -> file`);
    t.ok(why.length > 20 && !why.includes('\n'), `${edge}: a one-line reason`);
  }
  const units = LAYERS.flat();
  t.equal(new Set(units).size, units.length, 'each unit stands in one layer');
  t.same(LAYERS[0], ['errors.ts', 'lru.ts', 'objects.ts', 'slice.ts', 'strings.ts', 'types/', 'utc-day.ts'], 'the leaves are at the bottom');
  const at = (u: string) => LAYERS.findIndex((l) => l.includes(u));
  t.ok(at('admin/') < at('console/'), 'console stands above admin: admin must not import console');
  for (const [low, high] of [['store/', 'upstream/'], ['upstream/', 'providers/'], ['providers/', 'dialects/'], ['dialects/', 'pipeline/'],
    ['pipeline/', 'routes/'], ['routes/', 'gateway.ts'], ['gateway.ts', 'server.ts']]) {
    t.ok(at(low!) < at(high!), `a request's calls go down: ${high} above ${low}`);
  }
});

t.test('docs/contributing.md shows LAYERS as they are, top first', async (t) => {
  const doc = await readFile(`${root}docs/contributing.md`, 'utf8');
  const rows = [...doc.matchAll(/^\| (\d+) \| ((?:`[^`]+`(?:, )?)+) \| [^|\n]+ \|$/gm)]
    .map((m) => ({ layer: Number(m[1]), units: [...m[2]!.matchAll(/`([^`]+)`/g)].map((u) => u[1]) }));
  t.same(rows, LAYERS.map((units, i) => ({ layer: i + 1, units: [...units] })).reverse());
});

t.test('imports are read by the parser, not from text', async (t) => {
  const text = [
    "import a from './a.js';",
    "import type { B } from '../b.js';",
    "import './side.js';",
    "export * from './c.js';",
    "export { d } from './d.js';",
    "type E = typeof import('./e.js');",
    "const f = await import('./f.js');",
    'const g = await import(`./g.js`);',
    "// import h from './h.js';",
    "const s = \"import i from './i.js'\";",
    "const u = `export * from './j.js'`;",
    'const name = "./k.js";',
    'await import(name);',
  ].join('\n');
  t.same(specifiers('lib/x/y.ts', text), { specs: ['./a.js', '../b.js', './side.js', './c.js', './d.js', './e.js', './f.js', './g.js'], opaque: [13] });
});

t.test('specifiers resolve to lib files as NodeNext does', async (t) => {
  const files = new Set(['lib/errors.ts', 'lib/store/index.ts', 'lib/store/types.ts']);
  t.equal(resolveSpecifier('lib/auth/jwt.ts', '../errors.js', files), 'lib/errors.ts');
  t.equal(resolveSpecifier('lib/store/memory/store.ts', '../types.js', files), 'lib/store/types.ts');
  t.equal(resolveSpecifier('lib/gateway.ts', './store/index.js', files), 'lib/store/index.ts');
  t.equal(resolveSpecifier('lib/gateway.ts', 'undici', files), null, 'a package is not lib');
  t.equal(resolveSpecifier('lib/cli/index.ts', '../../package.json', files), null, 'a file outside lib is not lib');
  t.equal(resolveSpecifier('lib/gateway.ts', './nothing.js', files), undefined, 'a missing lib file is unresolved');
  t.equal(unitOf('lib/store/memory/store.ts'), 'store/');
  t.equal(unitOf('lib/errors.ts'), 'errors.ts');
});

t.test('loops of units are found (Tarjan)', async (t) => {
  const g = new Map([['a', new Set(['b'])], ['b', new Set(['c'])], ['c', new Set(['a', 'd'])], ['d', new Set(['e'])], ['e', new Set(['d'])], ['f', new Set(['a'])]]);
  t.same(cycles(g), [['a', 'b', 'c'], ['d', 'e']]);
  t.same(cycles(new Map([['a', new Set(['b'])], ['b', new Set<string>()]])), [], 'a chain is no loop');
});

// A small lib of three layers: base (errors.ts), middle (store/, auth/ as peers), top (admin/, then console/).
const layers = [['errors.ts'], ['store/', 'auth/'], ['admin/'], ['console/']];
const files = ['lib/errors.ts', 'lib/store/types.ts', 'lib/auth/keys.ts', 'lib/admin/api.ts', 'lib/console/permissions.ts', 'lib/console/index.ts'];
const graphOf = (...edges: string[]): Graph => ({
  files,
  edges: edges.map((e) => {
    const [from, to] = e.split(' -> ') as [string, string];
    return { from, to };
  }),
  problems: [],
});
const clean = ['lib/store/types.ts -> lib/errors.ts', 'lib/auth/keys.ts -> lib/store/types.ts', 'lib/admin/api.ts -> lib/auth/keys.ts',
  'lib/console/index.ts -> lib/admin/api.ts', 'lib/console/index.ts -> lib/console/permissions.ts'];

t.test('planted violations: the rule fires for each', async (t) => {
  t.same(layerProblems(graphOf(...clean), layers, {}), [], 'imports down, to a peer, and inside a unit pass');

  t.same(layerProblems(graphOf(...clean, 'lib/admin/api.ts -> lib/console/permissions.ts'), layers, {}), [
    'lib/admin/api.ts -> lib/console/permissions.ts (up: admin/ (layer 3) imports console/ (layer 4), closing a loop)',
  ], 'an import up fails (admin imports console), named with the loop it closes');
  t.same(layerProblems(graphOf('lib/admin/api.ts -> lib/console/permissions.ts'), layers, {}), [
    'lib/admin/api.ts -> lib/console/permissions.ts (up: admin/ (layer 3) imports console/ (layer 4))',
  ], 'an import up fails without a loop too');

  t.same(layerProblems(graphOf(...clean, 'lib/errors.ts -> lib/auth/keys.ts'), layers, {}), [
    'lib/errors.ts -> lib/auth/keys.ts (up: errors.ts (layer 1) imports auth/ (layer 2), closing a loop)',
  ], 'an import up from the bottom fails, and only it is named on the loop it closes');

  t.same(layerProblems(graphOf(...clean, 'lib/store/types.ts -> lib/auth/keys.ts'), layers, {}), [
    'lib/auth/keys.ts -> lib/store/types.ts (cycle: auth/, store/ import each other)',
    'lib/store/types.ts -> lib/auth/keys.ts (cycle: auth/, store/ import each other)',
  ], 'a new loop between peers of one layer fails, naming the imports between the peers');
  t.same(layerProblems(graphOf(...clean, 'lib/errors.ts -> lib/store/types.ts'), [['errors.ts', 'store/', 'auth/'], ['admin/'], ['console/']], {}), [
    'lib/errors.ts -> lib/store/types.ts (cycle: errors.ts, store/ import each other)',
    'lib/store/types.ts -> lib/errors.ts (cycle: errors.ts, store/ import each other)',
  ], 'a loop of two units of one layer fails, while the peer import beside it passes');
  t.same(layerProblems(graphOf('lib/store/types.ts -> lib/auth/keys.ts'), layers, {}), [], 'a peer import without a loop passes');

  const allow = { 'lib/admin/api.ts -> lib/console/permissions.ts': 'the role table serves /admin too' };
  t.same(layerProblems(graphOf(...clean, 'lib/admin/api.ts -> lib/console/permissions.ts'), layers, allow), [], 'an allowlisted import passes');
  t.same(layerProblems(graphOf(...clean), layers, allow), [
    'lib/admin/api.ts -> lib/console/permissions.ts (stale allowlist entry: the import is gone; remove it from ALLOWED in test/rules/layers.ts)',
  ], 'a stale allowlist entry fails once its import is gone');
  const withoutConsoleToAdmin = clean.filter((e) => e !== 'lib/console/index.ts -> lib/admin/api.ts');
  t.same(layerProblems(graphOf(...withoutConsoleToAdmin, 'lib/admin/api.ts -> lib/console/permissions.ts'), [['errors.ts'], ['store/', 'auth/'], ['console/'], ['admin/']], allow), [
    'lib/admin/api.ts -> lib/console/permissions.ts (stale allowlist entry: it no longer goes up or closes a loop; remove it from ALLOWED in test/rules/layers.ts)',
  ], 'an allowlisted import that no longer breaks the rule (the layers changed) fails');
  t.same(layerProblems(graphOf(...clean, 'lib/admin/api.ts -> lib/console/permissions.ts'), [['errors.ts'], ['store/', 'auth/'], ['console/'], ['admin/']], allow), [
    'lib/console/index.ts -> lib/admin/api.ts (up: console/ (layer 3) imports admin/ (layer 4))',
  ], 'an allowlisted import that still closes a loop is no stale entry, and the import up beside it fails');
  const peers = { 'lib/store/types.ts -> lib/auth/keys.ts': 'closes a loop' };
  t.same(layerProblems(graphOf(...clean, 'lib/store/types.ts -> lib/auth/keys.ts'), layers, peers), [], 'an allowlisted import that closes a loop passes');
  t.same(layerProblems(graphOf('lib/store/types.ts -> lib/auth/keys.ts'), layers, peers), [
    'lib/store/types.ts -> lib/auth/keys.ts (stale allowlist entry: it no longer goes up or closes a loop; remove it from ALLOWED in test/rules/layers.ts)',
  ], 'once the loop is gone, its allowlisted peer import is stale');
  t.same(layerProblems(graphOf(...clean), layers, { 'admin/api.ts -> console/permissions.ts': 'x' }), [
    'admin/api.ts -> console/permissions.ts (malformed allowlist entry: write it as lib/a.ts -> lib/b.ts)',
  ], 'a malformed allowlist entry fails');
});

t.test('planted: units LAYERS does not place, places twice or no longer has fail', async (t) => {
  const g = graphOf(...clean);
  t.same(layerProblems({ ...g, files: [...files, 'lib/billing/meter.ts'] }, layers, {}),
    ['lib/billing/ (unplaced: not in LAYERS in test/rules/layers.ts; add it to the layer of what it is for)'], 'a new folder must be placed');
  t.same(layerProblems(g, [...layers, ['routes/']], {}),
    ['lib/routes/ (stale layer entry: no such unit in lib; remove it from LAYERS)'], 'a unit that is gone leaves LAYERS');
  t.same(layerProblems(g, [...layers, ['auth/']], {}),
    ['lib/auth/ (misplaced: in layers 2 and 5 of LAYERS; keep one)'], 'a unit stands in one layer');
  t.same(layerProblems({ ...g, problems: ['lib/x.ts -> ./y.js (unresolved: names no file of lib)'] }, layers, {}),
    ['lib/x.ts -> ./y.js (unresolved: names no file of lib)'], 'what the reader could not follow fails');
});
