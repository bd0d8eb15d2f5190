// ESLint flat config: type-aware checks that the code cannot drop a promise or hide a type.
// Run with `npm run lint`; the same rules run inside `npm test` (test/rules/lint.test.ts).
// See docs/contributing.md for what each rule means and how to fix a violation.
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

const rules = {
  '@typescript-eslint/no-floating-promises': 'error',
  '@typescript-eslint/no-misused-promises': 'error',
  '@typescript-eslint/await-thenable': 'error',
  '@typescript-eslint/no-explicit-any': 'error',
};

export default defineConfig(
  { ignores: ['dist/**', 'node_modules/**', 'bench/**', 'scripts/**', 'deploy/**'] },
  {
    // The fixture is the rules' planted-violation check.
    files: ['lib/**/*.ts', 'lib/console/ui/*.js', 'bin/**/*.js', 'test/fixtures/lint/*.ts'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: {
        projectService: { allowDefaultProject: ['bin/*.js'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    plugins: { '@typescript-eslint': tseslint.plugin },
    // Off: lib keeps a disable comment for a core rule (no-control-regex) not enabled here.
    linterOptions: { reportUnusedDisableDirectives: 'off' },
    rules,
  },
  {
    // The tests: the promise rules, not no-explicit-any (fakes read loosely typed JSON). tap's
    // t.test() returns a promise tap itself awaits (PromiseWithSubtest): safe to leave.
    files: ['test/**/*.ts'],
    ignores: ['test/fixtures/**'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { '@typescript-eslint': tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: 'off' },
    rules: {
      '@typescript-eslint/no-floating-promises': ['error', { allowForKnownSafePromises: [{ from: 'package', name: 'PromiseWithSubtest', package: '@tapjs/core' }] }],
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
);
