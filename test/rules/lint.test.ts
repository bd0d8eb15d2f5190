// The lint rules (eslint.config.mjs, Tollgate #40): lib/ and bin/ have no floating or misused
// promise, no await of a non-promise, no unused name and no explicit `any`; test/ has none of the first four
// (tap's own t.test() promise aside); and each rule fires on a planted
// violation, so a config that stopped checking would fail here too. Type-aware linting of lib
// takes a while (about 20-60 s), hence the timeout.

import t from 'tap';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';

t.setTimeout(600_000);

const root = fileURLToPath(new URL('../..', import.meta.url));
const RULES = [
  '@typescript-eslint/no-floating-promises',
  '@typescript-eslint/no-misused-promises',
  '@typescript-eslint/await-thenable',
  '@typescript-eslint/no-unused-vars',
  '@typescript-eslint/no-explicit-any',
] as const;
// In a tsconfig project of its own (test/fixtures/lint/tsconfig.json): the type-aware parser
// lints only files on disk that a project includes; the planted text replaces the file's own.
const FIXTURE = `${root}test/fixtures/lint/planted.ts`;

const eslint = new ESLint({ cwd: root });

/** file:line:column rule message, one line a problem. */
function listed(results: ESLint.LintResult[]): string[] {
  return results.flatMap((r) => r.messages.map((m) => `${r.filePath.slice(root.length)}:${m.line ?? 0}:${m.column ?? 0} ${m.ruleId ?? '(parse)'} ${m.message}`));
}

t.test('the rules are errors for lib, the console page, bin and the fixture', async (t) => {
  for (const file of ['lib/gateway.ts', 'lib/console/ui/app.js', 'bin/tollgate.js', 'test/fixtures/lint/planted.ts']) {
    const config = (await eslint.calculateConfigForFile(`${root}${file}`)) as { rules?: Record<string, unknown> };
    for (const rule of RULES) {
      const level = config.rules?.[rule];
      t.equal(Array.isArray(level) ? level[0] : level, 2, `${file}: ${rule} is an error`);
    }
  }
});

t.test('lib/ and bin/ have no problems', async (t) => {
  const results = await eslint.lintFiles(['lib', 'bin']);
  const files = results.map((r) => r.filePath.slice(root.length));
  for (const f of ['lib/gateway.ts', 'lib/auth/authenticator.ts', 'lib/console/ui/app.js', 'bin/tollgate.js']) t.ok(files.includes(f), `${f} was linted`);
  t.ok(results.length > 150, `${results.length} files linted`);
  const problems = listed(results);
  t.same(problems, [], `lint problems (npm run lint; see docs/contributing.md):\n${problems.join('\n')}`);
});

t.test('test/ has no floating or misused promise, no await of a non-promise and no unused name', async (t) => {
  for (const rule of RULES.slice(0, 4)) {
    const config = (await eslint.calculateConfigForFile(`${root}test/helpers/upstream.ts`)) as { rules?: Record<string, unknown> };
    const level = config.rules?.[rule];
    t.equal(Array.isArray(level) ? level[0] : level, 2, `test/: ${rule} is an error`);
  }
  const results = await eslint.lintFiles(['test']);
  const files = results.map((r) => r.filePath.slice(root.length));
  for (const f of ['test/helpers/upstream.ts', 'test/rules/lint.test.ts']) t.ok(files.includes(f), `${f} was linted`);
  t.ok(results.length > 200, `${results.length} files linted`);
  const problems = listed(results);
  t.same(problems, [], `lint problems (npm run lint; see docs/contributing.md):\n${problems.join('\n')}`);
});

// Each rule: a planted violation it must report (at `line`), and the fix docs/contributing.md
// names, which must pass.
const PLANTED: Array<{ rule: (typeof RULES)[number]; bad: string; line: number; good: string }> = [
  {
    rule: '@typescript-eslint/no-floating-promises',
    bad: 'async function save(): Promise<void> {}\nexport function onTimer(): void {\n  save();\n}\n',
    line: 3,
    good: 'async function save(): Promise<void> {}\nexport function onTimer(log: (err: unknown) => void): void {\n  save().catch(log);\n}\n',
  },
  {
    rule: '@typescript-eslint/no-misused-promises',
    bad: 'async function save(): Promise<void> {}\nexport function each(ids: string[]): void {\n  ids.forEach(async () => { await save(); });\n}\n',
    line: 3,
    good: 'async function save(): Promise<void> {}\nexport async function each(ids: string[]): Promise<void> {\n  for (const _ of ids) await save();\n}\n',
  },
  {
    rule: '@typescript-eslint/await-thenable',
    bad: 'export async function f(): Promise<number> {\n  const n = 3;\n  return await n;\n}\n',
    line: 3,
    good: 'export async function f(): Promise<number> {\n  const n = Promise.resolve(3);\n  return await n;\n}\n',
  },
  {
    rule: '@typescript-eslint/no-unused-vars',
    bad: "export function f(a: string, b: string): string {\n  return a;\n}\n",
    line: 1,
    good: "export function f(a: string, _b: string): string {\n  return a;\n}\n",
  },
  {
    rule: '@typescript-eslint/no-explicit-any',
    bad: 'export function f(body: unknown): number {\n  return (body as any).n;\n}\n',
    line: 2,
    good: 'export function f(body: unknown): number {\n  return (body as { n: number }).n;\n}\n',
  },
];

for (const { rule, bad, line, good } of PLANTED) {
  t.test(`planted: ${rule} fires`, async (t) => {
    const results = await eslint.lintText(bad, { filePath: FIXTURE });
    t.same(results.flatMap((r) => r.messages.map((m) => `${m.line} ${m.ruleId}`)), [`${line} ${rule}`], listed(results).join('\n'));
    const fixed = listed(await eslint.lintText(good, { filePath: FIXTURE }));
    t.same(fixed, [], `the fix passes\n${fixed.join('\n')}`);
  });
}
