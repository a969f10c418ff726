// A fault schedule drawn from a seed: a recipe (with its options), a set of clients (a session
// each, behind its own TCP proxy) with their local callers, and faults at random moments. The same
// seed draws the same schedule (replay with SCHEDULE_SEED=<seed>); what the clients then do is
// driven by ZooKeeper's timing, so a replay repeats the recipe, the options and the faults, not
// every interleaving. Only node builtins.

import { prng } from '../../support/prng.mjs';

export { prng };

export const RECIPES = /** @type {const} */ (['mutex', 'semaphore', 'read-write', 'multi-lock', 'leadership']);
/** Faults on one client (its proxy, session or engine) or on the lock's nodes, or the whole process (stall). */
export const FAULT_KINDS = /** @type {const} */ ([
  'reset-cut', 'silent-cut', 'slow-replies', 'session-kill', 'shutdown', 'foreign-delete', 'foreign-set', 'stall',
]);
/** On a 3-server ensemble only (`npm run chaos -- --schedules N --ensemble`). */
export const SERVER_FAULT_KINDS = /** @type {const} */ (['leader-kill', 'follower-kill', 'follower-isolate']);
/** Faults that hit no one client. */
export const UNTARGETED = ['foreign-delete', 'foreign-set', 'stall', ...SERVER_FAULT_KINDS];

/**
 * @typedef {typeof FAULT_KINDS[number] | typeof SERVER_FAULT_KINDS[number]} FaultKind
 * @typedef {{ at: number, kind: FaultKind, client: number, target: 'holder' | 'waiter' | 'drawn', ms: number, pickLowest: boolean }} Fault
 * @typedef {{
 *   coalesce?: boolean, retainMs?: number, releaseInBackground?: boolean, leaseMs?: number,
 *   permits?: number, multiPermits?: boolean, downgradeRatio?: number, writeRatio?: number,
 *   members?: string[], singleRatio?: number, stepDownRatio?: number,
 * }} RecipeOptions
 * @typedef {{
 *   seed: number, recipe: typeof RECIPES[number], options: RecipeOptions, clients: number, callers: number[],
 *   sessionTimeoutMs: number, durationMs: number, holdMs: [number, number], waitMs: (number | null)[],
 *   shutdownGraceMs: number, faults: Fault[],
 * }} Schedule
 */

/**
 * Draws a schedule.
 * @param {number} seed
 * @param {{ durationMs?: number, sessionTimeoutMs?: number, faultsPerSecond?: number, recipe?: string, serverFaults?: boolean }} [limits]
 * @returns {Schedule}
 */
export function generateSchedule(seed, limits = {}) {
  const random = prng(seed);
  /** @type {<T>(items: readonly T[]) => T} */
  const pick = (items) => items[Math.floor(random() * items.length)];
  const between = (/** @type {number} */ lo, /** @type {number} */ hi) => Math.round(lo + random() * (hi - lo));
  const chance = (/** @type {number} */ p) => random() < p;

  const recipe = /** @type {Schedule['recipe']} */ (limits.recipe ?? pick(RECIPES));
  const sessionTimeoutMs = limits.sessionTimeoutMs ?? 4000;
  const durationMs = limits.durationMs ?? 6000;
  /** @type {RecipeOptions} */
  const options = {};
  if (recipe === 'mutex') {
    options.coalesce = chance(0.6);
    if (options.coalesce && chance(0.5)) options.retainMs = between(20, 400);
    options.releaseInBackground = chance(0.4);
    if (chance(0.4)) options.leaseMs = between(60, 400);
  } else if (recipe === 'semaphore') {
    options.permits = between(1, 3);
    options.multiPermits = options.permits > 1 && chance(0.5);
    if (chance(0.3)) options.leaseMs = between(60, 400);
  } else if (recipe === 'read-write') {
    options.writeRatio = pick([0.3, 0.5, 0.8]);
    options.downgradeRatio = pick([0, 0.5, 1]);
    if (chance(0.3)) options.leaseMs = between(60, 400);
  } else if (recipe === 'multi-lock') {
    // Two mutexes, a read-write lock's half, a semaphore: a multi-lock of some of them, and now
    // and then a member alone.
    options.members = ['mutex-a', pick(['write', 'read', 'mutex-b']), ...(chance(0.5) ? ['semaphore'] : [])];
    options.permits = 1;
    options.singleRatio = pick([0, 0.3]);
    options.coalesce = chance(0.5);
  } else {
    options.stepDownRatio = pick([0.1, 0.3]);
  }
  const clients = between(3, 5);
  const callers = Array.from({ length: clients }, () => (recipe === 'leadership' ? 1 : between(1, 3)));
  const holdMs = /** @type {[number, number]} */ (pick([[2, 20], [5, 80], [20, 300]]));
  const waitMs = pick([[0, 200, 1500, null], [500, 3000], [0, 50, 800]]);

  /** @type {Fault[]} */
  const faults = [];
  const count = Math.max(2, Math.round((durationMs / 1000) * (limits.faultsPerSecond ?? 1.2)));
  for (let i = 0; i < count; i++) {
    const at = between(200, durationMs - 300);
    /** @type {FaultKind} */
    const kind = limits.serverFaults && chance(0.3) ? pick(SERVER_FAULT_KINDS) : pick(FAULT_KINDS);
    const client = between(0, clients - 1);
    let ms = 0;
    if (kind === 'reset-cut' || kind === 'silent-cut') {
      // Some shorter than the session timeout (the session survives), some longer (it expires).
      ms = chance(0.5) ? between(200, sessionTimeoutMs * 0.6) : between(sessionTimeoutMs * 1.05, sessionTimeoutMs * 1.6);
    } else if (kind === 'slow-replies') ms = between(300, 2000);
    else if (kind === 'session-kill') ms = between(200, 1500);
    else if (kind === 'shutdown') ms = between(100, 1500);
    else if (kind === 'leader-kill' || kind === 'follower-kill') ms = between(500, 3000);
    else if (kind === 'follower-isolate') ms = between(sessionTimeoutMs * 0.5, sessionTimeoutMs * 1.5);
    else if (kind === 'stall') ms = chance(0.85) ? between(50, 600) : between(sessionTimeoutMs * 0.5, sessionTimeoutMs * 0.9);
    // Which client: one holding a lock at that moment, one waiting, or the drawn one (resolved
    // when the fault comes; a client already under a fault is passed over).
    const roll = random();
    const target = roll < 0.5 ? 'holder' : roll < 0.7 ? 'waiter' : 'drawn';
    faults.push({ at, kind, client, target, ms, pickLowest: chance(0.7) });
  }
  faults.sort((a, b) => a.at - b.at);
  return { seed, recipe, options, clients, callers, sessionTimeoutMs, durationMs, holdMs, waitMs, shutdownGraceMs: between(0, 300), faults };
}

/** One line naming what was drawn. @param {Schedule} s */
export function describeSchedule(s) {
  const opts = Object.entries(s.options)
    .filter(([, v]) => v !== undefined && v !== false)
    .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join('+') : v}`)
    .join(' ');
  const counts = new Map();
  for (const f of s.faults) counts.set(f.kind, (counts.get(f.kind) ?? 0) + 1);
  return `${s.recipe}${opts ? ` (${opts})` : ''}, ${s.clients} clients [${s.callers.join(',')}] callers, hold ${s.holdMs.join('-')} ms, waitMs ${s.waitMs.map((w) => w ?? '∞').join('/')}, faults ${[...counts].map(([k, n]) => `${k}×${n}`).join(' ')}`;
}

/** The faults as a replayable listing. @param {Schedule} s */
export function faultListing(s) {
  return s.faults.map((f) => `  +${f.at} ms ${f.kind}${UNTARGETED.includes(f.kind) ? '' : f.target === 'drawn' ? ` client ${f.client}` : ` a ${f.target} (else client ${f.client})`}${f.ms ? ` for ${f.ms} ms` : ''}${f.kind === 'foreign-delete' || f.kind === 'foreign-set' ? (f.pickLowest ? ' (lowest node)' : ' (any node)') : ''}`).join('\n');
}
