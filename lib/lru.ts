// Options bounding an lru-cache LRUCache by entry count without paying for the bound up front.
// With `max`, lru-cache allocates its arrays for all `max` entries when the cache is made (about
// 2 MB for 50,000 entries with a TTL), whether or not they are ever used: five such caches were
// a tenth of an idle gateway's memory. Bounding by `maxSize` at one unit per entry evicts the
// same way and lets the arrays grow with use.

const ONE = (): number => 1;

export function entryBound(entries: number): { maxSize: number; sizeCalculation: () => number } {
  return { maxSize: entries, sizeCalculation: ONE };
}
