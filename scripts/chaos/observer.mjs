// The observer: the lock nodes of this run as the leader's `dump` shows them, all run long.
import { setTimeout as sleep } from 'node:timers/promises';
import { now } from './clock.mjs';
import { ephemeralNodes, ZK } from './ensemble.mjs';
import { BASE } from './state.mjs';

/**
 * The observer: polls the leader's `dump` every 100 ms for the whole run and keeps, for every lock
 * node it ever saw, `lastSeenAt` (when the last poll that still listed it was sent: it certainly
 * existed then) and `goneAt` (when the first poll without it came back: it was certainly gone).
 * A lost signal is judged against these: the server's expiry of a session (or a release) is the
 * moment its nodes disappear.
 */
/** @type {Map<string, { session: bigint, lastSeenAt: number, goneAt?: number }>} */
export const nodeLog = new Map();
/** @type {{ polls: number, errors: number, stopped: boolean, snapshot?: { at: number, nodes: Map<string, bigint> }, done?: Promise<void> }} */
export const observer = { polls: 0, errors: 0, stopped: false, snapshot: undefined, done: undefined };
export function startObserver() {
  const live = new Set();
  let leader;
  observer.done = (async () => {
    while (!observer.stopped) {
      const sentAt = now();
      try {
        leader ??= (await ZK.leaders())[0];
        if (leader === undefined) throw new Error('no leader');
        const nodes = await ephemeralNodes(leader);
        const repliedAt = now();
        for (const [path, session] of nodes) {
          if (!path.startsWith(`${BASE}/`)) continue;
          const entry = nodeLog.get(path);
          if (entry) entry.lastSeenAt = sentAt;
          else {
            nodeLog.set(path, { session, lastSeenAt: sentAt });
            live.add(path);
          }
        }
        for (const path of live) {
          if (nodes.has(path)) continue;
          const entry = nodeLog.get(path);
          if (entry) entry.goneAt = repliedAt; // every live path has an entry
          live.delete(path);
        }
        observer.snapshot = { at: repliedAt, nodes };
        observer.polls++;
      } catch {
        observer.errors++;
        leader = undefined;
      }
      await sleep(100);
    }
  })();
}
export async function stopObserver() {
  observer.stopped = true;
  await observer.done;
}

/** The mutex queue as the observer saw it last: [{path, session}] by sequence number. */
export function mutexQueue() {
  const prefix = `${BASE}/mutex/`;
  const nodes = observer.snapshot ? [...observer.snapshot.nodes].filter(([path]) => path.startsWith(prefix) && !path.slice(prefix.length).includes('/')) : [];
  return nodes.map(([path, session]) => ({ path, session })).sort((a, b) => a.path.slice(-10).localeCompare(b.path.slice(-10)));
}
