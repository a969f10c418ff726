// Randomized fault schedules (scripts/chaos/schedule/): each seed draws a recipe with its options
// (mutex: coalesce, retainMs, releaseInBackground, leaseMs; semaphore; read-write with downgrade;
// multi-lock; leader election), 3-5 clients (a session each, behind its own TCP proxy, with 1-3
// local callers) and faults at random moments (reset and silent cuts of one client, slow replies,
// a session killed, an engine shut down and reopened, a foreign client's set and delete of a lock
// node, a stall of the whole process; leaseMs runs out by itself), then checks the whole history:
// no two holders with live signals (from each holder's own view), tokens that only grow, no
// acquire past its waitMs (+ a session timeout + 5 s), no ephemeral node left after the clients
// close. On servers of their own, the edge faults too (generate.mjs's EDGE_FAULT_KINDS, where the
// session's deadline and the frame limit live): a stall inside a client's handshake, a reply over
// 1 MiB (a flood of queued nodes, which the clients under test must be able to list), a server
// restarted (maybe with a lower maxSessionTimeout, which a client re-attaching there negotiates,
// then its link silent), and on the ensemble a follower lagging behind the leader; during one,
// the client's holders keep what they hold until their signal's abort event. A fixed set of seeds
// here; `npm run chaos -- --schedules N [--ensemble]` draws more.
// Replay one: SCHEDULE_SEED=<seed> [SCHEDULE_SERVER=standalone|ensemble] node --experimental-vm-modules node_modules/jest/bin/jest.js test/chaos/fault-schedule.spec.ts
// (or the same schedule from `npm run chaos -- --seeds <seed> --schedule-ms 5000` / `--schedule-ms 6000 --ensemble`).
import * as lib from '../../lib/core/index.js';
import { describeSchedule, faultListing, generateSchedule, type ServerKind } from '../../scripts/chaos/schedule/generate.mjs';
import { runSchedule } from '../../scripts/chaos/schedule/run-schedule.mjs';
import { serverControl, type ServerControl } from '../../scripts/chaos/schedule/servers.mjs';
import { zkConnectString } from '../support/helpers.js';
import { startEnsemble, startStandalone, TICK_TIME_MS, type ZkServerHandle } from '../support/zk-server.js';

/**
 * On the suite's server (no edge faults: these schedules are as they were chosen, from the first
 * 300 seeds) so that together they draw every recipe, every mutex option and every other fault
 * kind: 118 mutex with coalesce + retainMs + releaseInBackground + leaseMs under cuts, slow
 * replies, a stall and a shutdown; 259 read-write with downgrade and leaseMs, a killed session and
 * foreign deletes (failed on 2e2051d: a downgrade after the write lease was lost took the writer's
 * number, a read token below writers granted since); 255 a 3-permit semaphore (several permits at
 * once); 150 multi-lock (mutex + read half); 256 leader election with a killed session and a
 * deleted leader node; and two more that failed on 2e2051d (before the reconnect and downgrade
 * fixes): 11 (a downgrade in a new session took the lost writer's number: a read token below the
 * writers granted since) and 22 (a coalesced multi-lock member handed over locally on a node of a
 * session killed 3.7 s before, with the lowest token). 7-15 s each.
 * None of them slows a client's replies while a foreign client deletes a lock node: that draw
 * finds an open defect (scripts/chaos/schedule/repro-slow-own-delete.mjs) on today's code.
 */
const SHARED_SEEDS = [118, 259, 255, 150, 256, 11, 22];
/**
 * On a standalone server of their own (5 s of faults, session timeout 4000 ms), between them
 * every edge fault a standalone server has: 7 mutex (coalesce) with a handshake stall of a new
 * session (ConnectResponse 1.1 s late, then its link silent) and a restart back with
 * maxSessionTimeout 1500, the holder's link then silent for 5.7 s; 56 mutex (coalesce,
 * releaseInBackground) with a flood of 24 910 queued nodes (1.5 MB) and a handshake stall of a
 * new session. 9-13 s each.
 */
const STANDALONE_SEEDS = [7, 56];
/**
 * On a 3-server ensemble of their own (6 s of faults, session timeout 6000 ms), between them every
 * edge fault: 197 a 2-permit semaphore with a follower restarted with maxSessionTimeout 1250, the
 * holder moved there once it serves and its link then silent for 6.7 s (the re-attach negotiates
 * 1250 ms; fails on daf4441, 6 runs of 6: the server expired the session and gave its slot away
 * 1.5-2.2 s after the silence began, the holder's abort event came 2.6-3.9 s after it, on the
 * timer armed with the first timeout: issue #34 item 2); 76
 * read-write (downgrade, leaseMs) with a follower whose acks and touches reach the leader 366 ms
 * late, then not at all; 15 a 2-permit semaphore (several permits at once) with a handshake stall
 * of a new session on a follower whose touches are cut off right after the ConnectResponse
 * reached the client, and a flood of 29 829 queued nodes (1.8 MB). 13-23 s each.
 * The floods (56, 15) fail until replies over 1 MiB are served (issue #34 item 3): the client
 * drops its link on such a reply, and no listing ever succeeds.
 */
const ENSEMBLE_SEEDS = [197, 76, 15];

const REPLAY = process.env.SCHEDULE_SEED?.split(',').map(Number);
const REPLAY_ON = (process.env.SCHEDULE_SERVER ?? 'shared') as ServerKind;
const DURATION_MS = process.env.SCHEDULE_MS ? Number(process.env.SCHEDULE_MS) : undefined;

/** The seeds a describe runs: its own, or the replayed ones if they are for its server. */
function seedsFor(server: ServerKind, fixed: number[]): number[] {
  if (!REPLAY) return fixed;
  return REPLAY_ON === server ? REPLAY : [];
}

/**
 * One test per seed, on `server` ('shared': the suite's ZooKeeper; else one started for the
 * describe, which the edge faults may restart, cut off or slow).
 */
function scheduleTests(server: ServerKind, seeds: number[], limits: { durationMs: number; sessionTimeoutMs: number; edgeFaultsPerSecond?: number }): void {
  let handle: ZkServerHandle | undefined;
  let control: ServerControl | undefined;
  if (server !== 'shared' && seeds.length > 0) {
    beforeAll(async () => {
      handle = server === 'ensemble' ? await startEnsemble({ peerLinks: true }) : await startStandalone();
      control = serverControl(handle, server);
    }, 120_000);
    afterAll(async () => {
      await handle?.stop();
    });
  }
  for (const seed of seeds) {
    const schedule = generateSchedule(seed, { ...limits, durationMs: DURATION_MS ?? limits.durationMs, server });
    it(`seed ${seed}: ${describeSchedule(schedule)} — no two live holders, growing tokens, no hang, no orphan`, async () => {
      const connectString = handle?.connectString ?? zkConnectString();
      const result = await runSchedule({ lib, connectString, schedule, servers: control, serverTickTimeMs: TICK_TIME_MS, log: (line) => console.log(line) });
      if (!result.ok) {
        console.log(
          `fault schedule seed ${seed} FAILED (replay with SCHEDULE_SEED=${seed}${server === 'shared' ? '' : ` SCHEDULE_SERVER=${server}`}):\n${describeSchedule(schedule)}\n${faultListing(schedule)}\n` +
            `violations:\n  ${result.violations.slice(0, 20).join('\n  ')}\nfaults as they ran:\n${result.events.filter((e) => / fault /.test(e)).join('\n')}\n` +
            `history (last 120 events):\n${result.events.slice(-120).join('\n')}`,
        );
      }
      expect(result.violations).toEqual([]);
      expect(result.stats.holds).toBeGreaterThan(0);
    }, 120_000);
  }
}

describe('Fault schedules on the suite server (seeded; SCHEDULE_SEED=<seed> replays one)', () => {
  scheduleTests('shared', seedsFor('shared', SHARED_SEEDS), { durationMs: 5000, sessionTimeoutMs: 4000, edgeFaultsPerSecond: 0 });
});

describe('Fault schedules with edge faults on a standalone server of their own (SCHEDULE_SERVER=standalone)', () => {
  scheduleTests('standalone', seedsFor('standalone', STANDALONE_SEEDS), { durationMs: 5000, sessionTimeoutMs: 4000 });
});

describe('Fault schedules with edge faults on a 3-server ensemble of their own (SCHEDULE_SERVER=ensemble)', () => {
  scheduleTests('ensemble', seedsFor('ensemble', ENSEMBLE_SEEDS), { durationMs: 6000, sessionTimeoutMs: 6000 });
});
