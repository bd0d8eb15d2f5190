// The pieces of the official MCP SDK (`@modelcontextprotocol/sdk`) the gateway uses, in one module
// that ./client.ts imports on first use (loadSdk): a gateway whose config names no MCP server never
// loads the SDK, nor zod and Ajv under it (test/cli/idle-modules.test.ts). The SDK's Client opens
// each upstream session (the initialize handshake); the calls on it go out through undici.

export { Client } from '@modelcontextprotocol/sdk/client/index.js';
export { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
export { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
