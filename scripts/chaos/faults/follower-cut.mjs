// A follower cut off from the leader while its client port stays up.
import { waitFor } from '../../support/zookeeper.mjs';
import { ms, now } from '../clock.mjs';
import { SERVER_IDS, waitForLeader, watchSession, ZK } from '../ensemble.mjs';
import { opts } from '../options.mjs';
import { firstAcquisition, holds, leaderSlot, lostEvents, until } from '../state.mjs';
import { settle } from '../workers.mjs';

/**
 * One follower's links to the other servers go silent (nothing passes, nothing closes), its client
 * port stays up: it goes on answering its clients' reads and pings until it gives up on the leader
 * (syncLimit × tickTime, 5 s), while the leader, hearing nothing of their sessions, expires them
 * after the session timeout and hands their locks on. The leading worker process reaches that
 * follower alone (its proxies to the other two refuse) and is quiet (its loops paused: a write in
 * flight would hold back its session's later reads at the follower, and give the cut away), so its
 * session carries nothing but the library's heartbeats while its term is at stake. The cut lasts
 * until its session is gone and another process leads. The verdict is the overlap check's: no
 * other process may lead while the cut off term's signal is live.
 */
export async function followerCut() {
  const leader = await waitForLeader(30_000);
  if (leader === undefined) throw new Error('no ZooKeeper leader within 30 s');
  const victim = /** @type {number} */ (SERVER_IDS.find((id) => id !== leader));
  const others = SERVER_IDS.filter((id) => id !== victim);
  const record = { fault: 'follower cut off from the leader, its client port up, past session timeout', target: `server ${victim}` };
  const slot = await until('a process to lead the election', () => leaderSlot(), 30_000);
  if (!slot) return { ...record, at: now(), observed: false, evidence: 'no process led the election' };
  record.target += `, slot ${slot.slot} (pid ${slot.pid}, leading) on it alone`;
  const proxies = others.map((id) => slot.proxies.get(id));
  for (const proxy of proxies) proxy.cut();
  slot.quietIdle = false;
  slot.child.send({ cmd: 'quiet', on: true });
  try {
    // On the victim, and still so a second later.
    let since;
    const onIt = await until(`slot ${slot.slot} to reconnect through server ${victim}`, () => {
      const on = slot.proxies.get(victim).connections > 0 && slot.state === 'connected';
      since = on ? (since ?? now()) : undefined;
      return on && now() - since > 1000;
    }, 30_000);
    if (!onIt) return { ...record, at: now(), observed: false, evidence: `slot ${slot.slot} did not connect through server ${victim}` };
    const idle = await until(`slot ${slot.slot} to pause its loops`, () => slot.quietIdle || undefined, 30_000);
    const term = [...holds.values()].find((h) => h.lock === 'leader' && h.end === 'open' && h.pid === slot.pid);
    if (!idle || !term) return { ...record, at: now(), observed: false, evidence: !idle ? 'the slot did not pause its loops' : 'the slot no longer led once on the follower' };
    const at = now();
    record.at = at;
    ZK.isolate(victim);
    let watch;
    try {
      watch = watchSession(term.sessionId);
      const lost = await until('the cut off term to end', () => lostEvents.find((e) => e.holdId === term.holdId), opts.sessionTimeoutMs + 20_000);
      const next = await until('another process to lead after the follower cut', () => firstAcquisition(at, { lock: 'leader', excludePid: slot.pid }), opts.sessionTimeoutMs + 30_000);
      await until('the cut off session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
      Object.assign(record, {
        lostMs: ms(at, lost?.at),
        lostReason: lost?.reason,
        sessionGoneMs: ms(at, watch.goneAt),
        nextHolderMs: ms(at, next?.acquiredAt),
        // Positive: the term's signal came only after another process led.
        signalAfterNextHolderMs: lost && next ? Math.round(lost.at - next.acquiredAt) : undefined,
      });
    } finally {
      await watch?.stop();
      ZK.rejoin(victim);
    }
  } finally {
    for (const proxy of proxies) proxy.restore();
    slot.child.send({ cmd: 'quiet', on: false });
  }
  const back = await waitFor(`server ${victim} to rejoin`, async () => ((await ZK.mode(victim, 1000)) === 'follower' ? true : undefined), 60_000).catch(() => undefined);
  await settle('after the follower cut');
  record.observed = record.lostMs !== undefined && record.nextHolderMs !== undefined && record.sessionGoneMs !== undefined && Boolean(back);
  record.evidence =
    `term's signal (${record.lostReason ?? 'none'}) after ${record.lostMs ?? '-'} ms; the session's nodes gone after ${record.sessionGoneMs ?? '-'} ms; ` +
    `another process led after ${record.nextHolderMs ?? '-'} ms; the signal came ${record.signalAfterNextHolderMs === undefined ? '-' : record.signalAfterNextHolderMs > 0 ? `${record.signalAfterNextHolderMs} ms AFTER` : `${-record.signalAfterNextHolderMs} ms before`} it; ` +
    `server ${victim} ${back ? 'rejoined' : 'did NOT rejoin'}`;
  return record;
}
