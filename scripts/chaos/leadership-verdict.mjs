// The leader election's verdict. Every worker process takes part in one election; its terms are
// holds of lock 'leader' (worker.mjs), so the promise check (analysis.mjs: two terms overlapping
// while neither signal had aborted), the lost-signal margins and the token order cover them too.
// Here: overlapping leaders as the fenced store saw them, leadership changes, failover times.
import { round1 } from './analysis.mjs';
import { holds, pauses } from './state.mjs';
import { store } from './store.mjs';

/** Leader terms in the order they were gained. */
const terms = () => [...holds.values()].filter((h) => h.lock === 'leader').sort((a, b) => a.acquiredAt - b.acquiredAt);

/**
 * When a term stopped leading in fact: its signal aborted or its process died (endAt), or, if
 * earlier, a SIGSTOP during the term (the process can neither lead nor hear it no longer does).
 */
function stoppedLeading(term) {
  const stops = pauses.filter((p) => p.pid === term.pid && p.from >= term.acquiredAt && p.from < (term.endAt ?? Infinity)).map((p) => p.from);
  return Math.min(term.endAt ?? Infinity, ...stops);
}

/** p-th percentile (nearest rank) of `values`, undefined when empty. */
function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : undefined;
}

export function leadershipVerdict() {
  const list = terms();
  const s = store.leader;
  const endedBy = {};
  for (const t of list) {
    const why = t.lostReason ?? (t.end === 'killed' ? 'process died' : t.end === 'open' ? 'still leading' : t.end);
    endedBy[why] = (endedBy[why] ?? 0) + 1;
  }
  // Failover: from the moment one term stopped leading to the next `gained` (any participant).
  const failovers = list.slice(1).map((next, i) => {
    const previous = list[i];
    return { from: previous.holdId, to: next.holdId, ms: round1(next.acquiredAt - stoppedLeading(previous)) };
  });
  const failoverMs = failovers.map((f) => f.ms);
  return {
    terms: list.length,
    changes: Math.max(0, list.length - 1),
    /** Terms that led on different participants (processes) from the term before. */
    participantChanges: list.slice(1).filter((t, i) => t.pid !== list[i].pid).length,
    endedBy,
    writesAccepted: s.accepted,
    fencingRejections: s.rejectedReads + s.rejectedWrites,
    /** Two terms' operations interleaved as the store accepted them. */
    interleaved: s.interleaved,
    /** Writes accepted from a term when a term gained later had already used the store. */
    staleAccepted: s.staleAccepted,
    overlapping: s.interleaved + s.staleAccepted,
    failover: { count: failovers.length, p50Ms: percentile(failoverMs, 50), maxMs: failoverMs.length ? Math.max(...failoverMs) : undefined, list: failovers },
  };
}
