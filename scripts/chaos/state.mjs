// What the workers reported (holds, lost signals, state changes, ...), waiting on it, and queries
// over it: shared by the workers' message handler, the faults and the analysis.
import { randomBytes } from 'node:crypto';
import { log, now } from './clock.mjs';

export const BASE = `/chaos/run-${randomBytes(4).toString('hex')}`;
/** @type {any[]} */
export const slots = [];
export const holds = new Map();
export const lostEvents = [];
export const stateEvents = [];
export const errorsByType = new Map();
export const fatals = [];
export const warnings = [];
export const lateWrites = [];
export const crashes = [];
/** SIGSTOP windows: {pid, from, to}. */
export const pauses = [];
/** Workers that did not finish within 30 s of being told to stop. */
export const stuckAtStop = [];
export const faults = [];
export const acquisitions = { mutex: 0, sem: 0, 'rw-read': 0, 'rw-write': 0 };
/** `stopping`: no new worker replaces one that exits; `cleanedUp`: the ensemble and the proxies are gone. */
export const run = { storeOps: 0, stopping: false, cleanedUp: false };

// Waiters re-check their condition on every worker message and a few times per second.
export const conditionWaiters = new Set();
export function poke() {
  for (const w of [...conditionWaiters]) w();
}
setInterval(poke, 100).unref();
export function until(what, predicate, timeoutMs) {
  return new Promise((resolve) => {
    const deadline = now() + timeoutMs;
    const check = () => {
      let value;
      try {
        value = predicate();
      } catch {
        value = undefined;
      }
      if (value !== undefined && value !== false) {
        conditionWaiters.delete(check);
        resolve(value);
      } else if (now() > deadline) {
        conditionWaiters.delete(check);
        if (what) log(`gave up waiting for ${what} after ${timeoutMs} ms`);
        resolve(undefined);
      }
    };
    conditionWaiters.add(check);
    check();
  });
}

// Queries over what the workers reported.

export const liveSlots = () => slots.filter((s) => !s.exited);
/** The live slot whose process leads the election now (its term is open), if any. */
export function leaderSlot() {
  const term = [...holds.values()].find((h) => h.lock === 'leader' && h.end === 'open');
  return term && liveSlots().find((s) => s.pid === term.pid);
}
export const mutexHolds = () => [...holds.values()].filter((h) => h.lock === 'mutex');
/**
 * The first hold of `lock` acquired after `after`, not the excluded one.
 * @param {number} after
 * @param {{ lock?: string, excludeHoldId?: string, excludePid?: number }} [filter]
 */
export function firstAcquisition(after, { lock = 'mutex', excludeHoldId, excludePid } = {}) {
  let best;
  for (const h of holds.values()) {
    if (h.lock !== lock || h.acquiredAt <= after || h.holdId === excludeHoldId || h.pid === excludePid) continue;
    if (!best || h.acquiredAt < best.acquiredAt) best = h;
  }
  return best;
}
export const firstLost = (/** @type {number} */ after, /** @type {(event: any) => boolean} */ filter = () => true) =>
  lostEvents.filter((e) => e.at > after && filter(e)).sort((a, b) => a.at - b.at)[0];
export const suspendedSince = (after) => new Set(stateEvents.filter((e) => e.at > after && e.state === 'suspended').map((e) => `${e.slot}`));
