// Try-once acquires during outages: each must settle fast, for want of a connection.
import { log, now } from '../clock.mjs';
import { opts } from '../options.mjs';
import { until } from '../state.mjs';
import { settle } from '../workers.mjs';

/** Every try-once burst: {fault, slot, mode, count, maxMs, slowest, maxLoopDelayMs, reasons}. */
export const tryOnceBursts = [];
/** The library's bound for a try-once (TRY_ONCE_BOUND_MS): a try-once must settle within it. */
export const TRY_ONCE_BOUND_MS = 2000;
/**
 * Plus this much for timers firing late on a busy machine. Fixed: the worker's worst event-loop
 * delay is reported next to it, but not added, since the library can cause it itself (a
 * synchronous native call blocks the loop, e.g. closing a session on a link that answers nothing).
 */
export const TRY_ONCE_SLACK_MS = 250;
export const tryOnceLimit = () => TRY_ONCE_BOUND_MS + TRY_ONCE_SLACK_MS;
/** A burst passes when every call settled within the limit, for want of a connection. */
export const burstOk = (b) => b.count > 0 && b.maxMs <= tryOnceLimit() && Object.keys(b.reasons).every((r) => r.endsWith(': connection'));

/** Asks the slots for try-once bursts of `burstMs` at once; resolves with their reports. */
export async function tryOnceBurst(slotList, burstMs, fault, mode) {
  for (const slot of slotList) {
    slot.burst = undefined;
    slot.child.send({ cmd: 'try-once-burst', ms: burstMs });
  }
  const reports = await until('the try-once bursts', () => slotList.every((s) => s.burst || s.exited) || undefined, burstMs + 20_000);
  const bursts = slotList.filter((s) => s.burst).map((s) => ({ fault, mode, slot: s.slot, ...s.burst, at: undefined }));
  tryOnceBursts.push(...bursts);
  if (!reports) log(`try-once bursts (${mode}): ${bursts.length}/${slotList.length} reported`);
  return bursts;
}
export const describeBurst = (b) =>
  `${b.mode}: ${b.count} try-once, slowest ${b.maxMs} ms${b.maxMs > tryOnceLimit() ? ' (OVER the limit)' : ''} (${b.slowest}; worst event-loop delay ${b.maxLoopDelayMs} ms), ` +
  `${Object.entries(b.reasons).map(([k, n]) => `${k} ×${n}`).join(', ')}`;

/** Try-once traffic while a worker is cut off, then while it is silenced: each settles fast with reason connection. */
export async function tryOnceOutage(slot) {
  const record = { fault: 'try-once acquires while cut off, then while silenced', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const at = now();
  record.at = at;
  const bursts = [];
  for (const mode of ['cut', 'blackhole']) {
    for (const proxy of slot.proxies.values()) (mode === 'cut' ? proxy.cut() : proxy.blackhole({ holdCloses: true }));
    if (mode === 'cut') await until(`slot ${slot.slot} to notice the cut`, () => (slot.state !== 'connected') || undefined, 20_000);
    bursts.push(...(await tryOnceBurst([slot], opts.tryOnceBurstMs, record.fault, mode === 'cut' ? 'cut off' : 'silenced')));
    for (const proxy of slot.proxies.values()) proxy.restore();
    await until(`slot ${slot.slot} to reconnect`, () => (slot.state === 'connected') || undefined, opts.sessionTimeoutMs + 20_000);
  }
  record.tryOnce = bursts.map(({ mode, count, maxMs, maxLoopDelayMs, reasons }) => ({ mode, count, maxMs, maxLoopDelayMs, reasons }));
  await settle('after the try-once outage');
  record.observed = bursts.length === 2 && bursts.every(burstOk);
  record.evidence = bursts.map(describeBurst).join('; ') || 'no burst reported';
  return record;
}
