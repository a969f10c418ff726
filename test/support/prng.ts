import { prng } from '../../scripts/support/prng.mjs';

export { prng };

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
