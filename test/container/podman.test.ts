// The container image and the sidecar pod, run with podman as an operator runs them (CONTRACT
// section 19, issue #44). One image is built per run from the repository's Containerfile (the
// local Node base of shared/containers/setup.sh passed as NODE_IMAGE, the registry's certificate
// authority mounted for npm only) and used by every test here; then:
// - the image holds the production dependencies and the compiled code alone, runs as uid 1000,
//   and its HEALTHCHECK passes; its size is reported;
// - started from a mounted YAML with a read-only root (and no writable /tmp), it serves /v1 to the
//   openai SDK (a chat, a streamed chat), meters them to the unit (the wallet through /admin),
//   refuses writes outside its volume, drains a stream in flight on `podman stop` and exits 0, and
//   finds its state on the volume after a restart; its start time to /readyz 200 is reported;
// - deploy/kubernetes/sidecar.yaml runs under `podman kube play` with a fake vLLM (the same base,
//   test/fixtures/container/) in the same pod: a chat through the pod's published port is metered,
//   and stopping the pod's containers drains a stream in flight before `podman kube down`.
//
// What podman 4.3 cannot do, and how the test goes around it (the manifests stay plain Kubernetes):
// kube play reads no Secret object (the test creates a podman secret holding the Secret's data,
// as JSON); it ignores Services (Tollgate's containerPort gets a hostPort on 127.0.0.1); `kube down`
// kills with SIGKILL at once (podman#22397) and `pod stop` takes the pod's network down with its
// infra container while the others still drain, where Kubernetes SIGTERMs the containers and keeps
// the sandbox until they exit: the test stops the two containers with `podman stop`, as the
// kubelet would, then runs `kube down`. Names carry this process's id; everything made is removed
// by name at the end.

import t from 'tap';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import YAML from 'yaml';
import { freePort } from '../helpers/redis.js';
import { ROOT, build, ensurePodman, podman, quiet, removeAll, run, waitFor } from '../helpers/podman.js';

// Building the image takes minutes on a loaded machine; setup.sh, the first time, minutes more.
t.setTimeout(45 * 60_000);

const ID = String(process.pid);
const IMAGE = `localhost/tollgate-test:${ID}`;
const FAKE_IMAGE = `localhost/tollgate-test-fake-vllm:${ID}`;
const CONTAINER = `tollgate-test-${ID}`;
const STATE_VOLUME = `tollgate-test-state-${ID}`;
const ADMIN = 'container-admin-token';
const UPSTREAM_KEY = 'container-upstream-key';
/** 1 unit per prompt token, 2 per completion token: a debit is prompt + 2 x completion. */
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };
const WALLET = 1_000_000;
const cost = (u: { prompt_tokens: number; completion_tokens: number }) => u.prompt_tokens + 2 * u.completion_tokens;

const scratch = mkdtempSync(join(tmpdir(), 'tollgate-container-'));
chmodSync(scratch, 0o755);
const made = { containers: [CONTAINER] as string[], volumes: [STATE_VOLUME] as string[], secrets: [] as string[], images: [IMAGE, FAKE_IMAGE] };
t.teardown(async () => {
  await removeAll(made);
  rmSync(scratch, { recursive: true, force: true });
});

let base = '';
let buildMs = 0;

t.test('the image builds from the Containerfile with the Node base as an ARG', async (t) => {
  base = await ensurePodman();
  let npmrc: string | null = null;
  if (existsSync('/etc/ssl/certs/ca-certificates.crt')) {
    npmrc = join(scratch, 'npmrc');
    writeFileSync(npmrc, 'cafile=/etc/ssl/certs/ca-certificates.crt\n');
  }
  const started = Date.now();
  await build(IMAGE, ROOT, { NODE_IMAGE: base, REVISION: 'test' }, npmrc);
  buildMs = Date.now() - started;
  await build(FAKE_IMAGE, join(ROOT, 'test/fixtures/container'), { NODE_IMAGE: base }, null);
  t.equal(await podman(['image', 'exists', IMAGE]), '', `${IMAGE} built in ${(buildMs / 1000).toFixed(0)} s`);
});

t.test('the image: production dependencies and compiled code only, uid 1000, OCI labels, a working HEALTHCHECK', async (t) => {
  const [info] = JSON.parse(await podman(['image', 'inspect', IMAGE]));
  const [baseInfo] = JSON.parse(await podman(['image', 'inspect', base]));
  const mb = (n: number) => `${(n / 1e6).toFixed(0)} MB`;
  t.comment(`image size: ${mb(info.Size)} (${info.Size} bytes) on a ${mb(baseInfo.Size)} Node base (${base}): Tollgate's layers ${mb(info.Size - baseInfo.Size)}; built in ${(buildMs / 1000).toFixed(0)} s`);
  t.equal(info.Config.User, '1000:1000', 'a numeric non-root user (Kubernetes runAsNonRoot can check it)');
  t.strictSame(info.Config.Entrypoint, ['node', '/opt/tollgate/bin/tollgate.js']);
  t.strictSame(info.Config.Cmd, ['serve', '--config', '/etc/tollgate/tollgate.yaml']);
  t.equal(info.Config.WorkingDir, '/var/lib/tollgate');
  t.strictSame(Object.keys(info.Config.ExposedPorts), ['8080/tcp']);
  t.equal(info.Config.StopSignal, 'SIGTERM');
  t.notOk(info.Config.Env.some((e: string) => /CA_CERTS|npm_config|NPM_CONFIG/.test(e)), 'no build-time certificate or npm setting baked into the environment');
  const labels = info.Config.Labels;
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  t.match(labels, {
    'org.opencontainers.image.title': 'tollgate',
    'org.opencontainers.image.version': pkg.version,
    'org.opencontainers.image.revision': 'test',
    'org.opencontainers.image.licenses': pkg.license,
    'org.opencontainers.image.base.name': base,
  });
  t.ok(info.Healthcheck?.Test?.length > 0, 'a HEALTHCHECK');

  // What is inside, read by the image's own node on a read-only root.
  const probe = `
    const fs = require('fs'), path = require('path');
    const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? walk(path.join(d, e.name)) : [path.join(d, e.name)]);
    const top = (d) => fs.readdirSync(d).flatMap((n) => n.startsWith('@') ? fs.readdirSync(path.join(d, n)).map((m) => n + '/' + m) : [n]).filter((n) => !n.startsWith('.'));
    const st = (p) => { const s = fs.statSync(p); return { uid: s.uid, mode: (s.mode & 0o777).toString(8) }; };
    console.log(JSON.stringify({
      app: fs.readdirSync('/opt/tollgate').sort(),
      modules: top('/opt/tollgate/node_modules').sort(),
      sources: walk('/opt/tollgate/dist').filter((f) => /\\.(ts|map)$/.test(f)),
      npm: ['/usr/local/bin/npm', '/usr/local/lib/node_modules/npm'].filter((p) => fs.existsSync(p)),
      app_owner: st('/opt/tollgate'), dist_owner: st('/opt/tollgate/dist/lib/cli/index.js'), state: st('/var/lib/tollgate'),
      config: fs.readFileSync('/etc/tollgate/tollgate.yaml', 'utf8'),
      on_path: fs.realpathSync('/usr/local/bin/tollgate'),
    }));`;
  const inside = JSON.parse(await podman(['run', '--rm', '--read-only', '--entrypoint', 'node', IMAGE, '-e', probe]));
  t.strictSame(inside.app, ['bin', 'config', 'dist', 'node_modules', 'package.json'], 'no sources, tests, docs or scripts');
  // The production closure, exactly: every top-level package of package-lock.json not marked dev.
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
  const prod = Object.entries<any>(lock.packages)
    .filter(([k, v]) => /^node_modules\/(@[^/]+\/)?[^/]+$/.test(k) && v.dev !== true)
    .map(([k]) => k.slice('node_modules/'.length)).sort();
  t.strictSame(inside.modules, prod, `node_modules holds the ${prod.length} production packages and nothing else`);
  const devOnly = Object.keys(pkg.devDependencies).filter((name) => lock.packages[`node_modules/${name}`]?.dev === true);
  t.ok(devOnly.includes('typescript') && devOnly.includes('tap'));
  for (const name of devOnly) t.notOk(inside.modules.includes(name), `no ${name}`);
  t.strictSame(inside.sources, [], 'dist/ carries no TypeScript declarations or source maps');
  t.strictSame(inside.npm, [], 'no package manager in the runtime image');
  t.equal(inside.app_owner.uid, 0, 'the code belongs to root');
  t.equal(inside.dist_owner.uid, 0);
  t.notOk(parseInt(inside.dist_owner.mode, 8) & 0o022, 'and is not writable by the runtime user');
  t.equal(inside.state.uid, 1000, '/var/lib/tollgate belongs to the runtime user');
  t.equal(inside.config, readFileSync(join(ROOT, 'config/container.yaml'), 'utf8'), 'the default config is config/container.yaml');
  t.equal(inside.on_path, '/opt/tollgate/bin/tollgate.js', '`tollgate` is on PATH for `kubectl exec`');

  // Without a volume on a read-only root, the store cannot be written: the check's line, exit 1.
  const noVolume = await run('podman', ['run', '--rm', '--read-only', '--read-only-tmpfs=false', IMAGE], { timeoutMs: 120_000 });
  t.equal(noVolume.code, 1);
  t.match(quiet(noVolume.stderr), /^store\.path: "\/var\/lib\/tollgate" is not writable \(EROFS\)$/m);
});

/** The operator's YAML, mounted at /etc/tollgate: the echo provider, slow enough to stop mid-stream. */
function containerConfig(): string {
  return YAML.stringify({
    server: { host: '0.0.0.0', port: 8080, drain_timeout_ms: 30_000 },
    admin: { token: '${TOLLGATE_ADMIN_TOKEN}' },
    store: { kind: 'memory', path: '/var/lib/tollgate' },
    plans: { standard: { paid: true, requests_per_minute: 600, max_concurrent: 8 } },
    providers: { echo: { kind: 'echo', chunk_delay_ms: 100 } },
    models: [{ id: 'echo-small', provider: 'echo', context_window: 8192, max_output_tokens: 1024, price: PRICE }],
  });
}

async function admin(url: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${url}/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} /admin${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

t.test('the container: /v1 to the openai SDK, metered, non-root on a read-only root, drains on podman stop, state kept', async (t) => {
  const mounted = mkdtempSync(join(scratch, 'config-'));
  chmodSync(mounted, 0o755);
  writeFileSync(join(mounted, 'tollgate.yaml'), containerConfig(), { mode: 0o644 });
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;

  await podman(['volume', 'create', STATE_VOLUME]);
  const started = Date.now();
  await podman(['run', '--detach', '--name', CONTAINER, '--read-only', '--read-only-tmpfs=false',
    '--publish', `127.0.0.1:${port}:8080`, '--env', `TOLLGATE_ADMIN_TOKEN=${ADMIN}`,
    '--volume', `${mounted}:/etc/tollgate:ro`, '--volume', `${STATE_VOLUME}:/var/lib/tollgate`, IMAGE]);
  await waitFor(`${url}/readyz`, 120_000);
  const startMs = Date.now() - started;
  t.comment(`start time: ${startMs} ms from \`podman run\` to /readyz 200`);

  t.equal(await podman(['exec', CONTAINER, 'id', '-u']), '1000', 'runs as uid 1000');
  for (const path of ['/probe', '/tmp/probe', '/opt/tollgate/probe', '/etc/tollgate/probe']) {
    const w = await run('podman', ['exec', CONTAINER, 'sh', '-c', `echo x > ${path}`]);
    t.not(w.code, 0, `a write to ${path} fails`);
    t.match(w.stderr, /Read-only file system/);
  }
  t.equal((await run('podman', ['healthcheck', 'run', CONTAINER])).code, 0, 'the HEALTHCHECK passes');

  await admin(url, 'POST', '/accounts', { id: 'acme', plan: 'standard', wallet_units: WALLET });
  const { key } = await admin(url, 'POST', '/accounts/acme/keys');
  const client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });

  const { data: answer, response } = await client.chat.completions
    .create({ model: 'echo-small', messages: [{ role: 'user', content: 'Hello from a container' }] })
    .withResponse();
  t.equal(answer.choices[0]!.message.content, 'Hello from a container');
  const charged = Number(response.headers.get('x-tollgate-units-charged'));
  t.equal(charged, cost(answer.usage!), 'charged prompt + 2 x completion');
  t.equal(Number(response.headers.get('x-tollgate-wallet-balance-units')), WALLET - charged);

  const stream = await client.chat.completions.create({
    model: 'echo-small', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'a streamed answer' }],
  });
  let streamed = '';
  let usage: { prompt_tokens: number; completion_tokens: number } | undefined;
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  t.equal(streamed, 'a streamed answer');
  let spent = charged + cost(usage!);
  t.equal((await admin(url, 'GET', '/accounts/acme')).balance_units, WALLET - spent, 'the wallet, to the unit, through /admin');

  // SIGTERM with a stream in flight: it finishes, and the process exits 0.
  const words = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
  const slow = await client.chat.completions.create({
    model: 'echo-small', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: words }],
  });
  let drained = '';
  let drainedUsage: typeof usage;
  let stopping: Promise<Awaited<ReturnType<typeof run>>> | undefined;
  for await (const chunk of slow) {
    drained += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) drainedUsage = chunk.usage;
    if (stopping === undefined && drained !== '') stopping = run('podman', ['stop', '--time', '60', CONTAINER], { timeoutMs: 120_000 });
  }
  t.equal(drained, words, 'the stream in flight finished whole');
  const stopped = await stopping!;
  t.equal(stopped.code, 0, quiet(stopped.stderr));
  const [state] = JSON.parse(await podman(['inspect', CONTAINER]));
  t.equal(state.State.ExitCode, 0, 'exit code 0 after the drain');
  const logs = (await run('podman', ['logs', CONTAINER])).stdout;
  const draining = logs.split('\n').filter((l) => l.includes('"draining"')).map((l) => JSON.parse(l));
  t.match(draining, [{ signal: 'SIGTERM' }]);
  t.ok(draining[0].inflight >= 1, 'SIGTERM came while the stream was in flight');
  spent += cost(drainedUsage!);

  // The state is on the volume: the account, its key and its wallet survive a restart.
  await podman(['start', CONTAINER]);
  await waitFor(`${url}/readyz`, 120_000);
  t.equal((await admin(url, 'GET', '/accounts/acme')).balance_units, WALLET - spent, 'every debit, the drained stream\'s too, survived the restart');
  const again = await client.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'still here' }] });
  t.equal(again.choices[0]!.message.content, 'still here', 'the key issued before the restart still works');

  // A config change without a restart, as deploy/kubernetes/README.md says: the file, then SIGHUP to PID 1.
  const changed = YAML.parse(containerConfig());
  changed.models.push({ ...changed.models[0], id: 'echo-large' });
  writeFileSync(join(mounted, 'tollgate.yaml'), YAML.stringify(changed));
  await podman(['exec', CONTAINER, 'sh', '-c', 'kill -HUP 1']);
  let ids: string[] = [];
  for (let i = 0; i < 100 && !ids.includes('echo-large'); i++) {
    ids = (await client.models.list()).data.map((m) => m.id);
    if (!ids.includes('echo-large')) await sleep(100);
  }
  t.strictSame(ids.sort(), ['echo-large', 'echo-small'], 'SIGHUP re-read the mounted config');
  await podman(['stop', '--time', '60', CONTAINER]);
});

/**
 * deploy/kubernetes/sidecar.yaml for `podman kube play`: the images named, Tollgate's port
 * published on 127.0.0.1, and this run's suffix on every name podman makes something of (pod,
 * volumes, secret), so that no other run's objects are touched. Nothing else changes.
 */
function sidecarForPodman(hostPort: number): { yaml: string; pod: string; volumes: string[]; secret: string } {
  const docs = YAML.parseAllDocuments(readFileSync(join(ROOT, 'deploy/kubernetes/sidecar.yaml'), 'utf8')).map((d) => d.toJS());
  const suffix = `-${ID}`;
  const secret = `tollgate${suffix}`;
  const volumes: string[] = [];
  let pod = '';
  for (const doc of docs) {
    doc.metadata.name += suffix;
    if (doc.kind === 'PersistentVolumeClaim' || doc.kind === 'ConfigMap') volumes.push(doc.metadata.name);
    if (doc.kind !== 'Deployment') continue;
    pod = `${doc.metadata.name}-pod-0`;
    const spec = doc.spec.template.spec;
    for (const v of spec.volumes) {
      if (v.configMap) v.configMap.name += suffix;
      if (v.persistentVolumeClaim) v.persistentVolumeClaim.claimName += suffix;
    }
    for (const c of spec.containers) {
      c.image = c.name === 'tollgate' ? IMAGE : FAKE_IMAGE;
      for (const e of c.env ?? []) if (e.valueFrom?.secretKeyRef) e.valueFrom.secretKeyRef.name = secret;
      if (c.name === 'tollgate') Object.assign(c.ports[0], { hostPort, hostIP: '127.0.0.1' });
    }
  }
  return { yaml: docs.map((d) => YAML.stringify(d)).join('---\n'), pod, volumes, secret };
}

t.test('the sidecar layout under podman kube play: metered through the pod\'s port, drained on stop', async (t) => {
  const hostPort = await freePort();
  const url = `http://127.0.0.1:${hostPort}`;
  const play = sidecarForPodman(hostPort);
  const file = join(scratch, 'sidecar.yaml');
  writeFileSync(file, play.yaml);
  const tollgate = `${play.pod}-tollgate`;
  const model = `${play.pod}-model-server`;
  made.containers.push(tollgate, model);
  made.volumes.push(...play.volumes);
  made.secrets.push(play.secret);
  t.teardown(() => run('podman', ['kube', 'down', file]));

  // The Secret of deploy/kubernetes/secret.yaml, with values, as podman 4.3 reads one: its data as JSON.
  const secretDoc = YAML.parse(readFileSync(join(ROOT, 'deploy/kubernetes/secret.yaml'), 'utf8'));
  const values: Record<string, string> = { 'admin-token': ADMIN, 'upstream-api-key': UPSTREAM_KEY, 'redis-password': '' };
  t.strictSame(Object.keys(secretDoc.stringData).sort(), Object.keys(values).sort(), 'the keys of secret.yaml');
  const secretFile = join(scratch, 'secret.json');
  writeFileSync(secretFile, JSON.stringify(Object.fromEntries(Object.entries(values).map(([k, v]) => [k, Buffer.from(v).toString('base64')]))));
  await podman(['secret', 'create', play.secret, secretFile]);

  await podman(['kube', 'play', file], 300_000);
  // Ready once the model server answered /v1/models (discovery fills the catalog).
  await waitFor(`${url}/readyz`, 120_000);

  for (const name of [tollgate, model]) {
    const [c] = JSON.parse(await podman(['inspect', name]));
    t.equal(c.HostConfig.ReadonlyRootfs, true, `${name}: read-only root file system`);
    t.strictSame(c.EffectiveCaps ?? [], [], `${name}: no capabilities`);
    t.not(await podman(['exec', name, 'id', '-u']), '0', `${name}: not root`);
  }
  const noKey = await fetch(`${url}/v1/models`);
  t.equal(noKey.status, 401, 'the published port is Tollgate\'s: no key, no models');

  await admin(url, 'POST', '/accounts', { id: 'acme', plan: 'standard', wallet_units: WALLET });
  const { key } = await admin(url, 'POST', '/accounts/acme/keys');
  const client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
  const models = await client.models.list();
  t.strictSame(models.data.map((m) => m.id), ['qwen2.5-1.5b-instruct'], 'the model server\'s model, discovered over localhost');

  const { data: answer, response } = await client.chat.completions
    .create({ model: 'qwen2.5-1.5b-instruct', max_tokens: 4, messages: [{ role: 'user', content: 'hello from outside the pod' }] })
    .withResponse();
  t.equal(answer.choices[0]!.message.content, 'w1 w2 w3 w4', 'answered by the model server in the pod');
  t.strictSame(answer.usage, { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 });
  // The sidecar's ConfigMap prices every discovered model at 100 / 300 units per million tokens.
  const expected = Math.ceil((5 * 100 + 4 * 300) / 1_000_000);
  t.equal(Number(response.headers.get('x-tollgate-units-charged')), expected, 'metered at the ConfigMap\'s prices');
  t.equal((await admin(url, 'GET', '/accounts/acme')).balance_units, WALLET - expected, 'the wallet, through /admin');
  const modelLog = (await run('podman', ['logs', model])).stdout;
  t.match(modelLog, /POST \/v1\/chat\/completions/, 'the request reached the model server');

  // Termination as the kubelet does it: SIGTERM to both containers, the sandbox kept meanwhile.
  const stream = await client.chat.completions.create({
    model: 'qwen2.5-1.5b-instruct', max_tokens: 20, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'stream while the pod stops' }],
  });
  let text = '';
  let usage: { completion_tokens: number } | undefined;
  let stopping: Promise<Awaited<ReturnType<typeof run>>> | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
    if (stopping === undefined && text !== '') stopping = run('podman', ['stop', '--time', '60', tollgate, model], { timeoutMs: 120_000 });
  }
  t.equal(text, Array.from({ length: 20 }, (_, i) => `w${i + 1}`).join(' '), 'the stream in flight finished whole');
  t.equal(usage?.completion_tokens, 20);
  const stopped = await stopping!;
  t.equal(stopped.code, 0, quiet(stopped.stderr));
  for (const name of [tollgate, model]) {
    const [c] = JSON.parse(await podman(['inspect', name]));
    t.equal(c.State.ExitCode, 0, `${name} exited 0`);
  }
  t.match((await run('podman', ['logs', tollgate])).stdout, /"signal":"SIGTERM","inflight":1,"msg":"draining"/, 'Tollgate drained with the stream in flight');

  const gone = await run('podman', ['kube', 'down', file]);
  t.equal(gone.code, 0, quiet(gone.stderr));
  t.equal((await run('podman', ['pod', 'exists', play.pod])).code, 1, 'kube down removed the pod');
});
