// Faults of one holder or waiter: partitioned (closed, or silent), SIGSTOPped, SIGKILLed while
// holding or waiting, SIGTERMed in a rolling restart. The next holder must come only after the
// server let the old session go, and the old holder's late write must be fenced off.
import { setTimeout as sleep } from 'node:timers/promises';
import { ms, now } from '../clock.mjs';
import { watchSession } from '../ensemble.mjs';
import { nodeLog } from '../observer.mjs';
import { opts } from '../options.mjs';
import { firstAcquisition, holds, lateWrites, leaderSlot, liveSlots, lostEvents, pauses, until } from '../state.mjs';
import { store } from '../store.mjs';
import { holderFor, settle, spawnWorker } from '../workers.mjs';

/** Shared checks of the faults that take a holder away: signal, session expiry, next holder. */
export function holderChecks(at, hold, watch, next) {
  return {
    holdToken: hold.token,
    sessionGoneMs: ms(at, watch.goneAt),
    nextHolderMs: ms(at, next?.acquiredAt),
    nextToken: next?.token,
    // Sound: the old session's nodes existed when the last poll that showed them was sent.
    nextAfterSessionGone: next !== undefined && watch.lastSeenAt !== undefined ? next.acquiredAt >= watch.lastSeenAt : next !== undefined ? null : false,
  };
}

export async function partitionHolder(slot, silent = false) {
  const record = {
    fault: silent ? 'silent partition (nothing passes, nothing closes) of a holder past session timeout' : 'partition holder past session timeout',
    target: `slot ${slot.slot} (pid ${slot.pid})`,
  };
  const hold = await holderFor(slot, 'partition');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const at = now();
  record.at = at;
  for (const proxy of slot.proxies.values()) silent ? proxy.blackhole({ holdCloses: true }) : proxy.cut();
  const watch = watchSession(hold.sessionId);
  const lost = await until('the partitioned holder to see its lease lost', () => lostEvents.find((e) => e.holdId === hold.holdId), opts.sessionTimeoutMs + 20_000);
  record.lostMs = ms(at, lost?.at);
  record.lostReason = lost?.reason;
  const next = await until('another holder after the partition', () => firstAcquisition(at, { excludeHoldId: hold.holdId }), opts.sessionTimeoutMs + 30_000);
  await sleep(Math.max(0, (lost?.at ?? now()) + 1000 - now()));
  for (const proxy of slot.proxies.values()) proxy.restore();
  record.restoredMs = ms(at, now());
  await until('the old session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  await watch.stop();
  // The late write goes once a newer holder has used the store.
  await until('a newer holder to use the store', () => store.mutex.maxAcqTouched > hold.acquiredAt || undefined, 30_000);
  slot.child.send({ cmd: 'go' });
  const late = await until('the late write', () => lateWrites.find((l) => l.holdId === hold.holdId), 15_000);
  Object.assign(record, holderChecks(at, hold, watch, next), { lateWrite: late ? (late.ok ? 'ACCEPTED' : 'rejected') : 'not made' });
  // The server still had the session's nodes at lastSeenAt: the signal beat its expiry by at least this.
  record.marginMs = lost && watch.lastSeenAt !== undefined ? Math.round(watch.lastSeenAt - lost.at) : undefined;
  // Positive: the holder was told only after another process already held the lock (the client
  // must declare the loss before the server's deadline, counted from the last packet it got).
  record.signalAfterNextHolderMs = lost && next ? Math.round(lost.at - next.acquiredAt) : undefined;
  await settle('after the partition');
  record.observed = Boolean(lost && next && late && !late.ok && record.nextAfterSessionGone);
  record.evidence =
    `lost signal (${record.lostReason ?? 'none'}) after ${record.lostMs ?? '-'} ms; old session's nodes gone after ${record.sessionGoneMs ?? '-'} ms; ` +
    `next holder after ${record.nextHolderMs ?? '-'} ms (${record.nextAfterSessionGone ? 'after' : 'NOT after'} the old session was gone); ` +
    `the signal came ${record.signalAfterNextHolderMs === undefined ? '-' : record.signalAfterNextHolderMs > 0 ? `${record.signalAfterNextHolderMs} ms AFTER` : `${-record.signalAfterNextHolderMs} ms before`} the next holder acquired; late write ${record.lateWrite}`;
  return record;
}

export async function pauseHolder(slot) {
  const record = { fault: 'SIGSTOP holder past session timeout, SIGCONT', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'pause');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const at = now();
  record.at = at;
  if (leaderSlot() === slot) record.target += ', leading the election';
  const child = slot.child;
  process.kill(child.pid, 'SIGSTOP');
  slot.paused = true;
  const watch = watchSession(hold.sessionId);
  await sleep(opts.sessionTimeoutMs + opts.pauseExtraMs);
  const next = firstAcquisition(at, { excludeHoldId: hold.holdId });
  process.kill(child.pid, 'SIGCONT');
  slot.paused = false;
  const resumedAt = now();
  pauses.push({ pid: child.pid, from: at, to: resumedAt });
  record.pausedMs = ms(at, resumedAt);
  const died = () => (child.exitCode !== null || child.signalCode !== null ? `the process died on SIGCONT (${child.signalCode ?? `exit ${child.exitCode}`})` : undefined);
  const late = await until('the paused holder to write', () => lateWrites.find((l) => l.holdId === hold.holdId) ?? died(), 15_000);
  const lost = await until('the paused holder to see its lease lost', () => lostEvents.find((e) => e.holdId === hold.holdId) ?? died(), opts.sessionTimeoutMs + 20_000);
  record.crashed = died();
  await until('the old session to be gone', () => watch.goneAt, 20_000);
  await watch.stop();
  const lostEvent = typeof lost === 'object' ? lost : undefined;
  const lateWrite = typeof late === 'object' ? late : undefined;
  record.lostMs = ms(at, lostEvent?.at);
  record.lostAfterResumeMs = ms(resumedAt, lostEvent?.at);
  record.lostReason = lostEvent?.reason;
  Object.assign(record, holderChecks(at, hold, watch, next), { lateWrite: lateWrite ? (lateWrite.ok ? 'ACCEPTED' : 'rejected') : record.crashed ? 'crashed' : 'not made' });
  await settle('after the pause');
  record.observed = Boolean(next && lostEvent && lateWrite && !lateWrite.ok && record.nextAfterSessionGone);
  record.evidence =
    `another holder during the pause after ${record.nextHolderMs ?? '-'} ms (${record.nextAfterSessionGone ? 'after' : 'NOT after'} the old session was gone at ${record.sessionGoneMs ?? '-'} ms); ` +
    (record.crashed
      ? `${record.crashed.toUpperCase()} (see crashes)`
      : `write on SIGCONT ${record.lateWrite}; lost signal (${record.lostReason ?? 'none'}) ${record.lostAfterResumeMs ?? '-'} ms after SIGCONT`);
  return record;
}

export async function killHolder(slot) {
  const record = { fault: 'SIGKILL worker holding the mutex', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'kill');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const at = now();
  record.at = at;
  slot.child.expectedExit = true;
  process.kill(slot.pid, 'SIGKILL');
  const watch = watchSession(hold.sessionId);
  const next = await until('another holder after the kill', () => firstAcquisition(at, { excludePid: hold.pid }), opts.sessionTimeoutMs + 30_000);
  await until('the old session to be gone', () => watch.goneAt, 20_000);
  await watch.stop();
  spawnWorker(slot);
  Object.assign(record, holderChecks(at, hold, watch, next));
  await settle('after the kill of a holder');
  record.observed = Boolean(next && record.nextAfterSessionGone);
  record.evidence = `old session's nodes gone after ${record.sessionGoneMs ?? '-'} ms; next holder after ${record.nextHolderMs ?? '-'} ms (${record.nextAfterSessionGone ? 'after' : 'NOT after'} the old session was gone)`;
  return record;
}

export async function killWaiter() {
  const record = { fault: 'SIGKILL worker waiting for the mutex' };
  const candidate = await until('a worker process that waits for the mutex and does not hold it', () =>
    liveSlots().find((s) => {
      if (s.state !== 'connected' || !s.sessionId) return false;
      const workers = [...s.workers.values()];
      const waitingLong = workers.some((w) => w.status === 'waiting' && w.lock === 'mutex' && now() - w.since > 20);
      const holdsMutex = workers.some((w) => w.status === 'holding' && w.lock === 'mutex');
      return waitingLong && !holdsMutex;
    }), 30_000);
  const slot = candidate ?? liveSlots()[0];
  record.target = `slot ${slot.slot} (pid ${slot.pid})${candidate ? '' : ' (no clean waiting moment found: it may hold)'}`;
  const waiting = [...slot.workers.values()].filter((w) => w.status === 'waiting').length;
  const at = now();
  record.at = at;
  const sessionId = slot.sessionId;
  const pid = slot.pid;
  slot.child.expectedExit = true;
  process.kill(pid, 'SIGKILL');
  const watch = watchSession(sessionId);
  await until('the killed waiter session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  await watch.stop();
  const next = await until('a mutex holder after the waiter kill', () => firstAcquisition(at, { excludePid: pid }), 30_000);
  spawnWorker(slot);
  record.sessionGoneMs = ms(at, watch.goneAt);
  record.nextHolderMs = ms(at, next?.acquiredAt);
  const goneAt = watch.goneAt;
  const afterGone = goneAt !== undefined ? await until('a mutex holder after the killed waiter\'s session was gone', () => firstAcquisition(goneAt, { excludePid: pid }), 30_000) : undefined;
  await settle('after the kill of a waiter');
  record.observed = Boolean(candidate && watch.goneAt !== undefined && next);
  record.evidence = `${waiting} waiting request(s) killed; its nodes gone after ${record.sessionGoneMs ?? '-'} ms; next holder after ${record.nextHolderMs ?? '-'} ms; queue moving after the expiry: ${afterGone ? 'yes' : 'no'}`;
  return record;
}

/**
 * A rolling restart: SIGTERM to a worker while one of its holders is in a long critical section
 * (longer than shutdownGraceMs) and others are in short ones. The worker does what Nest's shutdown
 * hooks do (engine.shutdown(), connection.close(), exit 0); the short holders finish, the long one
 * is told (reason shutdown) before its node goes; then a new worker takes the slot.
 */
export async function rollingRestart(slot) {
  const record = { fault: 'rolling restart: SIGTERM (shutdown hooks) with holds in flight, then a new worker', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'long');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  await sleep(200); // the other processes queue behind it
  // SIGTERM right as a short critical section begins too (a semaphore or rw holder of this process).
  const pid = slot.child.pid;
  // (A leader term is no critical section: the process may lead all along.)
  await until(undefined, () => [...holds.values()].some((h) => h.pid === pid && h.end === 'open' && h.holdId !== hold.holdId && h.lock !== 'leader') || undefined, 5_000);
  const at = now();
  record.at = at;
  const child = slot.child;
  const inFlight = [...holds.values()].filter((h) => h.pid === pid && h.end === 'open');
  child.expectedExit = true;
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  process.kill(pid, 'SIGTERM');
  let how = await Promise.race([exited, sleep(opts.shutdownGraceMs + 30_000).then(() => 'still running')]);
  if (how === 'still running') {
    process.kill(pid, 'SIGKILL');
    how = `still running after ${opts.shutdownGraceMs + 30_000} ms (SIGKILLed)`;
  }
  record.exitMs = ms(at, now());
  const lost = lostEvents.find((e) => e.holdId === hold.holdId);
  record.lostMs = ms(at, lost?.at);
  record.lostReason = lost?.reason;
  const next = await until('another holder after the rolling restart', () => firstAcquisition(at, { excludePid: pid }), 30_000);
  record.nextHolderMs = ms(at, next?.acquiredAt);
  record.signalBeforeNextHolderMs = lost && next ? Math.round(next.acquiredAt - lost.at) : undefined;
  const released = inFlight.filter((h) => holds.get(h.holdId).end === 'released' && !lostEvents.some((e) => e.holdId === h.holdId)).length;
  const told = lostEvents.filter((e) => e.at >= at && inFlight.some((h) => h.holdId === e.holdId));
  if (slot.child === child) spawnWorker(slot);
  const replaced = await settle('after the rolling restart');
  // The node of the long hold disappeared after its signal (the observer polls every 100 ms).
  const node = nodeLog.get(hold.path);
  record.nodeGoneAfterSignal = lost && node?.goneAt !== undefined ? node.goneAt >= lost.at : undefined;
  record.observed = how === 0 && lost?.reason === 'shutdown' && Boolean(next) && record.signalBeforeNextHolderMs > 0 && record.nodeGoneAfterSignal !== false && replaced;
  record.evidence =
    `exit ${how} after ${record.exitMs} ms; ${inFlight.length} hold(s) in flight: ${released} finished within the grace, ` +
    `${told.length} told by signal (${told.map((e) => e.reason).join(', ') || '-'}); the long one told ${record.lostMs ?? '-'} ms after SIGTERM ` +
    `(grace ${opts.shutdownGraceMs} ms), ${record.signalBeforeNextHolderMs ?? '-'} ms before another process held the mutex; ` +
    `new worker ${replaced ? 'connected and working' : 'NOT working'}`;
  return record;
}
