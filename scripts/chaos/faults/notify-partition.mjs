// The sharpest fault: a waiter silenced right after the watch event that makes it the holder.
import { setTimeout as sleep } from 'node:timers/promises';
import { log, ms, now } from '../clock.mjs';
import { sid, watchSession } from '../ensemble.mjs';
import { observer } from '../observer.mjs';
import { opts } from '../options.mjs';
import { BASE, holds, liveSlots, lostEvents, stateEvents, until } from '../state.mjs';
import { settle } from '../workers.mjs';

/**
 * The waiter next in line is silenced (nothing passes, nothing closes) right after the watch event
 * that makes it the holder reaches it: the deletion of the head node, after which it holds without
 * sending anything, so the server last heard from it before that. Its lost signal must still come
 * before the server expires its session, i.e. before another process takes the lock.
 * The sharp case, on a mutex of its own ("notify"): every worker pauses its loops, slot H holds
 * the notify mutex, slot T queues behind it; once the server has not heard from T for QUIET_MS
 * (about a quarter of the session timeout: T's next heartbeat is nearly due), H releases (and
 * queues again at once). The
 * deletion reaches T, which holds at once; T's link goes silent right after. Then the library's
 * deadline (counted from T's last answered request) comes before the C client's own receive
 * timeout (2/3 of the session timeout after the event), while the socket still looks connected.
 * Tried again (up to 5 times; a try that silences nothing costs a second or two) when a heartbeat
 * got in between.
 */
export async function notifyPartition() {
  const record = { fault: 'silent partition right after a watch event reached a waiter' };
  const tries = [];
  try {
    for (let i = 0; i < 5; i++) {
      const one = await notifyPartitionOnce();
      tries.push(one);
      if (!one.madeHolder) log(`notification fault, try ${i + 1}: ${one.summary}`);
      if (one.madeHolder) break;
    }
  } finally {
    for (const slot of liveSlots()) slot.child.send({ cmd: 'quiet', on: false });
  }
  const last = tries[tries.length - 1];
  Object.assign(record, last, { tries: tries.length });
  record.observed = Boolean(last.madeHolder && last.lostBeforeExpiry);
  record.evidence =
    (tries.length > 1 ? `${tries.length} tries (${tries.slice(0, -1).map((t) => t.summary).join('; ')}); ` : '') + last.summary;
  await settle('after the notification partition');
  return record;
}

export async function notifyPartitionOnce() {
  const live = liveSlots().filter((s) => s.ready && s.state === 'connected');
  if (live.length < 2) return { at: now(), madeHolder: false, summary: 'fewer than two connected workers' };
  // Everyone quiet: the loops pause before their next acquire.
  for (const slot of live) {
    slot.quietIdle = false;
    slot.child.send({ cmd: 'quiet', on: true });
  }
  for (const m of ['notifyHeld']) for (const slot of live) slot[m] = undefined;
  const idle = await until('the workers to pause their loops', () => live.every((s) => s.quietIdle) || undefined, 30_000);
  const [target, head] = [live[live.length - 1], live[0]];
  const result = { target: `slot ${target.slot} (pid ${target.pid}) behind slot ${head.slot}`, at: now() };
  if (!idle) return { ...result, madeHolder: false, summary: 'the workers did not pause' };
  head.child.send({ cmd: 'notify-hold', again: true });
  const held = await until('the notify mutex to be held', () => head.notifyHeld, 10_000);
  if (!held) return { ...result, madeHolder: false, summary: 'the notify mutex was not held' };
  target.child.send({ cmd: 'notify-wait' });
  const queued = await until('the target to queue for the notify mutex', () => {
    const prefix = `${BASE}/notify/`;
    const nodes = observer.snapshot ? [...observer.snapshot.nodes].filter(([path]) => path.startsWith(prefix)) : [];
    return nodes.some(([, session]) => target.sessionId && session === sid(target.sessionId)) || undefined;
  }, 10_000);
  if (!queued) {
    head.child.send({ cmd: 'notify-release' });
    return { ...result, madeHolder: false, summary: 'the target did not queue' };
  }
  const armedAt = now();
  result.at = armedAt;
  const sessionId = target.sessionId;
  const proxies = [...target.proxies.values()];
  const quietFor = () => performance.timeOrigin + performance.now() - Math.max(...proxies.map((p) => p.lastClientPacketTime));
  const silence = Promise.race([
    ...proxies.map((p) => p.blackholeAfterNotification({ type: 'deleted', path: held.path, minQuietMs: QUIET_MS - 5, holdCloses: true }).then(() => p)),
    sleep(15_000).then(() => undefined),
  ]);
  // Let go once the server has not heard from the target for QUIET_MS (before its next heartbeat).
  await until(undefined, () => quietFor() >= QUIET_MS - 150 || undefined, 10_000);
  // Sharper than the 100 ms poll of `until`: short timers for the last stretch (a heartbeat in
  // between starts it again).
  for (const deadline = now() + 10_000; quietFor() < QUIET_MS && now() < deadline; ) await sleep(1);
  head.child.send({ cmd: 'notify-release' });
  const releasedAt = now();
  const silenced = await Promise.race([silence, sleep(5000).then(() => undefined)]);
  for (const proxy of proxies) proxy.blackhole({ holdCloses: true }); // whichever server it tries next: silent too
  const silentAt = now();
  if (!silenced) {
    for (const proxy of proxies) proxy.forward(); // nothing was swallowed
    // It holds the notify mutex normally: let go, and let the other one take it once more.
    await until(undefined, () => [...holds.values()].some((h) => h.lock === 'notify' && h.pid === target.pid && h.acquiredAt > releasedAt) || undefined, 10_000);
    target.child.send({ cmd: 'notify-release' });
    await until(undefined, () => [...holds.values()].some((h) => h.lock === 'notify' && h.pid === head.pid && h.acquiredAt > releasedAt && h.end !== 'open') || undefined, 10_000);
    return { ...result, madeHolder: false, summary: `the head's deletion reached slot ${target.slot} after it had sent something (a heartbeat?) within ${QUIET_MS} ms` };
  }
  // The server last heard from the client then (proxy clock → ours).
  const lastHeard = Math.max(...proxies.map((p) => p.lastClientPacketTime)) + PERF_TO_NOW;
  const watch = watchSession(sessionId);
  const lostState = await until('the silenced worker to declare its session lost', () =>
    stateEvents.find((e) => e.slot === target.slot && e.at > armedAt && e.state === 'lost'), opts.sessionTimeoutMs + 20_000);
  await until('the silenced session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  const next = await until('the released holder to take the notify mutex again', () =>
    [...holds.values()].find((h) => h.lock === 'notify' && h.pid === head.pid && h.acquiredAt > releasedAt), 10_000);
  await watch.stop();
  for (const proxy of proxies) proxy.restore();
  const hold = [...holds.values()].find((h) => h.pid === target.pid && h.lock === 'notify' && h.acquiredAt > armedAt);
  const lost = hold && (await until('the silenced holder to be told', () => lostEvents.find((e) => e.holdId === hold.holdId), 10_000));
  const toldAt = lost?.at ?? lostState?.at;
  Object.assign(result, {
    event: `${silenced.silencedAfter?.type} ${silenced.silencedAfter?.path}`,
    madeHolder: Boolean(hold),
    lostMs: ms(silentAt, toldAt),
    lostReason: lost?.reason,
    sessionGoneMs: ms(silentAt, watch.goneAt),
    nextHolderMs: ms(silentAt, next?.acquiredAt),
    // At least this long before the server expired the session (its nodes were still there).
    marginMs: toldAt !== undefined && watch.lastSeenAt !== undefined ? Math.round(watch.lastSeenAt - toldAt) : undefined,
    // ... and this long before the earliest moment it could have: one timeout after it last heard from us.
    earliestExpiryMarginMs: toldAt !== undefined ? Math.round(lastHeard + opts.sessionTimeoutMs - toldAt) : undefined,
    signalBeforeNextHolderMs: toldAt !== undefined && next ? Math.round(next.acquiredAt - toldAt) : undefined,
    lastHeardBeforeSilenceMs: Math.round(silentAt - lastHeard),
    lostBeforeExpiry: Boolean(lost && watch.goneAt !== undefined && lost.at < watch.goneAt && (!next || lost.at < next.acquiredAt)),
  });
  result.summary =
    `silenced after "${result.event}" (the server last heard from it ${result.lastHeardBeforeSilenceMs} ms before); ` +
    `${hold ? `it held the lock on that event; told ${lost ? `(${lost.reason})` : 'NOT'}` : 'the event did not make it the holder'} ` +
    `${result.lostMs ?? '-'} ms after the silence; its session gone after ${result.sessionGoneMs ?? '-'} ms, the other process held the lock after ` +
    `${result.nextHolderMs ?? '-'} ms: told ${fmtMargin(result.marginMs)} the expiry, ${fmtMargin(result.signalBeforeNextHolderMs)} the other holder, ` +
    `${fmtMargin(result.earliestExpiryMarginMs)} the earliest possible expiry`;
  return result;
}
export const fmtMargin = (m) => (m === undefined ? '- vs' : m >= 0 ? `${m} ms before` : `${-m} ms AFTER`);
/** lossMarginMs() of lib/core/connection/zk-connection.ts: the library declares the loss this long before its deadline. */
export const LOSS_MARGIN_MS = Math.max(250, opts.sessionTimeoutMs / 10);
/**
 * How long the server must not have heard from the target when it is silenced. The library's
 * heartbeat (a sync every T/20) leaves short quiet moments only; within one, the event is the
 * last thing the target gets, and its deadline comes before the C client's receive timeout (2/3
 * of the timeout after the last packet it got).
 */
export const QUIET_MS = Math.ceil((opts.sessionTimeoutMs / 20) * 0.6);
/** Add to performance.timeOrigin + performance.now() (the proxies' clock) to get now()'s clock. */
export const PERF_TO_NOW = now() - (performance.timeOrigin + performance.now());
