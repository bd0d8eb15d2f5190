// The Redis store's team id index, P{team:ID} = "<ms>|<account>" (lib/store/redis/teams.ts): an
// index left by a creation that stopped between its steps (no team behind it) does not keep the
// id taken for good: it is taken over at once by its own account, and by another account once it
// is old enough to be over; a fresh one of another account (a creation in flight) is respected.
// Two creations of one id racing from two accounts make one team.

import t from 'tap';
import { Redis } from 'ioredis';
import { RedisStore } from '../../../lib/store/redis/store.js';
import { defaultTeamSettings } from '../../../lib/store/types.js';
import { startRedis } from '../../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const prefix = `tg-teams-index-${process.pid}:`;
const store = await RedisStore.open({ url: redis.url, prefix });
t.teardown(() => store.close());
const raw = new Redis(redis.url);
t.teardown(() => { raw.disconnect(); });

await store.createAccount({ id: 'a', plan: 'free', balance_units: 10 });
await store.createAccount({ id: 'b', plan: 'free', balance_units: 10 });

t.test('a dangling index of the same account is taken over at once', async (t) => {
  await raw.set(`${prefix}{team:own}`, `${Date.now()}|a`);
  t.equal(await store.createTeam('a', 'own', defaultTeamSettings()), 'created');
  t.match(await store.getTeam('own'), { id: 'own', account: 'a' });
});

t.test("a fresh index of another account is a creation in flight: the id is taken", async (t) => {
  await raw.set(`${prefix}{team:fresh}`, `${Date.now()}|b`);
  t.equal(await store.createTeam('a', 'fresh', defaultTeamSettings()), 'team_exists');
  t.equal(await store.getTeam('fresh'), undefined, 'no team behind it yet');
});

t.test('an old dangling index of another account is taken over', async (t) => {
  await raw.set(`${prefix}{team:old}`, `${Date.now() - 60_000}|b`);
  t.equal(await store.createTeam('a', 'old', defaultTeamSettings()), 'created');
  t.match(await store.getTeam('old'), { account: 'a' });
  t.equal(await raw.get(`${prefix}{team:old}`).then((v) => v?.split('|')[1]), 'a');
});

t.test('one id created from two accounts at once: one team', async (t) => {
  for (let i = 0; i < 20; i++) {
    const id = `race-${i}`;
    const [x, y] = await Promise.all([store.createTeam('a', id, defaultTeamSettings()), store.createTeam('b', id, defaultTeamSettings())]);
    t.strictSame([x, y].sort(), ['created', 'team_exists'], `${id}: one created`);
    const team = await store.getTeam(id);
    const owner = x === 'created' ? 'a' : 'b';
    t.equal(team?.account, owner);
    t.strictSame((await store.listTeams(owner === 'a' ? 'b' : 'a'))!.filter((tm) => tm.id === id), [], 'the other account has none');
  }
});

t.test('a deleted team frees its index', async (t) => {
  t.equal(await store.createTeam('a', 'gone', defaultTeamSettings()), 'created');
  t.equal(await store.deleteTeam('gone'), 'deleted');
  t.equal(await raw.exists(`${prefix}{team:gone}`), 0);
  t.equal(await store.createTeam('b', 'gone', defaultTeamSettings()), 'created');
});
