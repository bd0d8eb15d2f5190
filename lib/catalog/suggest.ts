// "Did you mean": the catalog slugs nearest to an unknown one, by edit distance.

function distance(a: string, b: string): number {
  if (a === b) return 0;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a.charCodeAt(i - 1) === b.charCodeAt(j - 1) ? 0 : 1;
      cur.push(Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

/** Up to `max` candidates, nearest first (ties keep catalog order). */
export function nearest(target: string, candidates: readonly string[], max: number): string[] {
  const t = target.slice(0, 256).toLowerCase();
  return candidates
    .map((c, i) => ({ c, i, d: distance(t, c.toLowerCase()) }))
    .sort((x, y) => x.d - y.d || x.i - y.i)
    .slice(0, max)
    .map((x) => x.c);
}
