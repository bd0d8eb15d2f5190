// What depends only on the UTC day: computed once a day, not on every request that asks.

export const DAY_MS = 86_400_000;

/**
 * `compute`, remembered for the UTC day of the last moment it was asked for; a moment of
 * another day (or not finite) computes afresh. Callers get the one remembered value: copy it
 * before changing it.
 */
export function perUtcDay<T>(compute: (now: number) => T): (now: number) => T {
  let dayStart = Number.NaN;
  let value: T | undefined;
  return (now) => {
    if (now >= dayStart && now < dayStart + DAY_MS) return value!;
    const fresh = compute(now);
    if (Number.isFinite(now)) {
      dayStart = now - (((now % DAY_MS) + DAY_MS) % DAY_MS);
      value = fresh;
    }
    return fresh;
  };
}
