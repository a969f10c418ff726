// The run's result (the JSON of --json) and the tables printed from it.
import { writeFileSync } from 'node:fs';
import { excused, lostSignalMargins, overlaps, pausedThrough, tokenInversions, unawareOverlap } from './analysis.mjs';
import { now, rel, T0 } from './clock.mjs';
import { leadershipVerdict } from './leadership-verdict.mjs';
import { nodeLog, observer } from './observer.mjs';
import { args, FAULT_NAMES, opts } from './options.mjs';
import { acquisitions, crashes, errorsByType, fatals, faults, holds, lostEvents, run, stuckAtStop, warnings } from './state.mjs';
import { store } from './store.mjs';
import { burstOk, TRY_ONCE_BOUND_MS, TRY_ONCE_SLACK_MS, tryOnceBursts, tryOnceLimit } from './faults/try-once.mjs';

export function report({ nodes, orphanList, orphansLater }) {
  const ov = overlaps();
  const inversions = { mutex: tokenInversions('mutex'), rw: tokenInversions('rw-write'), leader: tokenInversions('leader'), kept: tokenInversions('kept') };
  // A reader whose value changed under it although its signal had not aborted: a failure, unless
  // its process was SIGSTOPped meanwhile (it cannot know before the library hears of the expiry).
  const sawWrite = [...holds.values()].filter((h) => h.readerSawWrite);
  const readerSawWrite = sawWrite.filter((h) => !excused(h)).length;
  const readerSawWritePaused = sawWrite.length - readerSawWrite;
  const lostByReason = {};
  for (const e of lostEvents) lostByReason[`${e.lock}:${e.reason}`] = (lostByReason[`${e.lock}:${e.reason}`] ?? 0) + 1;
  // Lost signals per fault window (from a fault to the next one).
  for (let i = 0; i < faults.length; i++) {
    const from = faults[i].at;
    const to = faults[i + 1]?.at ?? Infinity;
    faults[i].lostSignals = lostEvents.filter((e) => e.at >= from && e.at < to).length;
  }
  // Lock acquisitions only (leader terms are reported as holds of lock 'leader' too).
  const totalAcq = acquisitions.mutex + acquisitions.sem + acquisitions['rw-read'] + acquisitions['rw-write'];
  const margins = lostSignalMargins();
  const stores = Object.values(store);
  const sum = (/** @type {(s: (typeof stores)[number]) => number} */ f) => stores.reduce((n, s) => n + f(s), 0);
  const result = {
    options: opts,
    durationS: Math.round((now() - T0) / 1000),
    operations: run.storeOps,
    acquisitions: { total: totalAcq, ...acquisitions },
    store: Object.fromEntries(Object.entries(store).map(([k, v]) => [k, { ...v, maxToken: String(v.maxToken), maxWriteToken: String(v.maxWriteToken), maxAcqTouched: undefined, lastHolder: undefined, superseded: undefined }])),
    /**
     * Token order in the store: operations from a token lower than one it had already seen,
     * accepted (a violation) / rejected by the fencing check (would have been one), deliberate
     * late writes left out; `kept`: the kept-node fault's own counter, where every such rejection
     * fails the run too (its holders read and write at once, while their signals are live).
     */
    tokenOrder: {
      lowerAccepted: sum((s) => s.lowerAccepted),
      lowerRejected: sum((s) => s.lowerRejected),
      kept: { lowerAccepted: store.kept.lowerAccepted, lowerRejected: store.kept.lowerRejected },
    },
    staleAccepted: sum((s) => s.staleAccepted),
    falseRejects: sum((s) => s.falseRejects),
    fencingRejections: sum((s) => s.rejectedReads + s.rejectedWrites),
    lostUpdates: sum((s) => s.lostUpdates),
    counterConsistent: stores.every((s) => s.value === s.accepted),
    leadership: leadershipVerdict(),
    overlaps: ov,
    unaware: unawareOverlap(),
    lostSignalMargins: margins,
    /** Lost signals that came after the server had certainly let the lock go (not excused). */
    lateSignals: margins.filter((m) => !m.excused && m.late).length,
    /** Lost signals with nothing to judge them by (the node never seen gone, nobody acquired after). */
    unjudgedSignals: margins.filter((m) => !m.excused && m.marginMs === undefined).length,
    tryOnce: {
      bursts: tryOnceBursts.length,
      calls: tryOnceBursts.reduce((n, b) => n + b.count, 0),
      maxMs: Math.max(0, ...tryOnceBursts.map((b) => b.maxMs)),
      limitMs: tryOnceLimit(),
      maxLoopDelayMs: Math.max(0, ...tryOnceBursts.map((b) => b.maxLoopDelayMs ?? 0)),
      outcomes: tryOnceBursts.reduce((all, b) => {
        for (const [k, n] of Object.entries(b.reasons)) all[k] = (all[k] ?? 0) + n;
        return all;
      }, {}),
      failedBursts: tryOnceBursts.filter((b) => !burstOk(b)).map((b) => ({ fault: b.fault, mode: b.mode, slot: b.slot, maxMs: b.maxMs, limitMs: tryOnceLimit(), reasons: b.reasons })),
    },
    observer: { polls: observer.polls, errors: observer.errors, nodes: nodeLog.size },
    unexplainedOverlaps: ov.mutex.unexplained + ov.rw.unexplained + ov.sem.unexplained,
    explainedOverlaps: ov.mutex.explained + ov.rw.explained + ov.sem.explained,
    readerSawWrite,
    readerSawWritePaused,
    readerSawWriteExamples: sawWrite.slice(0, 5).map((h) => ({ holdId: h.holdId, pid: h.pid, acquiredAt: rel(h.acquiredAt), endAt: rel(h.endAt), end: h.end, pausedThrough: pausedThrough(h) })),
    tokenInversions: inversions.mutex.count + inversions.rw.count + inversions.leader.count + inversions.kept.count,
    tokenInversionExamples: [...inversions.mutex.examples, ...inversions.rw.examples, ...inversions.leader.examples, ...inversions.kept.examples],
    orphans: Array.isArray(nodes) ? orphanList.length : -1,
    orphanPaths: orphanList.map((n) => n.path),
    orphansLater,
    checkError: Array.isArray(nodes) ? undefined : nodes.error,
    lostSignals: lostEvents.length,
    lostByReason,
    errorsByType: Object.fromEntries(errorsByType),
    fatals,
    crashes,
    stuckAtStop,
    warnings: [...new Set(warnings)].slice(0, 10),
    faults: faults.map((f) => ({ ...f, at: rel(f.at) })),
  };
  result.allFaultsObserved = faults.length >= (args.faults ? 1 : FAULT_NAMES.length) && faults.every((f) => f.observed);
  result.passed =
    result.staleAccepted === 0 &&
    result.falseRejects === 0 &&
    result.lostUpdates === 0 &&
    result.counterConsistent &&
    result.unexplainedOverlaps === 0 &&
    result.unaware.pairs === 0 &&
    result.leadership.overlapping === 0 &&
    result.lateSignals === 0 &&
    result.tryOnce.failedBursts.length === 0 &&
    result.readerSawWrite === 0 &&
    result.tokenInversions === 0 &&
    result.tokenOrder.lowerAccepted === 0 &&
    result.tokenOrder.kept.lowerRejected === 0 &&
    result.orphans === 0 &&
    fatals.length === 0 &&
    crashes.length === 0 &&
    stuckAtStop.length === 0 &&
    result.allFaultsObserved;
  printTables(result);
  if (args.json) writeFileSync(args.json, `${JSON.stringify(result, null, 2)}\n`);
  return result;
}

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

export function printTables(r) {
  const out = [];
  const row = (...cells) => out.push(`| ${cells.join(' | ')} |`);
  const v = (x) => (x === undefined || x === null ? '-' : String(x));
  out.push('', `## Chaos run: ${r.durationS} s, ${r.options.processes} processes, session timeout ${r.options.sessionTimeoutMs} ms`, '');
  row('measure', 'value', 'expected');
  row('---', '---', '---');
  row('store operations (reads, writes, peeks)', r.operations, '');
  row('acquisitions (mutex / semaphore / read / write)', `${r.acquisitions.total} (${r.acquisitions.mutex} / ${r.acquisitions.sem} / ${r.acquisitions['rw-read']} / ${r.acquisitions['rw-write']})`, '');
  row('writes accepted (mutex / rw / leader)', `${r.store.mutex.accepted} / ${r.store.rw.accepted} / ${r.store.leader.accepted}`, '');
  row('store saw an older holder after a newer one: rejected by the fencing check', r.fencingRejections, '≥ 1 (late writes)');
  row('**... accepted (writes from stale holders)**', r.staleAccepted, '0');
  row('rejections of the newest holder (token out of order)', r.falseRejects, '0');
  row('fencing token inversions between successive holders', r.tokenInversions, '0');
  row(
    '**token order: store operations from a lower token than one already seen** (accepted: violations / rejected by the fence: would have been, late writes left out; kept-node fault)',
    `${r.tokenOrder.lowerAccepted} / ${r.tokenOrder.lowerRejected}; kept-node fault: ${r.tokenOrder.kept.lowerAccepted} / ${r.tokenOrder.kept.lowerRejected}`,
    '0 / any; 0 / 0',
  );
  row('**lost updates**', r.lostUpdates, '0');
  row('counter = accepted writes', r.counterConsistent ? 'yes' : 'NO', 'yes');
  row('overlapping holders, both still holding by their own account', r.unexplainedOverlaps, '0');
  row(
    '**time two holders overlapped while neither signal had aborted** (mutex / rw / semaphore over its permits / leader terms)',
    `${r.unaware.totalMs} ms (${['mutex', 'rw', 'sem', 'leader'].map((k) => `${r.unaware.byLock[k].ms} ms in ${r.unaware.byLock[k].pairs}`).join(' / ')})`,
    '0 ms',
  );
  const lead = r.leadership;
  row(
    '**overlapping leaders in the store\'s view** (terms whose accepted operations interleaved / writes accepted from an older term)',
    `${lead.overlapping} (${lead.interleaved} / ${lead.staleAccepted}); stale-token operations rejected: ${lead.fencingRejections}`,
    '0',
  );
  row(
    'leadership changes (terms; participant changed; how terms ended)',
    `${lead.changes} (${lead.terms}; ${lead.participantChanges}; ${Object.entries(lead.endedBy).map(([k, n]) => `${k} ×${n}`).join(', ') || '-'})`,
    '',
  );
  row(
    'leader failover: term ended or process died/stopped → next gained, p50 / max (failovers)',
    lead.failover.count ? `${lead.failover.p50Ms} / ${lead.failover.maxMs} ms (${lead.failover.count})` : '-',
    '',
  );
  const judged = r.lostSignalMargins.filter((m) => !m.excused && m.marginMs !== undefined);
  row(
    '**lost signals that came after the server let the lock go** (of judged; margin min / median, ms)',
    `${r.lateSignals} of ${judged.length}; ${judged.length ? `${Math.min(...judged.map((m) => m.marginMs))} / ${median(judged.map((m) => m.marginMs))}` : '-'}` +
      `${r.unjudgedSignals ? `; ${r.unjudgedSignals} unjudged` : ''}; ${r.lostSignalMargins.length - judged.length - r.unjudgedSignals} excused`,
    '0',
  );
  row(
    '**try-once during outages: slowest** (calls; worst event-loop delay; outcomes)',
    `${r.tryOnce.maxMs} ms (${r.tryOnce.calls}; ${r.tryOnce.maxLoopDelayMs} ms; ${Object.entries(r.tryOnce.outcomes).map(([k, n]) => `${k} ×${n}`).join(', ') || '-'})`,
    `≤ ${TRY_ONCE_BOUND_MS} + ${TRY_ONCE_SLACK_MS} ms, connection only`,
  );
  row('overlapping holders, one of them lost, killed or SIGSTOPped (fenced)', r.explainedOverlaps, 'any');
  row('semaphore: most holders at once (all / not lost, killed or paused)', `${r.overlaps.sem.maxConcurrent} / ${r.overlaps.sem.maxConcurrentHealthy}`, `any / ≤ ${r.options.permits}`);
  row('readers that saw a write while holding (not paused / paused through a SIGSTOP)', `${r.readerSawWrite} / ${r.readerSawWritePaused}`, '0 / any');
  row('**orphaned lock nodes after the session timeout**', `${r.orphans}${r.orphansLater !== undefined ? ` (${r.orphansLater} after another 2× timeout)` : ''}`, '0');
  row(
    'partition: lease signal minus next holder\'s acquisition, ms (> 0: told after another process held the lock)',
    r.faults.filter((f) => f.signalAfterNextHolderMs !== undefined).map((f) => `${f.signalAfterNextHolderMs}${f.fault.startsWith('silent') ? ' (silent)' : ''}`).join(', ') || '-',
    '< 0 (fenced either way)',
  );
  row('lost signals (lock:reason)', `${r.lostSignals} ${JSON.stringify(r.lostByReason)}`, '');
  row('errors surfaced to callers', Object.entries(r.errorsByType).map(([k, n]) => `${k}: ${n}`).join('; ') || 'none', '');
  row('worker crashes / unhandled errors / stuck at stop', `${r.crashes.length} / ${r.fatals.length} / ${r.stuckAtStop.length}`, '0 / 0 / 0');
  out.push('');
  row('fault', 'at s', 'observed', 'lost signals', 'fault → lost signal ms', 'fault → old session gone ms', 'fault → next holder ms', 'next holder after old session gone', 'late write');
  row('---', '---', '---', '---', '---', '---', '---', '---', '---');
  for (const f of r.faults) {
    row(
      `${f.fault} [${f.target ?? ''}]`,
      v(f.at?.toFixed(1)),
      f.observed ? 'yes' : '**NO**',
      v(f.lostSignals),
      `${v(f.lostMs)}${f.lostReason ? ` (${f.lostReason})` : ''}`,
      v(f.sessionGoneMs),
      v(f.nextHolderMs),
      f.nextAfterSessionGone === undefined ? '-' : f.nextAfterSessionGone ? 'yes' : '**NO**',
      v(f.lateWrite),
    );
  }
  out.push('');
  for (const f of r.faults) out.push(`- ${f.fault}: ${f.evidence}`);
  if (r.lostSignalMargins.length) {
    out.push('', 'Lost signals (margin: the server\'s end of the hold − the signal, ms; > 0: told first; "at least": against the last poll that still saw the node)', '');
    row('at s', 'slot', 'lock', 'reason', 'during', 'margin ms (against)', 'at least ms', 'verdict');
    row('---', '---', '---', '---', '---', '---', '---', '---');
    for (const m of r.lostSignalMargins) {
      const verdict = m.excused ? `excused (${m.excused})` : m.marginMs === undefined ? 'unjudged' : m.late ? '**LATE**' : 'ok';
      row(m.at.toFixed(1), m.slot, m.lock, m.reason, m.fault, m.marginMs === undefined ? '-' : `${m.marginMs} (${m.by})`, v(m.atLeastMs), verdict);
    }
  }
  for (const b of r.tryOnce.failedBursts) out.push('', `try-once burst over its limit or not for want of a connection: ${JSON.stringify(b)}`);
  if (r.unaware.pairs > 0) out.push('', `overlaps while neither was told: ${JSON.stringify(r.unaware.examples)}`);
  if (r.unexplainedOverlaps > 0) out.push('', `overlap examples: ${JSON.stringify([...r.overlaps.mutex.examples, ...r.overlaps.rw.examples, ...r.overlaps.sem.examples])}`);
  if (r.readerSawWrite > 0) out.push('', `readers that saw a write: ${JSON.stringify(r.readerSawWriteExamples)}`);
  if (r.tokenInversions > 0) out.push('', `token inversions: ${JSON.stringify(r.tokenInversionExamples)}`);
  if (r.orphans > 0) out.push('', `orphans: ${r.orphanPaths.join(', ')}`);
  if (r.checkError) out.push('', `orphan check failed: ${r.checkError}`);
  for (const st of r.stuckAtStop) out.push('', `did not stop within 30 s: slot ${st.slot} pid ${st.pid}: ${JSON.stringify(st.where)}`);
  for (const c of r.crashes) out.push('', `crash: slot ${c.slot} pid ${c.pid} code ${c.code} signal ${c.signal}\n${c.stderr}`);
  for (const f of r.fatals) out.push('', `unhandled: slot ${f.slot} ${f.event}: ${f.stack}`);
  if (r.warnings.length) out.push('', `warnings: ${r.warnings.join(' | ')}`);
  out.push('', r.passed ? 'RESULT: PASS' : 'RESULT: FAIL', '');
  process.stdout.write(out.join('\n'));
}
