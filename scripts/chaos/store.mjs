// The workers' data store (over the IPC channel): a fenced counter per lock, and one the leader
// election's terms write. A read or write carrying a token lower than one the store has seen is
// rejected and counted.
import { run } from './state.mjs';

export function newStore() {
  return {
    value: 0,
    maxToken: -1n,
    /** Latest acquisition time among the holders that have used the store. */
    maxAcqTouched: -Infinity,
    reads: 0,
    accepted: 0,
    rejectedReads: 0,
    rejectedWrites: 0,
    /** Accepted writes of a holder when a holder that acquired later had already used the store. */
    staleAccepted: 0,
    /** Rejections of the newest holder (its token was lower than an older holder's). */
    falseRejects: 0,
    /** Accepted writes based on a value that was no longer current. */
    lostUpdates: 0,
    lateAccepted: 0,
    lateRejected: 0,
    /** The holder whose operation the store accepted last, and those it accepted before another's. */
    lastHolder: undefined,
    superseded: new Set(),
    /**
     * Accepted operations of a holder after another holder's were accepted in between: the two
     * holders' intervals overlapped in the store's own view (whatever their tokens or clocks said).
     */
    interleaved: 0,
    /**
     * Token order: operations (reads, writes) carrying a token lower than one the store had already
     * seen. The fencing check above rejects them, so `lowerAccepted` (a real violation: a write
     * from a lower token accepted after one from a higher token) stays 0 unless that check is
     * gone; `lowerRejected` counts what would have been a violation without it (the deliberate late
     * writes of the partition and pause faults left out: they are `lateRejected`).
     */
    lowerAccepted: 0,
    lowerRejected: 0,
    /** The highest token of an accepted write (for `lowerAccepted`). */
    maxWriteToken: -1n,
  };
}
/** `kept`: the holders of the kept-node fault (faults/kept-node-delete.mjs), one counter for all its cases. */
export const store = { mutex: newStore(), rw: newStore(), leader: newStore(), kept: newStore() };

export function storeOp(m) {
  run.storeOps++;
  const s = store[m.store];
  if (m.t === 'peek') return { ok: true, value: s.value };
  const token = BigInt(m.token);
  const laterHolderActive = m.acquiredAt < s.maxAcqTouched;
  s.maxAcqTouched = Math.max(s.maxAcqTouched, m.acquiredAt);
  if (token < s.maxToken) {
    if (m.t === 'read') s.rejectedReads++;
    else s.rejectedWrites++;
    if (m.late) s.lateRejected++;
    if (!laterHolderActive) s.falseRejects++;
    if (!m.late) s.lowerRejected++;
    return { ok: false };
  }
  s.maxToken = token;
  if (m.holdId !== s.lastHolder) {
    if (s.superseded.has(m.holdId)) s.interleaved++;
    if (s.lastHolder !== undefined) s.superseded.add(s.lastHolder);
    s.lastHolder = m.holdId;
  }
  if (m.t === 'read') {
    s.reads++;
    return { ok: true, value: s.value };
  }
  if (laterHolderActive) s.staleAccepted++;
  if (token < s.maxWriteToken) s.lowerAccepted++;
  else s.maxWriteToken = token;
  if (m.expect !== s.value) s.lostUpdates++;
  s.value = m.value;
  s.accepted++;
  if (m.late) s.lateAccepted++;
  return { ok: true };
}
