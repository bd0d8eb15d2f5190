// The file-size rule (test/rules/file-size.ts, Tollgate #41): no file under lib/ over 450 lines
// but the allowlisted ones, which may not grow; and the rule itself catches each way to break it.

import t from 'tap';
import { fileURLToPath } from 'node:url';
import { MAX_LINES, OVERSIZED, lineCount, linesUnder, sizeProblems } from './file-size.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

t.test(`every file under lib/ is at most ${MAX_LINES} lines, or allowlisted and not grown`, async (t) => {
  const files = await linesUnder(root, 'lib');
  t.ok(files.has('lib/gateway.ts') && files.has('lib/console/ui/console.css'), 'the walk sees .ts, .js and .css files, nested ones too');
  t.ok(files.size > 150, `${files.size} files under lib/`);
  const problems = sizeProblems(files);
  t.same(problems, [], problems.join('\n'));
});

t.test('lines are counted as wc -l counts them', async (t) => {
  t.equal(lineCount(''), 0);
  t.equal(lineCount('a\n'), 1);
  t.equal(lineCount('a\nb'), 2, 'a last line without its newline counts');
  t.equal(lineCount('a\n\nb\n'), 3);
});

t.test('planted violations: the rule fires for each', async (t) => {
  const allow = { 'lib/big.ts': 500 };
  t.same(sizeProblems(new Map([['lib/a.ts', 450], ['lib/big.ts', 500]]), allow), [], 'at the limit, and an allowlisted file at its count, pass');
  t.same(sizeProblems(new Map([['lib/a.ts', 451], ['lib/big.ts', 500]]), allow),
    ['lib/a.ts: 451 lines, over 450: split it by topic'], 'a new file over the limit fails');
  t.same(sizeProblems(new Map([['lib/big.ts', 501]]), allow),
    ['lib/big.ts: 501 lines, grew past its allowlisted 500: move code out rather than add'], 'an allowlisted file that grows fails');
  t.same(sizeProblems(new Map([['lib/big.ts', 480]]), allow), [], 'an allowlisted file may shrink');
  t.same(sizeProblems(new Map([['lib/big.ts', 450]]), allow),
    ['lib/big.ts: 450 lines, no longer over 450: remove it from OVERSIZED in test/rules/file-size.ts'], 'a split file leaves the list');
  t.same(sizeProblems(new Map(), allow), ['lib/big.ts: on OVERSIZED but gone: remove its entry'], 'a stale entry fails');
});

t.test('the allowlist holds only files over the limit', async (t) => {
  for (const [path, lines] of Object.entries(OVERSIZED)) t.ok(lines > MAX_LINES, `${path}: ${lines}`);
});
