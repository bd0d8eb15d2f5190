// The pieces of the official MCP SDK (`@modelcontextprotocol/sdk`) the gateway uses, in one module
// that ./client.ts imports on first use (loadSdk): a gateway whose config names no MCP server never
// loads the SDK, nor zod and Ajv under it (test/cli/idle-modules.test.ts).

import {
  CallToolResultSchema, CompleteResultSchema, GetPromptResultSchema, ListPromptsResultSchema, ListResourceTemplatesResultSchema,
  ListResourcesResultSchema, ListToolsResultSchema, ReadResourceResultSchema,
} from '@modelcontextprotocol/sdk/types.js';

export { Client } from '@modelcontextprotocol/sdk/client/index.js';
export { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
export { ErrorCode as RpcCode, LATEST_PROTOCOL_VERSION, McpError, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';

/** The schema of each method's result that the gateway sends upstream. */
export const RESULT_SCHEMAS = {
  'tools/list': ListToolsResultSchema,
  'tools/call': CallToolResultSchema,
  'prompts/list': ListPromptsResultSchema,
  'prompts/get': GetPromptResultSchema,
  'resources/list': ListResourcesResultSchema,
  'resources/templates/list': ListResourceTemplatesResultSchema,
  'resources/read': ReadResourceResultSchema,
  'completion/complete': CompleteResultSchema,
} as const;
