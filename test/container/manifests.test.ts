// deploy/kubernetes/ as Kubernetes reads it (CONTRACT section 19), offline: every document is
// checked against the Kubernetes 1.33 OpenAPI schemas (the kubernetes-models package, pinned:
// its validators are those schemas compiled with ajv), and no field is unknown to them (kubectl
// rejects unknown fields; the same package's TypeScript types, checked for excess properties).
// Then what the layouts promise: every container restricted (non-root, read-only root, no
// privilege escalation, no capabilities, seccomp RuntimeDefault), with probes and resources;
// Tollgate's probes on /healthz and /readyz, its grace period above its drain, its config (the
// ConfigMap) accepted by the loader `tollgate check` uses; the sidecar's model server on
// localhost behind a Service that exposes Tollgate alone; the standalone layout's replicas, PDB,
// Redis store and fleet names. Each check is shown to fail on a manifest broken on purpose.

import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import YAML from 'yaml';
import { ConfigError, loadConfigFile } from '../../lib/config/load.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DIR = join(ROOT, 'deploy/kubernetes');
const FILES = ['secret.yaml', 'sidecar.yaml', 'standalone.yaml'];

interface Doc { file: string; index: number; obj: any }
const where = (d: Doc) => `${d.file}#${d.index} ${d.obj.kind}/${d.obj.metadata?.name}`;

function load(file: string): Doc[] {
  return YAML.parseAllDocuments(readFileSync(join(DIR, file), 'utf8')).map((d, index) => {
    if (d.errors.length > 0) throw new Error(`${file}#${index}: ${d.errors[0]!.message}`);
    return { file, index, obj: d.toJS() };
  });
}
const all = () => FILES.flatMap(load);
const layout = (file: string) => load(file).map((d) => d.obj);

// ---- the schemas ----------------------------------------------------------------------------

/** Problems the Kubernetes OpenAPI schema finds in each document. */
async function schemaProblems(docs: Doc[]): Promise<string[]> {
  const out: string[] = [];
  for (const d of docs) {
    const { apiVersion, kind } = d.obj;
    let Model: any;
    try {
      Model = (await import(`kubernetes-models/${apiVersion}/${kind}`))[kind];
    } catch {
      out.push(`${where(d)}: no schema for ${apiVersion} ${kind}`);
      continue;
    }
    try {
      new Model(d.obj).validate();
    } catch (err) {
      out.push(`${where(d)}: ${(err as Error).message}`);
    }
  }
  return out;
}

/**
 * Fields the schemas do not know, anywhere in any document: each document becomes a typed object
 * literal (its kind's interface), which TypeScript checks for excess properties.
 */
function unknownFields(docs: Doc[]): string[] {
  const file = join(ROOT, 'test/container/__manifests__.ts');
  let source = '';
  const starts: number[] = [];
  docs.forEach((d, i) => {
    starts.push(source.split('\n').length);
    source += `import type { I${d.obj.kind} as T${i} } from 'kubernetes-models/${d.obj.apiVersion}/${d.obj.kind}';\n`;
    source += `export const d${i}: T${i} = ${JSON.stringify(d.obj, null, 1)};\n`;
  });
  const options: ts.CompilerOptions = {
    strict: true, noEmit: true, skipLibCheck: true, types: [], lib: ['lib.es2022.d.ts'],
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  host.getSourceFile = (name, lang, ...rest) => (name === file ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, ...rest));
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((diag) => {
    const line = diag.file === undefined || diag.start === undefined ? 0 : diag.file.getLineAndCharacterOfPosition(diag.start).line + 1;
    let i = starts.length - 1;
    while (i > 0 && starts[i]! > line) i--;
    const text = ts.flattenDiagnosticMessageText(diag.messageText, '\n').split('\n').pop()!.trim();
    return `${docs[i] === undefined ? 'manifests' : where(docs[i]!)}: ${text}`;
  });
}

// ---- what the layouts promise ---------------------------------------------------------------

const WORKLOADS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'Job']);
const containersOf = (pod: any): any[] => [...(pod.initContainers ?? []), ...pod.containers];
const isTollgate = (c: any) => c.name === 'tollgate';
const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);
const preStopSeconds = (c: any): number => {
  const cmd: string[] | undefined = c.lifecycle?.preStop?.exec?.command;
  return cmd?.[0] === 'sleep' ? Number(cmd[1]) : c.lifecycle?.preStop?.sleep?.seconds ?? 0;
};

/** Every pod: no API token, no service links, restricted; every container: restricted, probed, sized. */
function podProblems(objs: any[]): string[] {
  const out: string[] = [];
  for (const w of objs.filter((o) => WORKLOADS.has(o.kind))) {
    const name = `${w.kind}/${w.metadata.name}`;
    const pod = w.spec.template.spec;
    if (pod.automountServiceAccountToken !== false) out.push(`${name}: automountServiceAccountToken is not false`);
    if (pod.enableServiceLinks !== false) out.push(`${name}: enableServiceLinks is not false`);
    if (pod.securityContext?.runAsNonRoot !== true) out.push(`${name}: the pod's runAsNonRoot is not true`);
    if (pod.securityContext?.seccompProfile?.type !== 'RuntimeDefault') out.push(`${name}: the pod's seccompProfile is not RuntimeDefault`);
    if (pod.hostNetwork === true || pod.hostPID === true || pod.hostIPC === true) out.push(`${name}: shares a host namespace`);
    for (const c of containersOf(pod)) {
      const at = `${name} container ${c.name}`;
      const sc = c.securityContext ?? {};
      if (sc.runAsNonRoot !== true) out.push(`${at}: runAsNonRoot is not true`);
      if (!Number.isInteger(sc.runAsUser) || sc.runAsUser <= 0) out.push(`${at}: runAsUser is not a non-zero uid`);
      if (sc.readOnlyRootFilesystem !== true) out.push(`${at}: readOnlyRootFilesystem is not true`);
      if (sc.allowPrivilegeEscalation !== false) out.push(`${at}: allowPrivilegeEscalation is not false`);
      if (sc.privileged === true) out.push(`${at}: privileged`);
      if (JSON.stringify(sc.capabilities?.drop) !== '["ALL"]' || sc.capabilities?.add !== undefined) out.push(`${at}: capabilities are not drop [ALL] with none added`);
      if (sc.seccompProfile?.type !== 'RuntimeDefault') out.push(`${at}: seccompProfile is not RuntimeDefault`);
      if (c.livenessProbe === undefined) out.push(`${at}: no livenessProbe`);
      if (c.readinessProbe === undefined) out.push(`${at}: no readinessProbe`);
      if (c.resources?.requests?.cpu === undefined || c.resources?.requests?.memory === undefined) out.push(`${at}: no cpu and memory requests`);
      if (c.resources?.limits?.memory === undefined) out.push(`${at}: no memory limit`);
      if (!/^[^:@]+(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$/.test(c.image) || /:latest$/.test(c.image) || !/[:@]/.test(c.image.split('/').pop())) {
        out.push(`${at}: image ${c.image} is not pinned to a tag or digest`);
      }
    }
  }
  for (const o of objs) if (o.metadata.namespace !== undefined) out.push(`${o.kind}/${o.metadata.name}: names a namespace (kubectl -n chooses it)`);
  return out;
}

/** The ConfigMap's tollgate.yaml, as `tollgate serve` loads it (env from the Secret's keys). */
async function tollgateConfig(objs: any[], configMap: string): Promise<any> {
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === configMap);
  if (cm === undefined) throw new Error(`no ConfigMap ${configMap}`);
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-manifest-'));
  const file = join(dir, 'tollgate.yaml');
  writeFileSync(file, cm.data['tollgate.yaml']);
  const saved = { ...process.env };
  Object.assign(process.env, { TOLLGATE_ADMIN_TOKEN: 'manifest-admin-token-0123456789', UPSTREAM_API_KEY: 'b', REDIS_PASSWORD: 'c' });
  try {
    return await loadConfigFile(file);
  } catch (err) {
    throw new Error(`ConfigMap ${configMap}: ${err instanceof ConfigError ? err.problems.join('; ') : String(err)}`);
  } finally {
    for (const k of ['TOLLGATE_ADMIN_TOKEN', 'UPSTREAM_API_KEY', 'REDIS_PASSWORD']) if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k];
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Tollgate's container in each workload: its command, config mount, probes, drain within the grace period. */
async function tollgateProblems(objs: any[]): Promise<string[]> {
  const out: string[] = [];
  for (const w of objs.filter((o) => WORKLOADS.has(o.kind))) {
    const pod = w.spec.template.spec;
    const c = pod.containers.find(isTollgate);
    if (c === undefined) continue;
    const at = `${w.kind}/${w.metadata.name} container tollgate`;
    if (JSON.stringify(c.args) !== '["serve","--config","/etc/tollgate/tollgate.yaml"]') out.push(`${at}: args are not serve --config /etc/tollgate/tollgate.yaml`);
    const mount = c.volumeMounts?.find((m: any) => m.mountPath === '/etc/tollgate');
    const volume = pod.volumes?.find((v: any) => v.name === mount?.name);
    if (mount?.readOnly !== true || volume?.configMap === undefined) {
      out.push(`${at}: /etc/tollgate is not a read-only ConfigMap volume`);
      continue;
    }
    const config = await tollgateConfig(objs, volume.configMap.name);
    const port = c.ports?.find((p: any) => p.name === 'http');
    if (port?.containerPort !== config.server.port) out.push(`${at}: port http is not server.port ${config.server.port}`);
    if (config.server.host !== '0.0.0.0') out.push(`${at}: server.host is not 0.0.0.0`);
    const probe = (p: any, path: string, what: string) => {
      if (p?.httpGet?.path !== path || p?.httpGet?.port !== 'http') out.push(`${at}: ${what} is not GET ${path} on port http`);
    };
    probe(c.livenessProbe, '/healthz', 'livenessProbe');
    probe(c.readinessProbe, '/readyz', 'readinessProbe');
    probe(c.startupProbe, '/healthz', 'startupProbe');
    const grace = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
    const needed = preStopSeconds(c) * 1000 + config.server.drain_timeout_ms;
    if (grace <= needed) out.push(`${at}: terminationGracePeriodSeconds (${grace} ms) is not above preStop + drain_timeout_ms (${needed} ms)`);
    if (config.store.kind === 'memory') {
      const state = c.volumeMounts?.find((m: any) => m.mountPath === config.store.path);
      if (state === undefined || state.readOnly === true) out.push(`${at}: store.path ${config.store.path} is not a writable volume`);
    }
  }
  return out;
}

/** The sidecar: the model server on localhost, drained after Tollgate; the Service exposes Tollgate alone. */
async function sidecarProblems(objs: any[]): Promise<string[]> {
  const out: string[] = [];
  const d = objs.find((o) => o.kind === 'Deployment');
  const pod = d.spec.template.spec;
  const tollgate = pod.containers.find(isTollgate);
  const model = pod.containers.find((c: any) => !isTollgate(c));
  if (pod.containers.length !== 2 || tollgate === undefined) return ['the pod does not run Tollgate and one model server'];
  if (d.spec.replicas !== 1 || d.spec.strategy?.type !== 'Recreate') out.push('the memory store belongs to one pod: replicas 1, strategy Recreate');
  const args: string[] = [...(model.command ?? []), ...(model.args ?? [])];
  const flag = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  if (flag('host') !== '127.0.0.1') out.push('the model server does not listen on 127.0.0.1');
  if (model.ports !== undefined) out.push('the model server declares a port');
  const config = await tollgateConfig(objs, pod.volumes.find((v: any) => v.configMap).configMap.name);
  const upstream = Object.values<any>(config.providers)[0];
  if (upstream.base_url !== `http://127.0.0.1:${flag('port')}/v1`) out.push(`Tollgate's provider is not the model server on 127.0.0.1:${flag('port')}`);
  const drained = preStopSeconds(tollgate) + config.server.drain_timeout_ms / 1000;
  if (preStopSeconds(model) < drained) out.push(`the model server's preStop (${preStopSeconds(model)} s) ends before Tollgate's drain (${drained} s)`);
  if (pod.terminationGracePeriodSeconds <= preStopSeconds(model)) out.push('terminationGracePeriodSeconds is not above the model server\'s preStop');
  const services = objs.filter((o) => o.kind === 'Service');
  if (services.length !== 1) out.push('not exactly one Service');
  for (const s of services) {
    if (!matches(s.spec.selector, d.spec.template.metadata.labels)) out.push(`Service ${s.metadata.name} does not select the pod`);
    for (const p of s.spec.ports) {
      const target = tollgate.ports.find((tp: any) => tp.name === p.targetPort || tp.containerPort === p.targetPort);
      if (target === undefined) out.push(`Service ${s.metadata.name} port ${p.port} does not target Tollgate`);
    }
  }
  return out;
}

/** The standalone layout: replicas with a PDB, Redis as the store, the fleet found in its headless Service's records (discover). */
async function standaloneProblems(objs: any[]): Promise<string[]> {
  const out: string[] = [];
  const byKind = (kind: string) => objs.filter((o) => o.kind === kind);
  const gw = byKind('Deployment').find((o) => o.spec.template.spec.containers.some(isTollgate));
  const podLabels = gw.spec.template.metadata.labels;
  if (!(gw.spec.replicas >= 2)) out.push('Tollgate has fewer than 2 replicas');
  if (gw.spec.strategy?.rollingUpdate?.maxUnavailable !== 0) out.push('a rollout may take a replica down before its successor is ready');
  const pdb = byKind('PodDisruptionBudget').find((p) => matches(p.spec.selector.matchLabels, podLabels));
  if (pdb === undefined || !(pdb.spec.minAvailable >= 1 && pdb.spec.minAvailable < gw.spec.replicas)) out.push('no PodDisruptionBudget keeping 1 to replicas-1 Tollgate pods');
  const config = await tollgateConfig(objs, gw.spec.template.spec.volumes.find((v: any) => v.configMap).configMap.name);
  if (config.store.kind !== 'redis') out.push('the store is not redis');
  const redisHost = new URL(config.store.url).hostname;
  const redisService = byKind('Service').find((s) => s.metadata.name === redisHost);
  const redis = byKind('StatefulSet').find((s) => redisService !== undefined && matches(redisService.spec.selector, s.spec.template.metadata.labels));
  if (redis === undefined) out.push(`store.url's host ${redisHost} is not a Service in front of the Redis StatefulSet`);
  const fleet = byKind('StatefulSet').find((s) => s !== redis);
  const headless = byKind('Service').find((s) => s.spec.clusterIP === 'None');
  if (headless === undefined || fleet === undefined || fleet.spec.serviceName !== headless.metadata.name || !matches(headless.spec.selector, fleet.spec.template.metadata.labels)) {
    out.push('the fleet is not a StatefulSet governed by a headless Service');
  } else {
    const port = fleet.spec.template.spec.containers[0].ports[0].containerPort;
    const provider = Object.values<any>(config.providers)[0];
    // The Service's fully qualified name (resolve4 applies no search domains), in the pod's namespace.
    const expected = `${headless.metadata.name}.default.svc.cluster.local`;
    const d = provider.discover;
    if (d?.dns !== expected || d?.port !== port) out.push(`the provider does not discover ${expected} port ${port}: ${JSON.stringify(d)}`);
    const env = gw.spec.template.spec.containers.find(isTollgate).env ?? [];
    if (!env.some((e: any) => e.name === 'POD_NAMESPACE' && e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace')) out.push('POD_NAMESPACE is not the pod\'s namespace');
  }
  for (const guarded of [fleet, redis]) {
    if (guarded === undefined) continue;
    const policy = byKind('NetworkPolicy').find((p) => matches(p.spec.podSelector.matchLabels, guarded.spec.template.metadata.labels));
    const from = policy?.spec.ingress?.flatMap((r: any) => r.from ?? []) ?? [];
    if (from.length === 0 || !from.every((f: any) => f.podSelector !== undefined && matches(f.podSelector.matchLabels, podLabels))) {
      out.push(`${guarded.metadata.name}: no NetworkPolicy admitting Tollgate's pods alone`);
    }
  }
  return out;
}

/** Every secretKeyRef names secret.yaml's Secret and one of its keys; its values are empty (safe as they are). */
function secretProblems(secret: any, objs: any[]): string[] {
  const out: string[] = [];
  for (const w of objs.filter((o) => WORKLOADS.has(o.kind))) {
    for (const c of containersOf(w.spec.template.spec)) {
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (ref !== undefined && (ref.name !== secret.metadata.name || !(ref.key in secret.stringData))) out.push(`${w.metadata.name}/${c.name}: ${e.name} refers to ${ref.name}.${ref.key}, not in secret.yaml`);
      }
    }
  }
  for (const [k, v] of Object.entries(secret.stringData)) if (v !== '') out.push(`secret.yaml: ${k} holds a value`);
  return out;
}

// ---- the tests ------------------------------------------------------------------------------

t.test('every document is a valid Kubernetes 1.33 object', async (t) => {
  const docs = all();
  t.strictSame(docs.map((d) => d.obj.kind).sort(), [
    'ConfigMap', 'ConfigMap', 'Deployment', 'Deployment', 'NetworkPolicy', 'NetworkPolicy', 'PersistentVolumeClaim', 'PersistentVolumeClaim',
    'PodDisruptionBudget', 'PodDisruptionBudget', 'Secret', 'Service', 'Service', 'Service', 'Service', 'StatefulSet', 'StatefulSet',
  ]);
  t.strictSame(await schemaProblems(docs), []);
  t.strictSame(unknownFields(docs), [], 'no field the schemas do not know');

  // A wrong type is the schema's to find; a misspelt field, the types'. One problem per document.
  const wrongType = structuredClone(docs.find((d) => d.obj.kind === 'Deployment')!);
  wrongType.obj.spec.template.spec.containers[0].securityContext.runAsUser = '1000';
  t.match(await schemaProblems([wrongType]), [/^sidecar\.yaml#3 Deployment\/tollgate-sidecar: .*runAsUser must be integer/]);
  const misspelt = structuredClone(docs.filter((d) => d.obj.kind === 'Deployment'));
  misspelt[0]!.obj.spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem = true;
  misspelt[1]!.obj.spec.template.spec.terminationGracePeriodSecond = 45;
  t.match(unknownFields(misspelt), [
    /^sidecar\.yaml#3 Deployment\/tollgate-sidecar: .*'"readOnlyRootFileSystem"' does not exist in type 'ISecurityContext'/,
    /^standalone\.yaml#1 Deployment\/tollgate: .*'"terminationGracePeriodSecond"' does not exist in type 'IPodSpec'/,
  ]);
  t.match(await schemaProblems([{ file: 'x.yaml', index: 0, obj: { apiVersion: 'apps/v1', kind: 'Deploymnt', metadata: { name: 'x' } } }]), [/no schema for apps\/v1 Deploymnt/]);
});

t.test('every pod and container is restricted, probed and sized', async (t) => {
  for (const file of ['sidecar.yaml', 'standalone.yaml']) t.strictSame(podProblems(layout(file)), [], file);

  const objs = layout('sidecar.yaml');
  const pod = objs.find((o) => o.kind === 'Deployment').spec.template.spec;
  const [tollgate, model] = pod.containers;
  delete tollgate.securityContext.readOnlyRootFilesystem;
  model.securityContext.capabilities = { add: ['NET_ADMIN'] };
  delete model.readinessProbe;
  delete tollgate.resources.limits;
  model.image = 'docker.io/vllm/vllm-openai:latest';
  pod.enableServiceLinks = true;
  t.strictSame(podProblems(objs).sort(), [
    'Deployment/tollgate-sidecar container model-server: capabilities are not drop [ALL] with none added',
    'Deployment/tollgate-sidecar container model-server: image docker.io/vllm/vllm-openai:latest is not pinned to a tag or digest',
    'Deployment/tollgate-sidecar container model-server: no readinessProbe',
    'Deployment/tollgate-sidecar container tollgate: no memory limit',
    'Deployment/tollgate-sidecar container tollgate: readOnlyRootFilesystem is not true',
    'Deployment/tollgate-sidecar: enableServiceLinks is not false',
  ]);
});

t.test('Tollgate: its config checks, its probes, and its drain fits in the grace period', async (t) => {
  for (const file of ['sidecar.yaml', 'standalone.yaml']) t.strictSame(await tollgateProblems(layout(file)), [], file);

  const objs = layout('standalone.yaml');
  const pod = objs.find((o) => o.kind === 'Deployment').spec.template.spec;
  pod.terminationGracePeriodSeconds = 30;
  pod.containers[0].readinessProbe.httpGet.path = '/healthz';
  t.strictSame(await tollgateProblems(objs), [
    'Deployment/tollgate container tollgate: readinessProbe is not GET /readyz on port http',
    'Deployment/tollgate container tollgate: terminationGracePeriodSeconds (30000 ms) is not above preStop + drain_timeout_ms (35000 ms)',
  ]);
  const cm = objs.find((o) => o.kind === 'ConfigMap');
  cm.data['tollgate.yaml'] = cm.data['tollgate.yaml'].replace('drain_timeout_ms:', 'drain_timeout:');
  await t.rejects(tollgateProblems(objs), /server\.drain_timeout: unknown key/, 'the ConfigMap goes through the loader');
});

t.test('the sidecar layout: the model server on localhost, drained after Tollgate, the Service on Tollgate alone', async (t) => {
  t.strictSame(await sidecarProblems(layout('sidecar.yaml')), []);

  const objs = layout('sidecar.yaml');
  const pod = objs.find((o) => o.kind === 'Deployment').spec.template.spec;
  pod.containers[1].args = pod.containers[1].args.map((a: string) => a.replace('--host=127.0.0.1', '--host=0.0.0.0'));
  pod.containers[1].lifecycle.preStop.exec.command = ['sleep', '5'];
  objs.find((o) => o.kind === 'Service').spec.ports.push({ name: 'vllm', port: 8000, targetPort: 8000 });
  t.strictSame(await sidecarProblems(objs), [
    'the model server does not listen on 127.0.0.1',
    'the model server\'s preStop (5 s) ends before Tollgate\'s drain (35 s)',
    'Service tollgate-sidecar port 8000 does not target Tollgate',
  ]);
});

t.test('the standalone layout: 2+ replicas with a PDB, Redis, the fleet behind a headless Service', async (t) => {
  t.strictSame(await standaloneProblems(layout('standalone.yaml')), []);

  const objs = layout('standalone.yaml');
  objs.find((o) => o.kind === 'Deployment').spec.replicas = 1;
  objs.find((o) => o.kind === 'StatefulSet' && o.metadata.name === 'vllm').spec.replicas = 3;
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'tollgate');
  cm.data['tollgate.yaml'] = cm.data['tollgate.yaml'].replace('dns: vllm-fleet.', 'dns: vllm-other.');
  objs.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'tollgate-redis').spec.ingress = [{}];
  t.strictSame(await standaloneProblems(objs), [
    'Tollgate has fewer than 2 replicas',
    'no PodDisruptionBudget keeping 1 to replicas-1 Tollgate pods',
    'the provider does not discover vllm-fleet.default.svc.cluster.local port 8000: ' +
      '{"dns":"vllm-other.default.svc.cluster.local","port":8000,"refresh_ms":5000,"resolver":null}',
    'tollgate-redis: no NetworkPolicy admitting Tollgate\'s pods alone',
  ]);
});

t.test('the Secret: every reference resolves, and its values are empty until the operator fills them', async (t) => {
  const [secret] = layout('secret.yaml');
  for (const file of ['sidecar.yaml', 'standalone.yaml']) t.strictSame(secretProblems(secret, layout(file)), [], file);
  const objs = layout('sidecar.yaml');
  objs.find((o) => o.kind === 'Deployment').spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.key = 'admin_token';
  t.strictSame(secretProblems({ ...secret, stringData: { ...secret.stringData, 'admin-token': 'hunter2' } }, objs), [
    'tollgate-sidecar/tollgate: TOLLGATE_ADMIN_TOKEN refers to tollgate.admin_token, not in secret.yaml',
    'secret.yaml: admin-token holds a value',
  ]);
});

t.test('the image\'s default config (config/container.yaml) loads, on every interface, its store in the state volume', async (t) => {
  const config = await loadConfigFile(join(ROOT, 'config/container.yaml'));
  t.equal(config.server.host, '0.0.0.0');
  t.equal(config.server.port, 8080, 'the port the Containerfile exposes and its HEALTHCHECK calls');
  t.match(config.store, { kind: 'memory', path: '/var/lib/tollgate' });
  const containerfile = readFileSync(join(ROOT, 'Containerfile'), 'utf8');
  t.match(containerfile, /^EXPOSE 8080$/m);
  t.match(containerfile, /^COPY config\/container\.yaml \/etc\/tollgate\/tollgate\.yaml$/m);
  t.match(containerfile, /http:\/\/127\.0\.0\.1:8080\/healthz/);
});
