// The checks over everything the workers reported: overlapping holders, the library's promise
// (nobody else holds while a lease's signal has not aborted; a leader term counts as a hold of
// lock 'leader'), lost signals against the server's end of each hold, fencing token order.
import { rel } from './clock.mjs';
import { nodeLog } from './observer.mjs';
import { opts } from './options.mjs';
import { faults, holds, lostEvents, pauses } from './state.mjs';

// A holder cannot be blamed for holding on while its process was stopped past its session
// timeout (it finds out only after SIGCONT): that is what fencing tokens are for.
export const pausedThrough = (h) => pauses.some((p) => p.pid === h.pid && h.acquiredAt < p.to && (h.endAt ?? Infinity) > p.from);
export const excused = (h) => h.end === 'lost' || h.end === 'killed' || h.end === 'open' || pausedThrough(h);

export function overlaps() {
  const closed = [...holds.values()].map((h) => ({ ...h, endAt: h.endAt ?? Infinity }));
  const byStart = (list) => [...list].sort((a, b) => a.acquiredAt - b.acquiredAt);
  const result = { mutex: { explained: 0, unexplained: 0, examples: [] }, rw: { explained: 0, unexplained: 0, examples: [] }, sem: { explained: 0, unexplained: 0, maxConcurrent: 0, maxConcurrentHealthy: 0, examples: [] } };
  const note = (kind, a, b) => {
    const bucket = result[kind];
    if (excused(a) || excused(b)) bucket.explained++;
    else {
      bucket.unexplained++;
      if (bucket.examples.length < 5) bucket.examples.push({ a: pick(a), b: pick(b) });
    }
  };
  const pick = (h) => ({ holdId: h.holdId, lock: h.lock, token: h.token, acquiredAt: rel(h.acquiredAt), endAt: rel(h.endAt), end: h.end });
  // mutex: no two intervals overlap
  const mutex = byStart(closed.filter((h) => h.lock === 'mutex'));
  for (let i = 0; i < mutex.length; i++) {
    for (let j = i + 1; j < mutex.length && mutex[j].acquiredAt < mutex[i].endAt; j++) note('mutex', mutex[i], mutex[j]);
  }
  // rw: a writer overlaps nothing
  const rw = byStart(closed.filter((h) => h.lock === 'rw-read' || h.lock === 'rw-write'));
  for (let i = 0; i < rw.length; i++) {
    for (let j = i + 1; j < rw.length && rw[j].acquiredAt < rw[i].endAt; j++) {
      if (rw[i].lock === 'rw-write' || rw[j].lock === 'rw-write') note('rw', rw[i], rw[j]);
    }
  }
  // semaphore: at most `permits` at once
  const sem = byStart(closed.filter((h) => h.lock === 'sem'));
  const active = [];
  for (const h of sem) {
    for (let k = active.length - 1; k >= 0; k--) if (active[k].endAt <= h.acquiredAt) active.splice(k, 1);
    if (active.length >= opts.permits) note('sem', active.find(excused) ?? active[0], h);
    active.push(h);
    result.sem.maxConcurrent = Math.max(result.sem.maxConcurrent, active.length);
    result.sem.maxConcurrentHealthy = Math.max(result.sem.maxConcurrentHealthy, active.filter((a) => !excused(a)).length);
  }
  return result;
}

/** Holders that exclude each other pairwise (the semaphore is counted by permits instead). */
export function conflicting(a, b) {
  if (a.lock === 'mutex' || a.lock === 'notify' || a.lock === 'leader') return b.lock === a.lock;
  // The kept-node fault's locks: one per case (its lockPath).
  if (a.lock === 'kept') return b.lock === 'kept' && a.lockPath === b.lockPath;
  if (a.lock === 'rw-write') return b.lock === 'rw-write' || b.lock === 'rw-read';
  if (a.lock === 'rw-read') return b.lock === 'rw-write';
  return false;
}
/**
 * Excused from the promise: a holder SIGSTOPped through its hold (it cannot hear anything until
 * SIGCONT; fencing is what protects the data then), and the holder whose node the foreign client
 * deleted (the deletion is the server's word: it reaches that holder and the next one at once).
 */
export const exemptFromPromise = (h) => (pausedThrough(h) ? 'SIGSTOPped' : h.foreignDeleted ? 'node deleted by the foreign client' : undefined);

/**
 * The promise itself, from each holder's own view: the time two holders overlapped while neither
 * had been told (each one's interval is [acquire() resolved, its signal aborted | it stopped using
 * the lock | its process died]), and for the semaphore the time more than `permits` such holders
 * held at once. Excused holders (above) are left out. Must be 0.
 */
export function unawareOverlap() {
  const intervals = [...holds.values()].filter((h) => !exemptFromPromise(h)).map((h) => ({ ...h, endAt: h.endAt ?? Infinity }));
  const byLock = { mutex: { pairs: 0, ms: 0 }, rw: { pairs: 0, ms: 0 }, sem: { pairs: 0, ms: 0 }, leader: { pairs: 0, ms: 0 } };
  const examples = [];
  const pick = (h) => ({ holdId: h.holdId, lock: h.lock, acquiredAt: rel(h.acquiredAt), endAt: rel(h.endAt), end: h.end, lostAt: rel(h.lostAt) });
  const sorted = intervals.filter((h) => h.lock !== 'sem').sort((a, b) => a.acquiredAt - b.acquiredAt);
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length && sorted[j].acquiredAt < sorted[i].endAt; j++) {
      const [a, b] = [sorted[i], sorted[j]];
      if (!conflicting(a, b)) continue;
      const overlap = Math.min(a.endAt, b.endAt) - b.acquiredAt;
      if (overlap <= 0) continue;
      const bucket = byLock[a.lock === 'mutex' || a.lock === 'notify' || a.lock === 'kept' ? 'mutex' : a.lock === 'leader' ? 'leader' : 'rw'];
      bucket.pairs++;
      bucket.ms += overlap;
      if (examples.length < 5) examples.push({ a: pick(a), b: pick(b), ms: round1(overlap) });
    }
  }
  // Semaphore: sweep over starts and ends (an end before a start at the same instant).
  const edges = intervals.filter((h) => h.lock === 'sem').flatMap((h) => [[h.acquiredAt, 1, h], [h.endAt, -1, h]]).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let active = 0;
  let overSince;
  for (const [at, delta, h] of edges) {
    active += delta;
    if (active > opts.permits && overSince === undefined) {
      overSince = at;
      byLock.sem.pairs++;
      if (examples.length < 5) examples.push({ sem: `${active} holders at once`, from: rel(at), joined: pick(h) });
    } else if (active <= opts.permits && overSince !== undefined) {
      byLock.sem.ms += at - overSince;
      overSince = undefined;
    }
  }
  const pairs = byLock.mutex.pairs + byLock.rw.pairs + byLock.sem.pairs + byLock.leader.pairs;
  const totalMs = round1(byLock.mutex.ms + byLock.rw.ms + byLock.sem.ms + byLock.leader.ms);
  return { pairs, totalMs, byLock: Object.fromEntries(Object.entries(byLock).map(([k, v]) => [k, { pairs: v.pairs, ms: round1(v.ms) }])), examples };
}

/**
 * For each lost signal: by how much it beat the server's end of that hold, i.e. the first of
 * - the moment the holder's lock node disappeared as the observer saw it (`goneAt`: the first poll
 *   of the leader's dump without it; `lastSeenAt`: the last poll that still listed it),
 * - the moment another holder of a conflicting lock acquired (same clock, exact).
 * `marginMs` = (first of node gone, other holder) − signal: < 0 means the holder was told after
 * the server had certainly let the lock go (a failure unless excused). `atLeastMs` = (first of
 * node last seen, other holder) − signal: a sure lower bound (≤ marginMs, by the poll interval).
 */
export const round1 = (x) => Math.round(x * 10) / 10;
export function lostSignalMargins() {
  const list = [];
  for (const e of lostEvents) {
    const h = holds.get(e.holdId);
    if (!h) continue;
    const node = nodeLog.get(h.path);
    let other;
    for (const b of holds.values()) {
      if (b.holdId === h.holdId || b.acquiredAt <= h.acquiredAt || !conflicting(h, b)) continue;
      if (!other || b.acquiredAt < other.acquiredAt) other = b;
    }
    const ends = [[node?.goneAt, 'node gone'], [other?.acquiredAt, 'another holder']].filter(([t]) => t !== undefined);
    const [serverEnd, by] = ends.sort((x, y) => x[0] - y[0])[0] ?? [];
    const sure = [node?.lastSeenAt, other?.acquiredAt].filter((t) => t !== undefined);
    const fault = [...faults].reverse().find((f) => f.at <= e.at);
    list.push({
      at: rel(e.at),
      slot: e.slot,
      lock: e.lock,
      reason: e.reason,
      fault: fault?.fault ?? (e.at < (faults[0]?.at ?? Infinity) ? 'before the first fault' : '-'),
      // To 0.1 ms: a signal a fraction of a millisecond after another holder acquired is late too.
      marginMs: serverEnd === undefined ? undefined : round1(serverEnd - e.at),
      by,
      atLeastMs: sure.length ? round1(Math.min(...sure) - e.at) : undefined,
      excused: exemptFromPromise(h),
      late: serverEnd !== undefined && serverEnd < e.at,
    });
  }
  return list.sort((a, b) => a.at - b.at);
}

/**
 * Successive holders (by acquisition time) whose fencing token does not increase. Lock 'kept' (a
 * path per case of the kept-node fault) is judged per path.
 */
export function tokenInversions(lock) {
  if (lock === 'kept') {
    const paths = new Set([...holds.values()].filter((h) => h.lock === lock).map((h) => h.lockPath));
    const all = [...paths].map((path) => tokenInversionsOf([...holds.values()].filter((h) => h.lock === lock && h.lockPath === path)));
    return { count: all.reduce((n, r) => n + r.count, 0), examples: all.flatMap((r) => r.examples).slice(0, 5) };
  }
  return tokenInversionsOf([...holds.values()].filter((h) => h.lock === lock));
}
function tokenInversionsOf(holdList) {
  const list = [...holdList].sort((a, b) => a.acquiredAt - b.acquiredAt);
  const examples = [];
  let count = 0;
  for (let i = 1; i < list.length; i++) {
    if (BigInt(list[i].token) <= BigInt(list[i - 1].token)) {
      count++;
      if (examples.length < 5) examples.push({ before: list[i - 1].token, after: list[i].token, at: rel(list[i].acquiredAt) });
    }
  }
  return { count, examples };
}
