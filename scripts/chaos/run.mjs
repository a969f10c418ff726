#!/usr/bin/env node
// Chaos run: lock recipes under ZooKeeper faults, on a throw-away 3-node ensemble.
//
//   node scripts/chaos/run.mjs [--seconds N] [--short] [--processes N] [--json FILE] [--verbose]
//                              [--faults leader,follower,partition,silent-partition,notify-partition,pause,kill-holder,
//                                        kill-waiter,rolling-restart,foreign-set,try-once-outage,ensemble,follower-cut]
//                                        (and kept-node-delete)
//
// Needs the built package (`npm run build`) and ZooKeeper (`bash scripts/zookeeper.sh install`).
//
// What it does:
// - starts a 3-node ensemble with scripts/zookeeper.sh (stopped again at the end, also if this
//   process dies: --owner-pid), its servers linked through forwarders in this process (peerLinks);
// - starts one loopback TCP proxy per (worker process, ensemble member), so a worker reaches
//   ZooKeeper only through its own three proxies and can be cut off alone;
// - forks worker processes (scripts/chaos/worker.mjs) that loop on a mutex, a semaphore
//   (permits 2) and a read-write lock, and each join one leader election (while a process leads,
//   it increments the store's leader counter with its term's fencing token). This process never
//   holds a ZooKeeper connection (what it observes must not depend on the library under test):
//   it talks to ZooKeeper only with four-letter words, and the final check runs in a child process;
// - is the workers' data store, over the IPC channel: a fenced counter per lock and one for the
//   leader's terms. A read or write carrying a token lower than one the store has seen is
//   rejected and counted;
// - injects each fault at least once: kill -9 of the ZooKeeper leader (restarted later), kill -9 of a
//   follower a client is connected to (restarted), a holder partitioned past its session timeout
//   with its connections closed and silently (nothing passes, nothing closes; its late write must
//   be rejected), SIGSTOP of a holder (in the leading process) past the session timeout then SIGCONT,
//   the whole ensemble killed and restarted (with try-once traffic from every worker while it is
//   down), a worker SIGKILLed while holding and while waiting, the worker next in line silenced
//   right after the watch event that makes it the holder (the head's deletion) reached it, a
//   rolling restart (SIGTERM with a critical section longer than shutdownGraceMs and short ones
//   in flight: engine.shutdown(), close, exit 0, then a new worker), a foreign client's `set` on
//   every lock node (twice, while a holder is in a long critical section) then a delete of that
//   holder's node, try-once traffic while a worker is cut off and while it is silenced, a follower
//   cut off from the other servers (its client port up: it answers its clients until it gives up
//   on the leader) past the session timeout, with a holder (the leading process) on it alone;
//   a foreign delete of a kept (retainMs) or coalesced node while its process is partitioned (reset
//   and silently, shorter than the session timeout) and another process takes the lock, with an
//   acquire (or a local handoff) by that process at its reconnect (faults/kept-node-delete.mjs);
// - watches the ensemble all along (the observer: the leader's `dump` every 100 ms) to know when
//   each lock node disappeared;
// - stops the workers, waits for the dead sessions to expire, counts the lock nodes left behind
//   from a fresh client, stops the ensemble and prints the tables (exit code 1 if a check failed).
//
// --short: one pass over the faults with a 4 s session timeout (the Jest variant, about 90 s).
// Default: 150 s (--seconds), 6 s session timeout; faults repeat until the time is up (one full
// pass always runs). --json FILE writes the result; exit code 0 = every check passed, 1 = a check
// failed, 2 = the run itself failed.
//
// One clock: every process reports process.hrtime (CLOCK_MONOTONIC, shared by all processes of
// the machine); the proxies' timestamps are converted to it.
//
// Fault table: "fault → ..." times are measured from the fault: for server kills from the moment
// the killed server(s) are certainly gone, for holder faults from the cut / SIGSTOP / SIGKILL.
// "old session gone" is when the leader's `dump` no longer lists the victim session's ephemeral
// nodes (polled every 50 ms); "next holder after old session gone" compares the next holder's
// acquisition with the last poll that still listed them (sound, no false alarm). Overlaps: two
// holders whose own intervals [acquired, released-or-lost] overlap; those involving a holder that
// was lost, SIGKILLed or SIGSTOPped are expected (fencing is what protects the data then), any
// other is a failure.
// The promise itself ("while lease.signal has not aborted, nobody else holds the lock"), from each
// holder's own view (workers report when acquire() resolved, when the signal aborted, when they
// stopped using the lock): the time two holders of a lock overlapped while neither signal had
// aborted (semaphore: more than `permits` such holders at once) must be 0, excusing only holders
// SIGSTOPped through their hold and the holder whose node the foreign client deleted. And every
// lost signal is judged against the server's end of that hold (its node disappeared as the
// observer saw it, or another holder acquired): a signal after it is LATE (a failure). Try-once
// calls during outages must fail for want of a connection within 2 s (+ 250 ms for timers firing
// late; the worker's worst event-loop delay is reported alongside). Stale writes are judged by
// acquisition order, independently of the tokens.
// Leader election: each term is a hold of lock 'leader' [gained, signal aborted | process died],
// so the promise (no two terms overlapping while neither signal had aborted), the lost-signal
// margins and the token order apply to it. Overlapping leaders in the store's view (two terms'
// accepted operations interleaved, or a write accepted from a term older than one that had used
// the store) must be 0. Reported with them: leadership changes and failover times (from a term's
// end, its process's death or SIGSTOP, to the next `gained`), p50 / max
// (leadership-verdict.mjs).
// Token order in the store: an operation from a token lower than one the store had already seen
// is a violation when accepted (the fencing check makes that impossible) and is counted as one that
// would have been when rejected (deliberate late writes left out); for the kept-node fault, whose
// holders use the store at once with live signals, both must be 0.

// The parts, one concern each: options.mjs (this command line), clock.mjs, ensemble.mjs (the
// servers and their `dump`), observer.mjs, state.mjs (what the workers reported), store.mjs (the
// fenced store), workers.mjs (the processes), faults/*.mjs, analysis.mjs, leadership-verdict.mjs,
// report.mjs.
import { setTimeout as sleep } from 'node:timers/promises';
import { TcpProxy } from '../support/tcp-proxy.mjs';
import { startEnsemble } from '../support/zookeeper.mjs';
import { log, now, T0 } from './clock.mjs';
import { SERVER_IDS, serverPort, waitForLeader, ZK } from './ensemble.mjs';
import { followerCut } from './faults/follower-cut.mjs';
import { foreignSet } from './faults/foreign-set.mjs';
import { keptNodeDelete } from './faults/kept-node-delete.mjs';
import { killHolder, killWaiter, partitionHolder, pauseHolder, rollingRestart } from './faults/holders.mjs';
import { notifyPartition } from './faults/notify-partition.mjs';
import { killFollower, killLeader, restartEnsemble } from './faults/servers.mjs';
import { tryOnceOutage } from './faults/try-once.mjs';
import { observer, startObserver, stopObserver } from './observer.mjs';
import { args, HARD_LIMIT_MS, opts } from './options.mjs';
import { report } from './report.mjs';
import { BASE, faults, leaderSlot, liveSlots, run, slots, stuckAtStop, until } from './state.mjs';
import { runCheck, spawnWorker } from './workers.mjs';

async function cleanup() {
  if (run.cleanedUp) return;
  run.cleanedUp = true;
  run.stopping = true;
  observer.stopped = true;
  for (const slot of slots) {
    if (slot.child && !slot.exited) {
      slot.child.expectedExit = true;
      try {
        process.kill(slot.child.pid, 'SIGCONT');
        process.kill(slot.child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  for (const slot of slots) for (const proxy of slot.proxies?.values() ?? []) await proxy.close().catch(() => undefined);
  await ZK.stop().catch((e) => log(`stopping the ensemble failed: ${e.message}`));
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    log(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}
const hardLimit = setTimeout(() => {
  log(`hard time limit (${HARD_LIMIT_MS / 1000} s) reached: cleaning up`);
  void cleanup().finally(() => process.exit(2));
}, HARD_LIMIT_MS);
hardLimit.unref();

async function main() {
  log(`ensemble in ${ZK.dir}`);
  const { connectString } = await startEnsemble({ dir: ZK.dir, echoStderr: args.verbose, peerLinks: true });
  log(`ensemble up: ${connectString}, leader server ${await waitForLeader(60_000)}`);
  startObserver();

  for (let i = 0; i < opts.processes; i++) {
    const slot = { slot: i, proxies: new Map() };
    for (const id of SERVER_IDS) {
      slot.proxies.set(id, await TcpProxy.start(`127.0.0.1:${serverPort(id)}`));
    }
    slots.push(slot);
    spawnWorker(slot);
  }
  const ready = await until('the workers to connect', () => slots.every((s) => s.ready), 90_000);
  if (!ready) throw new Error('the workers did not connect');
  log(`${opts.processes} workers × (${opts.mutexWorkers} mutex + ${opts.semWorkers} semaphore + ${opts.rwWorkers} rw + 1 election) running on ${BASE}`);
  await sleep(opts.short ? 2000 : 5000);

  const FAULTS = {
    leader: () => killLeader(),
    follower: () => killFollower(),
    partition: () => partitionHolder(slots[0]),
    'silent-partition': () => partitionHolder(slots[0], true),
    // In the leading process, so that the leader too is stopped past its session timeout: another
    // takes over, and whatever it writes on SIGCONT before its signal aborts must be fenced off.
    pause: () => pauseHolder(leaderSlot() ?? slots[1]),
    'kill-holder': () => killHolder(slots[2]),
    'kill-waiter': () => killWaiter(),
    'notify-partition': () => notifyPartition(),
    'rolling-restart': () => rollingRestart(slots[2]),
    'foreign-set': () => foreignSet(slots[1]),
    'try-once-outage': () => tryOnceOutage(slots[0]),
    ensemble: () => restartEnsemble(),
    'follower-cut': () => followerCut(),
    'kept-node-delete': () => keptNodeDelete(),
  };
  const pass = (args.faults ?? Object.keys(FAULTS).join(',')).split(',').map((name) => FAULTS[name.trim()]);
  const deadline = T0 + opts.seconds * 1000;
  // A fault plus its recovery takes at most about this long; do not start one that cannot finish.
  const faultBudget = opts.sessionTimeoutMs * 2 + 15_000;
  for (let round = 0; ; round++) {
    for (let i = 0; i < pass.length; i++) {
      if (round > 0 && now() + faultBudget > deadline) break;
      const startedAt = now();
      let record;
      try {
        record = await pass[(i + round) % pass.length]();
      } catch (error) {
        record = { fault: `fault #${i}`, at: startedAt, observed: false, evidence: `failed: ${error.message}` };
      }
      faults.push(record);
      log(`${record.fault} → ${record.observed ? 'observed' : 'NOT OBSERVED'}: ${record.evidence}`);
    }
    if (now() + faultBudget > deadline) break;
  }
  if (now() < deadline) await sleep(deadline - now());

  // Stop the workers: they finish their holds, close their sessions and exit.
  log('stopping the workers');
  run.stopping = true;
  for (const slot of liveSlots()) {
    slot.child.expectedExit = true;
    slot.child.send({ cmd: 'stop' });
  }
  await until('the workers to exit', () => slots.every((s) => s.exited), 30_000);
  for (const slot of liveSlots()) {
    stuckAtStop.push({ slot: slot.slot, pid: slot.pid, where: slot.stuck, stderr: slot.stderr.join('').slice(-2000) });
    log(`slot ${slot.slot} (pid ${slot.pid}) did not exit: SIGKILL`);
    process.kill(slot.pid, 'SIGKILL');
  }
  await until(undefined, () => slots.every((s) => s.exited), 10_000);

  // Orphans: lock nodes still there a session timeout after the last worker ended.
  await sleep(opts.sessionTimeoutMs + 2000);
  await stopObserver();
  const nodes = await runCheck(connectString);
  const orphanList = Array.isArray(nodes) ? nodes.filter((n) => n.ephemeralOwner !== '0') : [];
  let orphansLater;
  if (orphanList.length > 0) {
    await sleep(opts.sessionTimeoutMs * 2);
    const again = await runCheck(connectString);
    orphansLater = Array.isArray(again) ? again.filter((n) => n.ephemeralOwner !== '0').length : undefined;
  }

  for (const slot of slots) for (const proxy of slot.proxies.values()) await proxy.close();
  await ZK.stop();
  run.cleanedUp = true;

  return report({ nodes, orphanList, orphansLater });
}

try {
  const result = await main();
  process.exitCode = result.passed ? 0 : 1;
} catch (error) {
  log(`run failed: ${error.stack ?? error}`);
  process.exitCode = 2;
} finally {
  await cleanup();
  clearTimeout(hardLimit);
}
// Timers of helpers (until, watchers) are unref'd or finished; leave promptly anyway.
setTimeout(() => process.exit(), 500).unref();
