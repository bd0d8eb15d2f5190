// The README a newcomer can follow (issue #28 item 5): under 600 lines, a contents list at the
// top naming every ## section in order with anchors that resolve, a link to every page of docs/,
// each of those pages opening with a title and one paragraph saying what it covers, and every
// relative link of the README and docs/ pointing at a file that exists and, with a #fragment, at
// a heading of that file.

import t from 'tap';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DOCS = readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`);
const read = (page: string) => readFileSync(join(ROOT, page), 'utf8');

/** The page's text outside fenced blocks (a `#` comment in a shell block is no heading). */
function prose(markdown: string): string[] {
  const out: string[] = [];
  let fence: string | null = null;
  for (const line of markdown.split('\n')) {
    const m = /^(`{3,}|~{3,})/.exec(line);
    if (m !== null && (fence === null || line.trim() === fence[0]!.repeat(line.trim().length))) {
      fence = fence === null ? m[1]! : null;
      continue;
    }
    if (fence === null) out.push(line);
  }
  return out;
}

/** GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(markdown)) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h === null) continue;
    const text = h[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1');
    const base = text.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

t.test('anchors are made as GitHub makes them', async (t) => {
  t.strictSame([...anchors('# A\n## Quick start\n## Benchmark: `npm run bench:fleet`\n```sh\n# not a heading\n```\n## Quick start\n## Accounts, keys and credits\n')],
    ['a', 'quick-start', 'benchmark-npm-run-benchfleet', 'quick-start-1', 'accounts-keys-and-credits']);
});

t.test('the README is short and its contents list is complete', async (t) => {
  const readme = read('README.md');
  const lines = readme.split('\n');
  t.ok(lines.length < 600, `README.md has ${lines.length} lines (under 600)`);
  const sections = prose(readme).filter((l) => /^## /.test(l)).map((l) => l.slice(3).trim());
  const firstSection = lines.findIndex((l) => /^## /.test(l));
  const contents = lines.slice(0, firstSection).map((l) => /^- \[([^\]]+)\]\(#([^)]+)\)$/.exec(l)).filter((m) => m !== null);
  t.strictSame(contents.map((m) => m![1]), sections, 'the contents list names every ## section, in order, before the first one');
  const own = anchors(readme);
  for (const m of contents) t.ok(own.has(m![2]!), `#${m![2]} is a heading of README.md`);
});

t.test('the README links every page of docs/, and each opens with its title and what it covers', async (t) => {
  t.ok(DOCS.length >= 9, 'the reference pages are in docs/');
  const readme = read('README.md');
  for (const page of DOCS) {
    t.ok(readme.includes(`](${page})`), `README.md links ${page}`);
    const [title, blank, first] = read(page).split('\n');
    t.match(title, /^# \S/, `${page} starts with its title`);
    t.equal(blank, '', `${page}: a blank line after the title`);
    t.match(first, /^[A-Z][a-z]/, `${page}: then a paragraph`);
  }
});

t.test('every relative link resolves, fragments included', async (t) => {
  for (const page of ['README.md', ...DOCS]) {
    const text = prose(read(page)).join('\n').replace(/`[^`\n]*`/g, '');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [file, fragment] = target!.split('#') as [string, string | undefined];
      const resolved = file === '' ? page : normalize(join(dirname(page), file));
      t.ok(existsSync(join(ROOT, resolved)), `${page}: ${target} -> ${resolved} exists`);
      if (fragment !== undefined && resolved.endsWith('.md') && existsSync(join(ROOT, resolved))) {
        t.ok(anchors(read(resolved)).has(fragment), `${page}: #${fragment} is a heading of ${resolved}`);
      }
    }
  }
});

t.test('the README\'s "How it is built" map names every folder and file of lib/, and only those', async (t) => {
  const readme = read('README.md');
  const start = readme.indexOf('## How it is built');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  const named = new Set([...section.matchAll(/`(lib\/[^`]+|bin\/[^`]+)`/g)].map((m) => m[1]!.replace(/\/$/, '')));
  const lib = readdirSync(join(ROOT, 'lib'), { withFileTypes: true }).map((e) => `lib/${e.name}`);
  for (const entry of lib) t.ok(named.has(entry), `the map names ${entry}`);
  for (const path of named) t.ok(existsSync(join(ROOT, path)), `${path}, named in the map, exists`);
  // Every file the map names inside a folder, as `folder/` then `name.ts`, exists there too.
  for (const m of section.matchAll(/^\| `(lib\/[a-z-]+)\/` \| ([^\n]*)$/gm)) {
    for (const [, file] of m[2]!.matchAll(/`([a-z-]+\.ts)`/g)) {
      t.ok(existsSync(join(ROOT, m[1]!, file!)) || existsSync(join(ROOT, m[1]!, 'balance', file!)), `${m[1]}/${file} exists`);
    }
  }
});
