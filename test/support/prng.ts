/** A seeded PRNG (mulberry32): a failing randomized test names an input or a run it can replay. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A randomized run's generator, seeded from `envVar` when set (to replay a run) or from the clock,
 * with the seed printed so that a failing run can be replayed; `pick` chooses one of `items`.
 */
export function seededRun(envVar: string, label: string): { seed: number; random: () => number; pick: <T>(items: readonly T[]) => T } {
  const seed = Number(process.env[envVar] ?? Date.now() % 2 ** 31);
  console.log(`${label} seed: ${seed} (replay with ${envVar}=${seed})`);
  const random = prng(seed);
  return { seed, random, pick: (items) => items[Math.floor(random() * items.length)]! };
}
