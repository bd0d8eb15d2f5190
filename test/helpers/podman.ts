// Podman for test/container/ (CONTRACT section 19): makes it work on this machine (the shared
// setup.sh: podman, a runtime wrapper, a local Node base image, since no registry is reachable),
// runs its commands with a deadline, builds an image with the registry's certificate authority
// mounted for `npm ci` (never baked in), and removes by name what a test made. When podman cannot
// be made to work, the test fails: it never skips.

import { spawn } from 'node:child_process';
import { accessSync, constants, existsSync, renameSync, rmSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEFAULT_BASE = 'localhost/tollgate-base/node:20-bookworm-slim';

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `cmd args`; SIGKILL after `timeoutMs`. Resolves with its exit code and output, never rejects on a code. */
export function run(cmd: string, args: string[], options: { timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: options.cwd ?? ROOT, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.once('error', (err) => { clearTimeout(timer); reject(err); });
    child.once('close', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

/** The lines podman prints on stderr that say nothing about the command (no systemd here for healthcheck timers). */
export function quiet(stderr: string): string {
  return stderr.split('\n').filter((l) => l.trim() !== '' && !/systemd connection|failed to connect to syslog/.test(l)).join('\n');
}

/** `podman args`; rejects (with its output) unless it exits 0. */
export async function podman(args: string[], timeoutMs = 120_000): Promise<string> {
  const r = await run('podman', args, { timeoutMs });
  if (r.code !== 0) throw new Error(`podman ${args.join(' ')} exited ${r.code}: ${quiet(r.stderr).slice(-4000)}${r.stdout.slice(-2000)}`);
  return r.stdout.trim();
}

function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    if (dir === '') return false;
    try { accessSync(join(dir, name), constants.X_OK); return true; } catch { return false; }
  });
}

/** The shared folder beside the repository (../shared), else the one this machine keeps. */
export function sharedDir(): string {
  for (const dir of [join(ROOT, '..', 'shared'), '/work/shared']) if (existsSync(join(dir, 'containers', 'setup.sh'))) return dir;
  throw new Error(`no shared/containers/setup.sh beside the repository (${join(ROOT, '..', 'shared')}) nor in /work/shared`);
}

/**
 * Podman, working, and the local Node base image's name: as they are when both are there, else
 * after running the shared setup.sh (as root; minutes the first time on a machine).
 */
export async function ensurePodman(): Promise<string> {
  const base = process.env.TOLLGATE_BASE_IMAGE ?? DEFAULT_BASE;
  if (onPath('podman') && (await run('podman', ['image', 'exists', base], { timeoutMs: 60_000 })).code === 0) return base;
  const script = join(sharedDir(), 'containers', 'setup.sh');
  let r = await run('bash', [script], { timeoutMs: 20 * 60_000 });
  if (r.code !== 0 && await repairMinbaseCache()) r = await run('bash', [script], { timeoutMs: 20 * 60_000 });
  if (r.code !== 0) throw new Error(`${script} exited ${r.code}; podman cannot run the container tests:\n${r.stderr.slice(-4000)}`);
  const name = r.stdout.trim().split('\n').pop()!;
  if ((await run('podman', ['image', 'exists', name], { timeoutMs: 60_000 })).code !== 0) throw new Error(`${script} printed ${name}, which podman does not have`);
  return name;
}

/**
 * setup.sh asks mmdebstrap for `bookworm-minbase.tar.part`, and mmdebstrap 1.3.5 (bookworm),
 * which takes the format from the name, writes a directory there, renamed to the .tar that
 * `podman import` then refuses ("is a directory"). Packs that directory into the tar setup.sh
 * meant; true when it did. Remove once setup.sh names the format (`--format=tar`).
 */
async function repairMinbaseCache(): Promise<boolean> {
  const tar = join(process.env.TOLLGATE_CONTAINER_CACHE ?? '/var/cache/tollgate-containers', 'bookworm-minbase.tar');
  if (!existsSync(tar) || !statSync(tar).isDirectory()) return false;
  const packed = await run('tar', ['--numeric-owner', '-C', tar, '-cf', `${tar}.packed`, '.'], { timeoutMs: 10 * 60_000 });
  if (packed.code !== 0) return false;
  rmSync(tar, { recursive: true, force: true });
  renameSync(`${tar}.packed`, tar);
  return true;
}

/**
 * podman build: `--format docker` keeps the HEALTHCHECK, `--layers=false` leaves no stage images
 * behind. The registry's certificate authority reaches `npm ci` through an npmrc and the host's
 * certificates mounted into the RUN steps only (shared/containers/README.md).
 */
export async function build(tag: string, context: string, buildArgs: Record<string, string>, npmrc: string | null, file?: string): Promise<void> {
  const args = ['build', '--format', 'docker', '--layers=false', '--tag', tag];
  for (const [k, v] of Object.entries(buildArgs)) args.push('--build-arg', `${k}=${v}`);
  if (npmrc !== null) args.push('--volume', '/etc/ssl/certs:/etc/ssl/certs:ro', '--volume', `${npmrc}:/root/.npmrc:ro`);
  if (file !== undefined) args.push('--file', file);
  args.push(context);
  const r = await run('podman', args, { timeoutMs: 30 * 60_000 });
  if (r.code !== 0) throw new Error(`podman build of ${tag} exited ${r.code}:\n${quiet(r.stderr).slice(-4000)}\n${r.stdout.slice(-4000)}`);
}

/** Polls `url` until it answers `status` (default 200); rejects after `timeoutMs` with the last answer. */
export async function waitFor(url: string, timeoutMs: number, status = 200): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      last = `${res.status} ${await res.text()}`;
      if (res.status === status) return;
    } catch (err) {
      last = String(err);
    }
    await sleep(100);
  }
  throw new Error(`${url} did not answer ${status} within ${timeoutMs} ms (last: ${last})`);
}

/** Removes, by name, containers, pods, volumes, secrets and images; what is already gone is fine. */
export async function removeAll(what: { containers?: string[]; volumes?: string[]; secrets?: string[]; images?: string[] }): Promise<void> {
  if (what.containers?.length) await run('podman', ['rm', '--force', '--time', '0', '--ignore', ...what.containers]);
  for (const v of what.volumes ?? []) await run('podman', ['volume', 'rm', '--force', v]);
  for (const s of what.secrets ?? []) await run('podman', ['secret', 'rm', s]);
  if (what.images?.length) await run('podman', ['rmi', '--force', '--ignore', ...what.images], { timeoutMs: 300_000 });
}
