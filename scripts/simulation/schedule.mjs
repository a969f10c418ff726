// Draws one simulated world and its faults from a seed: the ensemble (standalone or three
// servers), tickTime, the session timeout asked and the servers' limits, the clients (one
// process with a session of its own each) and what they do (only keep their session, or take a
// mutex in turns: its options, callers, waits and holds), and faults at random moments. Some
// faults wait for a moment that matters: a client's next handshake (a stall right after the
// ConnectRequest went out; a cut right after the session was opened or re-attached).
import { prng } from '../support/prng.mjs';

/**
 * `client`: the client (process) the fault hits, or whose current server 'current' means (default 0).
 * @typedef {(
 *   | { kind: 'stall', ms: number }
 *   | { kind: 'handshake-stall', ms: number }
 *   | { kind: 'silence', server: 'current' | number, ms: number }
 *   | { kind: 'silence-after-connect', delayMs: number, ms: number }
 *   | { kind: 'reset', server: 'current' | number }
 *   | { kind: 'latency', server: 'current' | number, latencyMs: number, ms: number }
 *   | { kind: 'peer-lag', follower: 'current' | number, direction: 'to' | 'from' | 'both', lagMs: number, ms: number }
 *   | { kind: 'peer-cut', follower: 'current' | number, direction: 'to' | 'from' | 'both', ms: number }
 *   | { kind: 'peer-cut-after-connect', delayMs: number, ms: number }
 *   | { kind: 'restart', server: 'current' | 'leader' | 'follower', downMs: number, limits?: { min: number, max: number } }
 *   | { kind: 'foreign-delete', which: 'head' | 'second' | 'last' }
 * ) & { at: number, client?: number }} Fault
 */

/**
 * A mutex taken in turns by every client's callers (Mutex options and the callers' habits).
 * @typedef {{ coalesce: boolean, retainMs: number, releaseInBackground: boolean, callers: number, waitMs: (number | null)[], holdMs: [number, number], pauseMs: [number, number] }} MutexWork
 */

/**
 * @typedef {object} World
 * @property {number} seed
 * @property {number} servers
 * @property {number} tickMs
 * @property {number} syncLimit
 * @property {number} askedTimeoutMs the client's sessionTimeoutMs
 * @property {number} minTimeoutMs
 * @property {number} maxTimeoutMs
 * @property {number} durationMs faults fall in [first connect, durationMs]; the run goes on after to let things settle
 * @property {Fault[]} faults
 * @property {number[]} [clientServers] the servers in the client's connect string (default all)
 * @property {number} [clients] processes, a session each (default 1)
 * @property {MutexWork} [mutex] what they do besides keeping their session: take a mutex in turns
 */

/** @param {number} seed @returns {World} */
export function drawWorld(seed) {
  const random = prng(seed);
  const pick = (/** @type {any[]} */ items) => items[Math.floor(random() * items.length)];
  const between = (/** @type {number} */ low, /** @type {number} */ high) => low + random() * (high - low);
  const servers = random() < 0.5 ? 1 : 3;
  const tickMs = pick([50, 100, 250, 500]);
  const askedTimeoutMs = pick([1000, 2000, 4000, 8000, 15000]);
  const minTimeoutMs = 2 * tickMs;
  const maxTimeoutMs = random() < 0.8 ? 20 * tickMs : Math.max(minTimeoutMs, Math.round(askedTimeoutMs * between(0.3, 1)));
  const granted = Math.min(maxTimeoutMs, Math.max(minTimeoutMs, askedTimeoutMs));
  const lockWorld = random() < 0.5;
  const clients = lockWorld ? 2 + Math.floor(random() * 2) : 1;
  /** @type {MutexWork | undefined} */
  const mutex = lockWorld
    ? {
        coalesce: random() < 0.5,
        retainMs: random() < 0.3 ? pick([5, 50]) : 0, // with coalesce only (see below)
        releaseInBackground: random() < 0.3,
        callers: 1 + Math.floor(random() * 2),
        waitMs: pick([[0, 200, null], [1000, 3000], [null], [0, 50, 500, 5000]]),
        holdMs: pick([[5, 50], [20, 300], [100, 800]]),
        pauseMs: pick([[0, 20], [10, 200], [100, 1000]]),
      }
    : undefined;
  // Lock worlds are costlier per virtual second (every hold is a few requests per client).
  const durationMs = Math.round(lockWorld ? Math.max(8000, 3 * granted) : Math.max(10_000, 6 * granted));
  if (mutex && !mutex.coalesce) mutex.retainMs = 0; // retainMs keeps a node for the next local holder: coalescing only
  const count = 2 + Math.floor(random() * 8);
  /** @type {Fault[]} */
  const faults = [];
  const server = () => (random() < 0.7 ? 'current' : 1 + Math.floor(random() * servers));
  const follower = () => (random() < 0.7 ? 'current' : 1 + Math.floor(random() * servers));
  const direction = () => pick(['to', 'from', 'both']);
  for (let i = 0; i < count; i++) {
    const at = Math.round(between(200, durationMs));
    const ms = Math.round(between(0.05, 1.5) * granted);
    const kinds = ['stall', 'handshake-stall', 'silence', 'silence-after-connect', 'reset', 'latency', 'restart'];
    if (servers > 1) kinds.push('peer-lag', 'peer-cut', 'peer-cut-after-connect');
    if (lockWorld) kinds.push('foreign-delete');
    const kind = pick(kinds);
    const client = Math.floor(random() * clients);
    switch (kind) {
      case 'stall':
        faults.push({ at, client, kind, ms: Math.round(between(0.05, 1.2) * granted) });
        break;
      case 'handshake-stall':
        faults.push({ at, client, kind, ms: Math.round(between(0.1, 1) * granted) });
        break;
      case 'silence':
        faults.push({ at, client, kind, server: server(), ms });
        break;
      case 'silence-after-connect':
        faults.push({ at, client, kind, delayMs: Math.round(between(0, 0.3) * granted), ms: Math.round(between(1, 2) * granted) });
        break;
      case 'reset':
        faults.push({ at, client, kind, server: server() });
        break;
      case 'latency':
        faults.push({ at, client, kind, server: server(), latencyMs: Math.round(between(1, 0.4 * granted)), ms });
        break;
      case 'restart': {
        const downMs = Math.round(between(0.05, 0.8) * granted);
        const limits = random() < 0.5 ? { min: minTimeoutMs, max: Math.max(minTimeoutMs, Math.round(between(2, 20) * tickMs)) } : undefined;
        faults.push({ at, client, kind, server: servers === 1 ? 'current' : pick(['current', 'leader', 'follower']), downMs, limits });
        break;
      }
      case 'peer-lag':
        faults.push({ at, client, kind, follower: follower(), direction: direction(), lagMs: Math.round(between(tickMs / 2, Math.min(3000, 0.5 * granted))), ms });
        break;
      case 'peer-cut':
        faults.push({ at, client, kind, follower: follower(), direction: direction(), ms });
        break;
      case 'peer-cut-after-connect':
        faults.push({ at, client, kind, delayMs: Math.round(between(0, 0.3) * granted), ms: Math.round(between(1, 2) * granted) });
        break;
      case 'foreign-delete':
        faults.push({ at, client, kind, which: pick(['head', 'second', 'last']) });
        break;
    }
  }
  faults.sort((a, b) => a.at - b.at);
  return { seed, servers, tickMs, syncLimit: pick([2, 5, 10]), askedTimeoutMs, minTimeoutMs, maxTimeoutMs, durationMs, faults, clients, mutex };
}

/** One line: the world and its faults. @param {World} world */
export function describeWorld(world) {
  const { servers, tickMs, askedTimeoutMs, minTimeoutMs, maxTimeoutMs, syncLimit, clients = 1, mutex } = world;
  const faults = world.faults.map((f) => {
    const { at, kind, ...rest } = f;
    const args = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`);
    return `${at}ms ${kind}${args.length ? `(${args.join(' ')})` : ''}`;
  });
  const work = mutex ? `, ${clients} clients on a mutex ${JSON.stringify(mutex)}` : clients > 1 ? `, ${clients} clients` : '';
  return `${servers === 1 ? 'standalone' : '3 servers'}, tick ${tickMs}, syncLimit ${syncLimit}, asked ${askedTimeoutMs} (min ${minTimeoutMs}, max ${maxTimeoutMs})${work}; ${faults.join(', ')}`;
}
