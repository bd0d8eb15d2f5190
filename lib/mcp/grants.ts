// Which MCP tools a caller may use (CONTRACT section 17): those its plan's `mcp_tools` patterns
// match and, where set, its key's and its key's team's too; nothing by default. Patterns are
// globs (`*` any run) over `<server>__<tool>`. A server's prompts and resources need its whole
// toolset: every list must match `<server>__*` itself (a pattern such as `files__*` or `*`).
// One resolved grant answers every method of a request, list and call alike.

import { modelMatcher } from '../auth/controls.js';
import type { Principal } from '../auth/principal.js';
import type { PlanConfig } from '../config/types.js';

export const SEPARATOR = '__';

export interface ToolGrant {
  /** May use `<server>__<tool>`. */
  tool(server: string, tool: string): boolean;
  /** May use everything of `server`: its prompts and resources. */
  whole(server: string): boolean;
}

type Test = (slug: string) => boolean;
const plans = new WeakMap<PlanConfig, Test>();

function planTest(plan: PlanConfig): Test {
  let test = plans.get(plan);
  if (test === undefined) {
    const patterns = plan.mcp_tools ?? [];
    test = patterns.length === 0 ? () => false : modelMatcher(patterns)!;
    plans.set(plan, test);
  }
  return test;
}

/** The caller's grant: the plan's patterns, narrowed by the key's and the team's where set. */
export function grantOf(p: Principal): ToolGrant {
  const tests: Test[] = [planTest(p.plan)];
  const own = p.key?.mcpTools;
  if (own != null) tests.push(own);
  const a = tests[0]!;
  const b = tests[1];
  const test: Test = b === undefined ? a : (slug) => a(slug) && b(slug);
  return {
    tool: (server, tool) => test(server + SEPARATOR + tool),
    whole: (server) => test(`${server}${SEPARATOR}*`),
  };
}
