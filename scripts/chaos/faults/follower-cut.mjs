// A follower cut off from the leader while its client port stays up.
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../../support/zookeeper.mjs';
import { ms, now } from '../clock.mjs';
import { SERVER_IDS, waitForLeader, watchSession, ZK } from '../ensemble.mjs';
import { opts } from '../options.mjs';
import { firstAcquisition, leaderSlot, liveSlots, lostEvents, until } from '../state.mjs';
import { holderFor, settle } from '../workers.mjs';

/**
 * One follower's links to the other servers go silent (nothing passes, nothing closes), its client
 * port stays up: it goes on answering its clients' reads and pings until it gives up on the leader
 * (syncLimit × tickTime, 5 s), while the leader, hearing nothing of their sessions, expires them
 * after the session timeout and hands their locks on. One worker process (the leading one, so its
 * term is at stake too) reaches that follower alone (its proxies to the other two refuse) and holds
 * the mutex until told; the cut lasts until its session is gone and another process holds the
 * mutex. The verdict is the overlap check's: no other process may hold while a signal of the cut
 * off process is live.
 */
export async function followerCut() {
  const leader = await waitForLeader(30_000);
  if (leader === undefined) throw new Error('no ZooKeeper leader within 30 s');
  const victim = SERVER_IDS.find((id) => id !== leader);
  const others = SERVER_IDS.filter((id) => id !== victim);
  const slot = leaderSlot() ?? liveSlots()[0];
  const record = { fault: 'follower cut off from the leader, its client port up, past session timeout', target: `server ${victim}, slot ${slot.slot} (pid ${slot.pid}) on it alone` };
  const proxies = others.map((id) => slot.proxies.get(id));
  for (const proxy of proxies) proxy.cut();
  let hold;
  try {
    // On the victim, and still so a second later.
    let since;
    const onIt = await until(`slot ${slot.slot} to reconnect through server ${victim}`, () => {
      const on = slot.proxies.get(victim).connections > 0 && slot.state === 'connected';
      since = on ? (since ?? now()) : undefined;
      return on && now() - since > 1000;
    }, 30_000);
    if (!onIt) return { ...record, at: now(), observed: false, evidence: `slot ${slot.slot} did not connect through server ${victim}` };
    record.leading = leaderSlot() === slot;
    hold = await holderFor(slot, 'long');
    if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
    await sleep(200); // the other processes queue behind it
    const at = now();
    record.at = at;
    ZK.isolate(victim);
    let watch;
    try {
      watch = watchSession(hold.sessionId);
      const lost = await until('the cut off holder to see its lease lost', () => lostEvents.find((e) => e.holdId === hold.holdId), opts.sessionTimeoutMs + 20_000);
      const next = await until('another holder after the follower cut', () => firstAcquisition(at, { excludePid: slot.pid }), opts.sessionTimeoutMs + 30_000);
      await until('the cut off session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
      Object.assign(record, {
        lostMs: ms(at, lost?.at),
        lostReason: lost?.reason,
        sessionGoneMs: ms(at, watch.goneAt),
        nextHolderMs: ms(at, next?.acquiredAt),
        // Positive: the holder was told only after another process already held the mutex.
        signalAfterNextHolderMs: lost && next ? Math.round(lost.at - next.acquiredAt) : undefined,
      });
    } finally {
      await watch?.stop();
      ZK.rejoin(victim);
    }
  } finally {
    for (const proxy of proxies) proxy.restore();
    if (hold && !lostEvents.some((e) => e.holdId === hold.holdId)) slot.child.send({ cmd: 'go' });
  }
  const back = await waitFor(`server ${victim} to rejoin`, async () => ((await ZK.mode(victim, 1000)) === 'follower' ? true : undefined), 60_000).catch(() => undefined);
  await settle('after the follower cut');
  record.observed = record.lostMs !== undefined && record.nextHolderMs !== undefined && record.sessionGoneMs !== undefined && Boolean(back);
  record.evidence =
    `lost signal (${record.lostReason ?? 'none'}) after ${record.lostMs ?? '-'} ms; the session's nodes gone after ${record.sessionGoneMs ?? '-'} ms; ` +
    `another process held the mutex after ${record.nextHolderMs ?? '-'} ms; the signal came ${record.signalAfterNextHolderMs === undefined ? '-' : record.signalAfterNextHolderMs > 0 ? `${record.signalAfterNextHolderMs} ms AFTER` : `${-record.signalAfterNextHolderMs} ms before`} it; ` +
    `${record.leading ? 'the slot led the election; ' : ''}server ${victim} ${back ? 'rejoined' : 'did NOT rejoin'}`;
  return record;
}
