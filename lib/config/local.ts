// What a config names on the machine it runs on, checked where the gateway would use it, so
// that `tollgate check` refuses what `tollgate serve` could not start with (CONTRACT section
// 11): the memory store's folder, the tokenizer.json files (loaded with the gateway's own
// loader), and the address to listen on (it resolves and is one of this machine's). Both
// commands run these checks on the file (load.ts loadConfigFile); they are cheap (a few stat and
// access calls, one mkdir and rmdir of a probe folder, each tokenizer.json read once, one
// lookup and a listen on port 0, closed at once). Like crossCheck they read the data whether or
// not the schema accepted it, and skip the parts whose shape is wrong. A port in use is left to
// serve: check runs beside the gateway it checks a new config for.

import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { access, lstat, mkdir, rmdir, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { clip } from '../errors.js';
import type { Config, TokenizerSpec } from './types.js';
import { ConfigValueError } from './value-error.js';

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const obj = (v: unknown): Obj => (isObj(v) ? v : {});
const q = (v: string): string => JSON.stringify(v);
const codeOf = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

/** Every problem with what a (possibly schema-invalid) config names on this machine. */
export async function localProblems(data: unknown): Promise<string[]> {
  const c = obj(data);
  const problems: string[] = [];
  const host = obj(c.server).host;
  if (typeof host === 'string') {
    const why = await hostProblem(host);
    if (why !== undefined) problems.push(`server.host: ${why}`);
  }
  const store = obj(c.store);
  if ((store.kind ?? 'memory') === 'memory' && typeof store.path === 'string' && store.path !== '') {
    const why = await storeDirProblem(store.path);
    if (why !== undefined) problems.push(`store.path: ${why}`);
  }
  for (const [spec, paths] of tokenizerUses(c, true)) {
    const why = await tokenizerProblem(spec);
    if (why !== undefined) problems.push(...paths.map((path) => `${path}: ${why}`));
  }
  return problems;
}

/**
 * Loads every tokenizer a validated config names, as the gateway does when it starts; one that
 * cannot load is a ConfigValueError naming the first value that names it.
 */
export async function loadConfigTokenizers(config: Config): Promise<void> {
  for (const [spec, paths] of tokenizerUses(config as unknown as Obj, false)) {
    const why = await tokenizerProblem(spec);
    if (why !== undefined) throw new ConfigValueError(paths[0]!, why);
  }
}

const TOKENIZER_FILE = /.\.json$/;

/**
 * The tokenizers a config names, each with the paths that name it: o200k_base (every gateway
 * counts with it) and the models' and the providers' model_defaults' tokenizers; only the
 * tokenizer.json files when `filesOnly` (the encodings ship with the gateway).
 */
function tokenizerUses(c: Obj, filesOnly: boolean): Map<string, string[]> {
  const uses = new Map<string, string[]>();
  const add = (spec: unknown, path: string) => {
    if (typeof spec !== 'string' || (filesOnly && !TOKENIZER_FILE.test(spec))) return;
    const key = spec === 'upstream' ? 'o200k_base' : spec;
    uses.set(key, [...(uses.get(key) ?? []), path]);
  };
  if (!filesOnly) add('o200k_base', 'models');
  (Array.isArray(c.models) ? c.models : []).forEach((m, i) => add(obj(m).tokenizer, `models[${i}].tokenizer`));
  for (const [name, p] of Object.entries(obj(c.providers))) add(obj(obj(p).model_defaults).tokenizer, `providers.${name}.model_defaults.tokenizer`);
  return uses;
}

/**
 * Why a tokenizer cannot be loaded, or undefined once it is. The loader is the gateway's own
 * (tokens/count.ts, imported only for a config that names a tokenizer.json): what `check` loads
 * here, `serve` does not load again.
 */
async function tokenizerProblem(spec: string): Promise<string | undefined> {
  const { loadTokenizers } = await import('../tokens/count.js');
  try {
    await loadTokenizers([spec as TokenizerSpec]);
    return undefined;
  } catch (err) {
    // count.ts says "tokenizer PATH: why"; a JSON error quotes the file, new lines and all.
    const why = (err instanceof Error ? err.message : String(err)).replace(`tokenizer ${spec}: `, '').replace(/\s+/g, ' ').trim();
    return `cannot load ${q(spec)}: ${clip(why, 200)}`;
  }
}

/** How long the listening probe may take (a slow resolver): past it, the host is not judged. */
const HOST_PROBE_MS = 3000;

/**
 * Why the gateway could not listen on `host`: a name that does not resolve, or an address
 * that is not this machine's. Found by listening on port 0 there and closing at once.
 */
async function hostProblem(host: string): Promise<string | undefined> {
  const server = createServer();
  let timer: NodeJS.Timeout | undefined;
  const err = await Promise.race([
    new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      server.once('error', resolve);
      server.listen(0, host, () => resolve(undefined));
    }),
    new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), HOST_PROBE_MS); timer.unref(); }),
  ]);
  clearTimeout(timer);
  server.close();
  return err === undefined ? undefined : listenProblem(host, err);
}

/** A failure to listen on `host`, said as the rest of a `server.host: ...` line. */
export function listenProblem(host: string, err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'EADDRNOTAVAIL': return `${q(host)} is not an address of this machine (EADDRNOTAVAIL)`;
    case 'ENOTFOUND': case 'EAI_AGAIN': case 'EAI_FAIL': case 'EAI_NODATA': case 'EAI_NONAME':
      return `${q(host)} cannot be resolved (${err.code})`;
    default: return `cannot listen on ${q(host)} (${err.code ?? err.message})`;
  }
}

/** Files the memory store keeps in its folder (journal.ts, usage-files.ts): a folder there breaks it. */
const STORE_FILES = ['journal.jsonl', 'snapshot.json'];

/**
 * Why the memory store could not live in `path`: it must be a folder the gateway can write, or
 * one it can create (its nearest existing parent takes a new folder: tried with a probe folder,
 * since a permission check says yes to root under /proc or /sys where mkdir still fails).
 */
async function storeDirProblem(path: string): Promise<string | undefined> {
  const abs = resolve(path);
  const found = await stat(abs).catch((err: NodeJS.ErrnoException) => err);
  if (!(found instanceof Error)) {
    if (!found.isDirectory()) return `${q(path)} is not a directory`;
    try {
      await access(abs, constants.R_OK | constants.W_OK | constants.X_OK);
    } catch (err) {
      return `${q(path)} is not writable (${codeOf(err)})`;
    }
    for (const name of STORE_FILES) {
      const file = await stat(join(abs, name)).catch(() => undefined);
      if (file !== undefined && !file.isFile()) return `${q(join(path, name))} is not a regular file`;
    }
    const usage = await stat(join(abs, 'usage')).catch(() => undefined);
    if (usage !== undefined && !usage.isDirectory()) return `${q(join(path, 'usage'))} is not a directory`;
    return undefined;
  }
  if (found.code !== 'ENOENT' && found.code !== 'ENOTDIR') return `cannot be used (${found.code ?? found.message})`;
  // Up to the nearest thing that exists: it must be a folder that takes a new one (the store
  // creates the rest below it).
  let at = abs;
  for (;;) {
    const parent = dirname(at);
    if (parent === at) return 'cannot be created (no existing folder above it)';
    // A symbolic link to nothing is "missing" to stat, and cannot be made into a folder.
    if (await lstat(at).then((s) => s.isSymbolicLink(), () => false)) return `cannot be created: ${q(at)} is a symbolic link to nothing`;
    const up = await stat(parent).catch((err: NodeJS.ErrnoException) => err);
    if (up instanceof Error) {
      if (up.code === 'ENOENT' || up.code === 'ENOTDIR') { at = parent; continue; }
      return `cannot be created under ${q(parent)} (${up.code ?? up.message})`;
    }
    if (!up.isDirectory()) return `cannot be created: ${q(parent)} is not a directory`;
    const probe = join(parent, `.tollgate-check-${process.pid}-${randomBytes(4).toString('hex')}`);
    try {
      await mkdir(probe);
    } catch (err) {
      return `cannot be created: ${q(parent)} does not take a new folder (${codeOf(err)})`;
    }
    await rmdir(probe).catch(() => undefined);
    return undefined;
  }
}
