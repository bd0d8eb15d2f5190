// The batch section and the plan's batch_discount_percent (CONTRACT section 18): their
// defaults, and what `tollgate check` (validateConfig) says of values out of range. The
// discount's arithmetic: a line's cost less the percent, rounded up to a whole unit.

import t from 'tap';
import { validateConfig } from '../../lib/config/load.js';
import { discounted } from '../../lib/billing/meter.js';

t.test('defaults', async (t) => {
  const c = validateConfig({});
  t.same(c.batch, { max_file_bytes: 104857600, max_lines: 50000, concurrency: 8, retention_days: 30 });
  t.equal(c.plans.free!.batch_discount_percent, 0);
});

t.test('values out of range are named, all at once', async (t) => {
  const err = (() => {
    try {
      validateConfig({ batch: { concurrency: -1, max_file_bytes: 'x', max_lines: -1, retention_days: 40000 }, plans: { p: { batch_discount_percent: 101 } } });
    } catch (e) {
      return (e as Error).message;
    }
    return '';
  })();
  t.match(err, /plans\.p\.batch_discount_percent: must be an integer from 0 to 100/);
  t.match(err, /batch\.max_file_bytes: must be a positive integer/);
  t.match(err, /batch\.max_lines: must be a positive integer/);
  t.match(err, /batch\.concurrency: must be a non-negative integer/);
  t.match(err, /batch\.retention_days: must be at most 36500/);
  t.equal(validateConfig({ batch: { concurrency: 0 } }).batch.concurrency, 0, '0: an instance that runs no lines');
});

t.test('the discount rounds up to a whole unit', async (t) => {
  t.equal(discounted(26n, 30), 19n, '18.2 -> 19');
  t.equal(discounted(26n, 50), 13n, 'exact');
  t.equal(discounted(1n, 99), 1n, 'a fraction of a unit is a unit');
  t.equal(discounted(0n, 50), 0n);
  t.equal(discounted(26n, 0), 26n, 'no discount');
  t.equal(discounted(26n, 100), 0n, 'free');
  t.equal(discounted(2n ** 70n + 1n, 50), 2n ** 69n + 1n, 'exact at any magnitude');
});
