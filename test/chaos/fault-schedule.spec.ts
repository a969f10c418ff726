// Randomized fault schedules (scripts/chaos/schedule/): each seed draws a recipe with its options
// (mutex: coalesce, retainMs, releaseInBackground, leaseMs; semaphore; read-write with downgrade;
// multi-lock; leader election), 3-5 clients (a session each, behind its own TCP proxy, with 1-3
// local callers) and faults at random moments (reset and silent cuts of one client, slow replies,
// a session killed, an engine shut down and reopened, a foreign client's set and delete of a lock
// node, a stall of the whole process; leaseMs runs out by itself), then checks the whole history:
// no two holders with live signals (from each holder's own view), tokens that only grow, no
// acquire past its waitMs (+ a session timeout + 5 s), no ephemeral node left after the clients
// close. A fixed set of seeds here; `npm run chaos -- --schedules N` draws more.
// Replay one: SCHEDULE_SEED=<seed> node --experimental-vm-modules node_modules/jest/bin/jest.js test/chaos/fault-schedule.spec.ts
import * as lib from '../../lib/core/index.js';
import { describeSchedule, faultListing, generateSchedule } from '../../scripts/chaos/schedule/generate.mjs';
import { runSchedule } from '../../scripts/chaos/schedule/run-schedule.mjs';
import { zkConnectString } from '../support/helpers.js';

/**
 * Chosen (from the first 300 seeds' schedules) so that together they draw every recipe, every
 * mutex option and every fault kind: 118 mutex with coalesce + retainMs + releaseInBackground +
 * leaseMs under cuts, slow replies, a stall and a shutdown; 259 read-write with downgrade and
 * leaseMs, a killed session and foreign deletes (failed on 2e2051d: a downgrade after the write
 * lease was lost took the writer's number, a read token below writers granted since); 255 a
 * 3-permit semaphore (several permits at once); 150 multi-lock (mutex + read half); 256 leader
 * election with a killed session and a deleted leader node; and two more that failed on 2e2051d
 * (before the reconnect and downgrade fixes):
 * 11 (a downgrade in a new session took the lost writer's number: a read token below the writers
 * granted since) and 22 (a coalesced multi-lock member handed over locally on a node of a session
 * killed 3.7 s before, with the lowest token). 7-15 s each.
 * None of them slows a client's replies while a foreign client deletes a lock node: that draw
 * finds an open defect (scripts/chaos/schedule/repro-slow-own-delete.mjs) on today's code.
 */
const FIXED_SEEDS = [118, 259, 255, 150, 256, 11, 22];
const SEEDS = process.env.SCHEDULE_SEED ? process.env.SCHEDULE_SEED.split(',').map(Number) : FIXED_SEEDS;
const DURATION_MS = Number(process.env.SCHEDULE_MS ?? 5000);

describe('Fault schedules (seeded; SCHEDULE_SEED=<seed> replays one)', () => {
  for (const seed of SEEDS) {
    const schedule = generateSchedule(seed, { durationMs: DURATION_MS });
    it(`seed ${seed}: ${describeSchedule(schedule)} — no two live holders, growing tokens, no hang, no orphan`, async () => {
      const result = await runSchedule({ lib, connectString: zkConnectString(), schedule, log: (line) => console.log(line) });
      if (!result.ok) {
        console.log(
          `fault schedule seed ${seed} FAILED (replay with SCHEDULE_SEED=${seed}):\n${describeSchedule(schedule)}\n${faultListing(schedule)}\n` +
            `violations:\n  ${result.violations.slice(0, 20).join('\n  ')}\nhistory (last 120 events):\n${result.events.slice(-120).join('\n')}`,
        );
      }
      expect(result.violations).toEqual([]);
      expect(result.stats.holds).toBeGreaterThan(0);
    }, 90_000);
  }
});
