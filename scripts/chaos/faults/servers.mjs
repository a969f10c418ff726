// Faults of the servers: kill -9 of the leader, of a follower with clients, of the whole ensemble.
import { setTimeout as sleep } from 'node:timers/promises';
import { ms, now } from '../clock.mjs';
import { SERVER_IDS, waitForLeader, ZK } from '../ensemble.mjs';
import { opts } from '../options.mjs';
import { firstAcquisition, firstLost, liveSlots, stateEvents, suspendedSince, until } from '../state.mjs';
import { settle } from '../workers.mjs';
import { burstOk, describeBurst, tryOnceBurst } from './try-once.mjs';

export async function killLeader() {
  const leader = await waitForLeader(30_000);
  if (leader === undefined) throw new Error('no ZooKeeper leader within 30 s');
  const record = { fault: 'kill -9 leader', target: `server ${leader}` };
  const at = now();
  record.at = at;
  await ZK.stopServer(leader, 'SIGKILL');
  const downAt = now(); // the server is certainly dead from here
  const newLeader = await waitForLeader(60_000, [leader]);
  record.newLeaderMs = ms(downAt, now());
  const next = await until('a mutex holder after the leader kill', () => firstAcquisition(downAt), 60_000);
  record.nextHolderMs = ms(downAt, next?.acquiredAt);
  await sleep(opts.downMs);
  await ZK.restartServer(leader);
  record.restartedMs = ms(downAt, now());
  const lost = firstLost(at);
  record.lostMs = ms(downAt, lost?.at);
  record.lostReason = lost?.reason;
  await settle('after the leader kill');
  const suspended = suspendedSince(at);
  record.observed = newLeader !== undefined && suspended.size > 0;
  record.evidence = `new leader: server ${newLeader ?? 'none'} after ${record.newLeaderMs} ms; ${suspended.size} worker connection(s) suspended; next holder after ${record.nextHolderMs ?? '-'} ms; old leader restarted after ${record.restartedMs} ms, back as ${await ZK.mode(leader, 1000)}`;
  return record;
}

export async function killFollower() {
  const leader = await waitForLeader(30_000);
  const followers = SERVER_IDS.filter((id) => id !== leader);
  const clients = (id) => liveSlots().filter((s) => s.proxies.get(id).connections > 0);
  // The follower with the most of our clients; wait a moment for one to have any.
  const pick = await until(undefined, () => followers.find((id) => clients(id).length > 0), 5_000);
  const victim = pick ?? followers[0];
  let moved = '';
  if (pick === undefined) {
    // Nobody is on a follower: move one client there by refusing it the other two servers for a moment.
    const slot = liveSlots()[0];
    const others = SERVER_IDS.filter((id) => id !== victim);
    for (const id of others) slot.proxies.get(id).cut();
    // Connected through it, and still so a second later (a lagging follower may refuse the session).
    let since;
    await until(`slot ${slot.slot} to reconnect through server ${victim}`, () => {
      const on = slot.proxies.get(victim).connections > 0 && slot.state === 'connected';
      since = on ? (since ?? now()) : undefined;
      return on && now() - since > 1000;
    }, 30_000);
    for (const id of others) slot.proxies.get(id).restore();
    moved = ` (moved slot ${slot.slot} onto it first)`;
    await sleep(500);
  }
  const affected = clients(victim).map((s) => s.slot);
  const record = { fault: 'kill -9 follower with clients', target: `server ${victim} (slots ${affected.join(',') || 'none'})` };
  const at = now();
  record.at = at;
  await ZK.stopServer(victim, 'SIGKILL');
  const downAt = now();
  const back = await until('the clients of the killed follower to reconnect', () =>
    affected.every((slot) => stateEvents.some((e) => e.slot === slot && e.at > at && e.state === 'connected')) || undefined, 60_000);
  record.reconnectedMs = back && affected.length > 0 ? ms(at, Math.max(...affected.map((slot) => stateEvents.find((e) => e.slot === slot && e.at > at && e.state === 'connected').at))) : undefined;
  const next = await until('a mutex holder after the follower kill', () => firstAcquisition(downAt), 60_000);
  record.nextHolderMs = ms(downAt, next?.acquiredAt);
  const lost = firstLost(at);
  record.lostMs = ms(downAt, lost?.at);
  record.lostReason = lost?.reason;
  await sleep(opts.downMs);
  await ZK.restartServer(victim);
  await settle('after the follower kill');
  const suspended = suspendedSince(at);
  const sameSession = affected.filter((slot) =>
    stateEvents.some((e) => e.slot === slot && e.at > at && e.state === 'connected' && e.previous === 'suspended'),
  );
  record.observed = affected.length > 0 && affected.every((slot) => suspended.has(`${slot}`)) && Boolean(back);
  record.evidence = `slots on it: ${affected.join(',') || 'none'}${moved}; suspended: ${[...suspended].join(',') || 'none'}; back on the same session: ${sameSession.join(',') || 'none'}, ${record.reconnectedMs ?? '-'} ms after the kill was sent`;
  return record;
}

export async function restartEnsemble() {
  const record = { fault: 'whole ensemble killed and restarted', target: 'servers 1,2,3' };
  const at = now();
  record.at = at;
  await Promise.all(SERVER_IDS.map((id) => ZK.stopServer(id, 'SIGKILL')));
  const downAt = now();
  // Try-once traffic from every worker while nothing answers.
  const bursts = await tryOnceBurst(liveSlots(), Math.max(500, opts.downMs - 300), record.fault, 'ensemble down');
  await sleep(Math.max(0, downAt + opts.downMs - now()));
  await Promise.all(SERVER_IDS.map((id) => ZK.restartServer(id)));
  record.restartedMs = ms(downAt, now());
  const leader = await waitForLeader(60_000);
  const next = await until('a mutex holder after the ensemble restart', () => firstAcquisition(downAt), opts.sessionTimeoutMs * 2 + 60_000);
  record.nextHolderMs = ms(downAt, next?.acquiredAt);
  const lost = firstLost(at);
  record.lostMs = ms(downAt, lost?.at);
  record.lostReason = lost?.reason;
  await settle('after the ensemble restart');
  const suspended = suspendedSince(at);
  record.tryOnce = bursts.map(({ slot, count, maxMs, maxLoopDelayMs, reasons }) => ({ slot, count, maxMs, maxLoopDelayMs, reasons }));
  record.observed = leader !== undefined && liveSlots().every((s) => suspended.has(`${s.slot}`)) && Boolean(next) && bursts.length > 0 && bursts.every(burstOk);
  record.evidence =
    `back (leader server ${leader ?? 'none'}) after ${record.restartedMs} ms; ${suspended.size}/${liveSlots().length} workers suspended; next holder after ${record.nextHolderMs ?? '-'} ms; ` +
    `while down: ${bursts.map((b) => `slot ${b.slot} ${describeBurst(b).replace(/^ensemble down: /, '')}`).join('; ') || 'no try-once burst reported'}`;
  return record;
}
