// A foreign client writes to and deletes lock nodes under a holder.
import { setTimeout as sleep } from 'node:timers/promises';
import { ms, now } from '../clock.mjs';
import { opts } from '../options.mjs';
import { firstAcquisition, holds, liveSlots, lostEvents, mutexHolds, until } from '../state.mjs';
import { holderFor, settle, startForeign } from '../workers.mjs';

/**
 * A foreign client runs `set` on every lock node (held and queued, every recipe), twice, while a
 * holder sits in a long critical section: nobody may be told anything. Then it deletes that
 * holder's node: the holder must be told (node-deleted) and the queue must keep moving (waiters
 * whose predecessor was written to must still notice its release).
 */
export async function foreignSet(slot) {
  const record = { fault: "foreign client: set on every lock node, then delete the holder's node", target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'long');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const foreign = await startForeign();
  if (!foreign) {
    slot.child.send({ cmd: 'go' });
    return { ...record, at: now(), observed: false, evidence: 'the foreign client did not connect' };
  }
  const at = now();
  record.at = at;
  const first = await foreign.ask({ cmd: 'set-all' });
  await sleep(opts.short ? 300 : 1000);
  const second = await foreign.ask({ cmd: 'set-all' });
  await sleep(opts.short ? 700 : 2000);
  const spurious = lostEvents.filter((e) => e.at >= at);
  const deletion = await foreign.ask({ cmd: 'delete', path: hold.path });
  holds.get(hold.holdId).foreignDeleted = true;
  const lost = await until('the holder of the deleted node to be told', () => lostEvents.find((e) => e.holdId === hold.holdId), 10_000);
  record.lostMs = lost && deletion ? ms(deletion.at, lost.at) : undefined;
  record.lostReason = lost?.reason;
  const next = deletion && (await until('another holder after the deletion', () => firstAcquisition(deletion.at, { excludeHoldId: hold.holdId }), 15_000));
  record.nextHolderMs = next && ms(deletion.at, next.acquiredAt);
  // Every process takes the mutex again (each one's predecessor was written to, twice).
  const moving = deletion && (await until('every process to take the mutex after the deletion', () =>
    liveSlots().every((s) => mutexHolds().some((h) => h.pid === s.pid && h.acquiredAt > deletion.at)) || undefined, 20_000));
  record.queueMovedMs = moving ? ms(deletion.at, Math.max(...liveSlots().map((s) => mutexHolds().find((h) => h.pid === s.pid && h.acquiredAt > deletion.at).acquiredAt))) : undefined;
  if (!lost) slot.child.send({ cmd: 'go' });
  await foreign.exit();
  await settle('after the foreign writes');
  const setCount = (first?.set.length ?? 0) + (second?.set.length ?? 0);
  const setHeld = [first, second].filter((a) => a?.set.includes(hold.path)).length;
  record.observed = setHeld === 2 && spurious.length === 0 && deletion?.outcome === 'deleted' && lost?.reason === 'node-deleted' && Boolean(moving);
  record.evidence =
    `set on ${first?.set.length ?? 0} then ${second?.set.length ?? 0} lock node(s) (the long holder's: ${setHeld}/2 times); ` +
    `leases ended by the sets: ${spurious.length}${spurious.length ? ` (${spurious.map((e) => `${e.lock}:${e.reason}`).join(', ')})` : ''}; ` +
    `delete of the holder's node: ${deletion?.outcome ?? 'not done'}; its holder ${lost ? `told after ${record.lostMs} ms (${lost.reason})` : 'NOT told'}; ` +
    `next holder after ${record.nextHolderMs ?? '-'} ms; every process held the mutex again within ${record.queueMovedMs ?? '- (NO)'} ms`;
  record.setCount = setCount;
  return record;
}
