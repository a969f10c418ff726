// Draws one simulated world and its faults from a seed: the ensemble (standalone or three
// servers), tickTime, the session timeout asked and the servers' limits, and faults at random
// moments. Some faults wait for a moment that matters: the next handshake (a stall right after
// the ConnectRequest went out; a cut right after the session was opened or re-attached).
import { prng } from '../support/prng.mjs';

/**
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
 * ) & { at: number }} Fault
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
  const durationMs = Math.round(Math.max(10_000, 6 * granted));
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
    const kind = pick(kinds);
    switch (kind) {
      case 'stall':
        faults.push({ at, kind, ms: Math.round(between(0.05, 1.2) * granted) });
        break;
      case 'handshake-stall':
        faults.push({ at, kind, ms: Math.round(between(0.1, 1) * granted) });
        break;
      case 'silence':
        faults.push({ at, kind, server: server(), ms });
        break;
      case 'silence-after-connect':
        faults.push({ at, kind, delayMs: Math.round(between(0, 0.3) * granted), ms: Math.round(between(1, 2) * granted) });
        break;
      case 'reset':
        faults.push({ at, kind, server: server() });
        break;
      case 'latency':
        faults.push({ at, kind, server: server(), latencyMs: Math.round(between(1, 0.4 * granted)), ms });
        break;
      case 'restart': {
        const downMs = Math.round(between(0.05, 0.8) * granted);
        const limits = random() < 0.5 ? { min: minTimeoutMs, max: Math.max(minTimeoutMs, Math.round(between(2, 20) * tickMs)) } : undefined;
        faults.push({ at, kind, server: servers === 1 ? 'current' : pick(['current', 'leader', 'follower']), downMs, limits });
        break;
      }
      case 'peer-lag':
        faults.push({ at, kind, follower: follower(), direction: direction(), lagMs: Math.round(between(tickMs / 2, Math.min(3000, 0.5 * granted))), ms });
        break;
      case 'peer-cut':
        faults.push({ at, kind, follower: follower(), direction: direction(), ms });
        break;
      case 'peer-cut-after-connect':
        faults.push({ at, kind, delayMs: Math.round(between(0, 0.3) * granted), ms: Math.round(between(1, 2) * granted) });
        break;
    }
  }
  faults.sort((a, b) => a.at - b.at);
  return { seed, servers, tickMs, syncLimit: pick([2, 5]), askedTimeoutMs, minTimeoutMs, maxTimeoutMs, durationMs, faults };
}

/** One line: the world and its faults. @param {World} world */
export function describeWorld(world) {
  const { servers, tickMs, askedTimeoutMs, minTimeoutMs, maxTimeoutMs, syncLimit } = world;
  const faults = world.faults.map((f) => {
    const { at, kind, ...rest } = f;
    const args = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`);
    return `${at}ms ${kind}${args.length ? `(${args.join(' ')})` : ''}`;
  });
  return `${servers === 1 ? 'standalone' : '3 servers'}, tick ${tickMs}, syncLimit ${syncLimit}, asked ${askedTimeoutMs} (min ${minTimeoutMs}, max ${maxTimeoutMs}); ${faults.join(', ')}`;
}
