// Tollgate's public API, for embedding the gateway in an existing Node server.

export { createGateway, Gateway, type GatewayOptions, type Handler, type Next } from './gateway.js';
export { listen, type RunningServer } from './server.js';
export { loadConfigFile, parseConfig, validateConfig, ConfigError } from './config/load.js';
export type { Config } from './config/types.js';
export { ERROR_CODES, GatewayError, type ErrorCode } from './errors.js';
