// A config value that passed validation and still cannot work where the gateway runs, found
// while it starts (a store.path it cannot open, a tokenizer.json it cannot load): the error
// names the value's path, so `tollgate serve` reports it as `path: message`, the way `tollgate
// check` reports a problem, rather than as a stack trace.

export class ConfigValueError extends Error {
  /** The value's path in the config (`store.path`, `models[2].tokenizer`). */
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ConfigValueError';
    this.path = path;
  }

  /** The `path: message` line. */
  get line(): string {
    return `${this.path}: ${this.message}`;
  }
}
