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
/**
 * The edges the kinds above never reach, where the session's deadline and the frame limit live,
 * drawn from a stream of their own (a seed's other faults stay as they were): a stall inside a
 * client's handshake, then its link silenced; a follower lagging behind the leader with the client
 * on it; a server stopped and started again (maybe with a lower maxSessionTimeout, which a client
 * re-attaching there negotiates), then that client's link silenced; a foreign session's flood of
 * queued nodes that makes the lock's listing larger than 1 MiB. Which ones depend on the server:
 * a restart needs one of the run's own, a lagging follower an ensemble.
 */
export const EDGE_FAULT_KINDS = /** @type {const} */ (['handshake-stall', 'reply-flood', 'server-restart', 'follower-lag']);
/** Faults that hit no one client. */
export const UNTARGETED = ['foreign-delete', 'foreign-set', 'stall', ...SERVER_FAULT_KINDS, 'reply-flood'];

/**
 * @typedef {typeof FAULT_KINDS[number] | typeof SERVER_FAULT_KINDS[number] | typeof EDGE_FAULT_KINDS[number]} FaultKind
 * @typedef {'shared' | 'standalone' | 'ensemble'} ServerKind the run's ZooKeeper: one it must not
 *   restart ('shared': the test suite's, or --zk), a standalone server of its own, or a 3-server
 *   ensemble of its own with forwarders between the servers
 * @typedef {'link' | 'touches'} StallCut what goes silent `silenceAfterMs` after the client's
 *   ConnectResponse was passed on: `link`, the client's link; `touches` (ensemble: the client is
 *   on a follower), what that follower sends the leader (its acks and the session touches it
 *   reports), while the leader's commits still reach it
 * @typedef {{ holdMs: number, newSession: boolean, silenceAfterMs: number, cut: StallCut }} HandshakeStall
 *   the ConnectResponse of the client's next link (a re-attach, or a new session when
 *   `newSession`) reaches it `holdMs` late; then the `cut`, for the fault's `ms`
 * @typedef {{
 *   lagMs: number, way: 'both' | 'to-follower' | 'from-follower', newSession: boolean, cut: 'none' | 'isolate' | 'touches', cutMs: number,
 * }} FollowerLag a follower's quorum link to the leader delays what passes (`way`) by `lagMs` for
 *   the fault's `ms`, with the client moved onto that follower (with `newSession`, a new session
 *   of its: its createSession's answer lags too); then for `cutMs` the follower `isolate`d, or
 *   (`touches`) nothing more from it to the leader (with a new session: a few ms after its
 *   ConnectResponse reached the client; else once the lag's time is over)
 * @typedef {{
 *   server: 'only' | 'leader' | 'follower', downMs: number, maxSessionTimeoutMs: number | undefined, silenceMs: number,
 * }} ServerRestart a clean stop of that server, `downMs`, then a start (with `maxSessionTimeoutMs`:
 *   that bound in its config from then on); once the client re-attached there, its link is
 *   silenced for `silenceMs` (0: not)
 * @typedef {{ nodes: number }} ReplyFlood `nodes` queued nodes (names as long as Curator's) under
 *   one of the lock's parents from a foreign session, for the fault's `ms`, then removed
 * @typedef {{
 *   at: number, kind: FaultKind, client: number, target: 'holder' | 'waiter' | 'drawn', ms: number, pickLowest: boolean,
 *   stall?: HandshakeStall, lag?: FollowerLag, restart?: ServerRestart, flood?: ReplyFlood,
 * }} Fault
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
 * Draws a schedule. `server` (default 'shared') decides which server faults may come;
 * `edgeFaultsPerSecond` (default 0.3, at least one a schedule; 0: none) how many EDGE_FAULT_KINDS.
 * @param {number} seed
 * @param {{
 *   durationMs?: number, sessionTimeoutMs?: number, faultsPerSecond?: number, recipe?: string, server?: ServerKind,
 *   edgeFaultsPerSecond?: number,
 * }} [limits]
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
    const kind = limits.server === 'ensemble' && chance(0.3) ? pick(SERVER_FAULT_KINDS) : pick(FAULT_KINDS);
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
  faults.push(...drawEdgeFaults(seed, { durationMs, sessionTimeoutMs, clients, server: limits.server ?? 'shared', perSecond: limits.edgeFaultsPerSecond ?? 0.3 }));
  faults.sort((a, b) => a.at - b.at);
  return { seed, recipe, options, clients, callers, sessionTimeoutMs, durationMs, holdMs, waitMs, shutdownGraceMs: between(0, 300), faults };
}

/**
 * The EDGE_FAULT_KINDS of a schedule, from a stream of their own.
 * @param {number} seed
 * @param {{ durationMs: number, sessionTimeoutMs: number, clients: number, server: ServerKind, perSecond: number }} limits
 * @returns {Fault[]}
 */
function drawEdgeFaults(seed, { durationMs, sessionTimeoutMs: t, clients, server, perSecond }) {
  if (!(perSecond > 0)) return [];
  const random = prng(seed ^ 0xed6e5eed);
  const pick = (/** @type {readonly any[]} */ items) => items[Math.floor(random() * items.length)];
  const between = (/** @type {number} */ lo, /** @type {number} */ hi) => Math.round(lo + random() * (hi - lo));
  const chance = (/** @type {number} */ p) => random() < p;
  const kinds = EDGE_FAULT_KINDS.filter((k) => (k === 'server-restart' ? server !== 'shared' : k === 'follower-lag' ? server === 'ensemble' : true));
  /** Shorter than the session timeout (the session survives) or longer (it expires). */
  const silence = () => (chance(0.5) ? between(200, t * 0.6) : between(t * 1.05, t * 1.6));
  /** @type {Fault[]} */
  const faults = [];
  const count = Math.max(1, Math.round((durationMs / 1000) * perSecond));
  for (let i = 0; i < count; i++) {
    /** @type {FaultKind} */
    const kind = pick(kinds);
    /** @type {Fault} */
    const f = { at: between(200, durationMs - 300), kind, client: between(0, clients - 1), target: chance(0.75) ? 'holder' : 'drawn', ms: 0, pickLowest: false };
    if (kind === 'handshake-stall') {
      const cut = server === 'ensemble' && chance(0.5) ? 'touches' : 'link';
      f.stall = { holdMs: between(300, 1500), newSession: chance(0.5), silenceAfterMs: chance(0.5) ? 0 : between(5, cut === 'touches' ? 60 : 300), cut };
      f.ms = silence();
    } else if (kind === 'follower-lag') {
      // A new session's handshake must come through within a third of the timeout: commits late, acks not.
      const newSession = chance(0.4);
      const cut = pick(['none', 'isolate', 'touches']);
      f.lag = {
        lagMs: newSession ? between(300, 900) : between(300, 1500),
        way: newSession ? 'to-follower' : pick(['both', 'to-follower', 'from-follower']),
        newSession,
        cut,
        cutMs: cut === 'none' ? 0 : between(t * 0.5, t * 1.5),
      };
      f.ms = between(t * 0.5, t * 1.5);
    } else if (kind === 'server-restart') {
      // A lower bound: 1000-2000 ms on the session timeout (the schedule's clients ask 4000-6000),
      // after a short stop (a re-attach that comes later than that finds the session lost).
      const lowered = chance(0.5) ? 250 * between(4, 8) : undefined;
      f.restart = {
        server: server === 'ensemble' ? pick(['leader', 'follower']) : 'only',
        downMs: lowered ? between(0, 300) : between(0, 1500),
        maxSessionTimeoutMs: lowered,
        silenceMs: lowered || chance(0.3) ? between(t * 1.05, t * 1.6) : 0,
      };
    } else {
      // 22 000-30 000 names of 55 characters: a listing of 1.3-1.8 MB.
      f.flood = { nodes: between(22_000, 30_000) };
      f.ms = between(1000, 3000);
    }
    faults.push(f);
  }
  return faults;
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
  return s.faults.map((f) => `  +${f.at} ms ${f.kind}${UNTARGETED.includes(f.kind) ? '' : f.target === 'drawn' ? ` client ${f.client}` : ` a ${f.target} (else client ${f.client})`}${f.ms ? ` for ${f.ms} ms` : ''}${f.kind === 'foreign-delete' || f.kind === 'foreign-set' ? (f.pickLowest ? ' (lowest node)' : ' (any node)') : ''}${edgeDetail(f)}`).join('\n');
}

/** @param {Fault} f */
function edgeDetail(f) {
  const { stall, lag, restart, flood } = f;
  if (stall) return `: ConnectResponse ${stall.holdMs} ms late (${stall.newSession ? 'a new session' : 're-attach'}), then ${stall.cut === 'touches' ? "its follower's touches" : 'its link'} cut off ${stall.silenceAfterMs} ms after`;
  if (lag) return `: ${lag.lagMs} ms ${lag.way}${lag.newSession ? ', a new session on it' : ''}${lag.cut === 'isolate' ? `, then cut off for ${lag.cutMs} ms` : lag.cut === 'touches' ? `, then its touches cut off for ${lag.cutMs} ms` : ''}`;
  if (restart) return `: the ${restart.server} server, down ${restart.downMs} ms${restart.maxSessionTimeoutMs ? `, back with maxSessionTimeout ${restart.maxSessionTimeoutMs}` : ''}${restart.silenceMs ? `, then the client's link silent for ${restart.silenceMs} ms` : ''}`;
  if (flood) return `: ${flood.nodes} queued nodes`;
  return '';
}
