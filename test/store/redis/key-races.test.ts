// A PATCH or a rotation racing a revocation never brings a key back (CONTRACT section 16), on
// the Redis store, for a key stored before per-key controls (only its digest record and id
// index: the first PATCH or rotation gives it its account-side hash). Such a key's revocation
// was on its digest record alone while it had no hash, so a hash created after the revocation
// began carried no `ra`: the PATCH answered the key, and it was listed again. The steps of the
// two stores are interleaved by holding their scripts at chosen points. Also: a PATCH racing a
// rotation announces the digests the key has after both (it announced the ones it had read).

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { keyIdOf, sha256Hex } from '../../../lib/store/digest.js';
import { RedisStore } from '../../../lib/store/redis/store.js';
import { startRedis } from '../../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const inspect = new Redis(redis.url);
t.teardown(() => inspect.disconnect());

type Script = (...args: string[]) => Promise<unknown>;

/** Runs `before` ahead of each call of `script` on the store's connection (until undone). */
function hold(store: RedisStore, script: string, before: () => Promise<void>): () => void {
  const client = store.client as unknown as Record<string, Script>;
  const original = client[script]!;
  client[script] = async (...args: string[]) => { await before(); return original.apply(client, args); };
  return () => { client[script] = original; };
}

/** Two stores sharing one prefix, an account, and a key as stored before per-key controls. */
async function setup(t: any) {
  const prefix = `tg-races-${randomUUID()}:`;
  const a = await RedisStore.open({ url: redis.url, prefix });
  const b = await RedisStore.open({ url: redis.url, prefix });
  t.teardown(async () => { await a.close(); await b.close(); });
  await a.createAccount({ id: 'acme', plan: 'free', balance_units: 100 });
  const digest = sha256Hex(`tg_legacy_${randomUUID()}`);
  const id = keyIdOf(digest);
  await inspect.set(`${prefix}{keyid:${id}}`, digest);
  await inspect.hset(`${prefix}{key:${digest}}`, 'id', id, 'account', 'acme', 'digest', digest, 'created_at', String(Date.now()));
  t.equal((await a.listKeys('acme'))?.length ?? 0, 0, 'a key without its account-side hash is not listed yet');
  t.equal((await a.getKey(id))?.revoked_at, null, 'but it is a live key');
  return { a, b, id, digest, hash: `${prefix}{acct:acme}:key:${id}` };
}

t.test('a revocation done before the PATCH creates the hash: the PATCH finds the key revoked', async (t) => {
  const { a, b, id, hash } = await setup(t);
  // The PATCH has read the key (live); the revocation runs whole before its hash is created.
  const undo = hold(a, 'tgKeyInit', async () => { undo(); t.ok(await b.revokeKey(id), 'revoked meanwhile'); });
  t.equal(await a.updateKey(id, { name: 'after' }), undefined, 'the PATCH finds no live key');
  t.ok(await inspect.hget(hash, 'ra'), 'the hash carries the revocation');
  t.strictSame(await a.listKeys('acme'), [], 'not listed');
  t.not((await a.getKey(id))?.revoked_at, null);
});

t.test('a revocation that began before the hash and ended after: the key stays revoked', async (t) => {
  const { a, b, id, hash } = await setup(t);
  // The revocation's first step finds no hash; the PATCH then creates it, and the revocation's
  // digest-record step lands only once the PATCH is about to write.
  let releaseDigestStep!: () => void;
  const digestStep = new Promise<void>((resolve) => { releaseDigestStep = resolve; });
  // Should the PATCH never reach its write, the revocation goes on after a while (a failure, not a hang).
  const fallback = setTimeout(() => releaseDigestStep(), 3000);
  t.teardown(() => clearTimeout(fallback));
  let revoking: Promise<unknown> | undefined;
  const undoRevoke = hold(b, 'tgRevokeKey', async () => { undoRevoke(); await digestStep; });
  const undoInit = hold(a, 'tgKeyInit', async () => {
    undoInit();
    let firstStepDone!: () => void;
    const firstStep = new Promise<void>((resolve) => { firstStepDone = resolve; });
    const undoFirst = hold(b, 'tgKeyRevoke', async () => { undoFirst(); firstStepDone(); });
    revoking = b.revokeKey(id);
    await firstStep;
    // Give the revocation's first script time to run (it finds no hash).
    await new Promise((resolve) => setTimeout(resolve, 50));
  });
  const undoPatch = hold(a, 'tgKeyPatch', async () => { undoPatch(); releaseDigestStep(); await revoking; });
  const patched = await a.updateKey(id, { name: 'after' });
  t.equal(patched, undefined, 'the PATCH finds no live key');
  t.ok(await revoking, 'the revocation answered the key');
  t.ok(await inspect.hget(hash, 'ra'), 'the hash carries the revocation');
  t.strictSame(await a.listKeys('acme'), [], 'not listed');
  t.not((await b.getKey(id))?.revoked_at, null);
});

t.test('a rotation racing a revocation of such a key: no new plaintext for a revoked key', async (t) => {
  const { a, b, id, hash } = await setup(t);
  const undo = hold(a, 'tgKeyInit', async () => { undo(); t.ok(await b.revokeKey(id), 'revoked meanwhile'); });
  t.equal(await a.rotateKey(id, sha256Hex('tg_new'), 'next', Date.now()), undefined, 'the rotation finds no live key');
  t.ok(await inspect.hget(hash, 'ra'), 'the hash carries the revocation');
  t.strictSame(await a.listKeys('acme'), [], 'not listed');
  t.not((await a.getKey(id))?.revoked_at, null);
});

t.test('a PATCH racing a rotation announces the digests the key has after both, and answers the key as rotated', async (t) => {
  const prefix = `tg-races-${randomUUID()}:`;
  const [a, b, c] = await Promise.all([0, 1, 2].map(() => RedisStore.open({ url: redis.url, prefix })));
  t.teardown(async () => { await a!.close(); await b!.close(); await c!.close(); });
  await a!.createAccount({ id: 'acme', plan: 'free', balance_units: 100 });
  const old = sha256Hex('tg_old_plaintext');
  const id = keyIdOf(old);
  t.ok(await a!.createKey({ id, account: 'acme', digest: old, last4: 'told' }));
  const heard: string[] = [];
  c!.onRevoke((r) => { if (r.kind === 'key-changed') heard.push(r.digest); });
  // The PATCH has read the key; the rotation lands before it writes. A gateway that met the new
  // plaintext in between holds it with the old controls: it must hear of the change.
  const fresh = sha256Hex('tg_new_plaintext');
  const undo = hold(a!, 'tgKeyInit', async () => { undo(); t.ok(await b!.rotateKey(id, fresh, 'tnew', Date.now() + 60_000)); });
  const patched = await a!.updateKey(id, { allowed_ips: ['10.0.0.0/8'] });
  t.equal(patched?.digest, fresh, 'the answer is the key as it stands: rotated');
  t.equal(patched?.last4, 'tnew');
  t.strictSame(patched?.controls.allowed_ips, ['10.0.0.0/8']);
  const deadline = Date.now() + 2000;
  while (!heard.includes(fresh) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  t.ok(heard.includes(fresh), `the new digest's change is announced (heard ${heard.length})`);
  t.ok(heard.includes(old), 'and the rotated-out one\'s');
  t.equal((await c!.keyByDigest(fresh))?.controls.allowed_ips?.[0], '10.0.0.0/8', 'the new plaintext carries the patch');
});
