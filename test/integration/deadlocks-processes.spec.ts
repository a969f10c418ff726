// Deadlocks across processes (lib/core/deadlocks.ts): worker processes of the built package
// (test/integration/fixtures/deadlock-worker.mjs) in a cycle of two and of three, broken by one
// DeadlockError soon after the cycle closes; and a churn of nested locks taken in one order
// across processes (no cycle can form) in which nothing is reported. Needs `npm run build`.
// The churn runs DEADLOCK_CHURN_SECONDS (default 20); for the long run:
//   DEADLOCK_CHURN_SECONDS=60 node --experimental-vm-modules node_modules/jest/bin/jest.js test/integration/deadlocks-processes.spec.ts -t churn
import { inspectDeadlocks } from '../../lib/core/deadlocks.js';
import { inspectLocks } from '../../lib/core/inspect.js';
import { closeAll, connect, uniquePath } from '../support/helpers.js';
import { DeadlockWorker, stopDeadlockWorkers, type WorkerMessage } from '../support/deadlock-workers.js';

afterEach(async () => {
  await stopDeadlockWorkers();
  await closeAll();
});

/** Workers each holding paths[i] and, at "go", waiting for paths[i + 1] (the last for paths[0]), in turn. */
async function cycleOf(count: number, label: string) {
  const root = uniquePath(label);
  const paths = Array.from({ length: count }, (_, i) => `${root}/event:${i + 1}`);
  const workers = paths.map((hold, i) => DeadlockWorker.start({ MODE: 'cycle', HOLD: hold, WAIT: paths[(i + 1) % count]!, INSTANCE: `w${i}` }));
  await Promise.all(workers.map((w) => w.next('holds')));
  // Each waits once the one before it queued: the last one's wait closes the cycle.
  for (const worker of workers.slice(0, -1)) {
    worker.send('go');
    await worker.next('waiting');
  }
  workers.at(-1)!.send('go');
  return { paths, workers };
}

describe('a cycle of waits across processes', () => {
  it.each([2, 3])('%i processes: the wait that began last fails at once with a DeadlockError naming every member; the others acquire', async (count) => {
    const { paths, workers } = await cycleOf(count, `dl-procs${count}`);
    const last = workers.at(-1)!;
    const outcome = await last.next(['failed', 'acquired']);
    expect(outcome).toMatchObject({ event: 'failed', name: 'DeadlockError', reason: 'deadlock' });
    // Members start with the one that gives up; each waits for the lock the next one holds.
    const members = outcome.members as { lock: string; waitsFor: string; instance: string }[];
    expect(members.map((m) => m.instance)).toEqual([`w${count - 1}`, ...Array.from({ length: count - 1 }, (_, i) => `w${i}`)]);
    expect(members.map((m) => m.waitsFor)).toEqual([paths[0], ...paths.slice(1)]);
    expect(members.map((m) => m.lock)).toEqual([paths[count - 1], ...paths.slice(0, -1)]);
    // Within a round trip or two of the cycle closing: its create, then two readings (about 2
    // round trips each per level of the cycle). Bounded generously for a loaded machine.
    process.stdout.write(`deadlock of ${count} processes broken ${String(outcome.ms)} ms after the last wait began\n`);
    expect(outcome.ms as number).toBeLessThan(5_000);
    // The others: the one waiting for the victim's lock acquires, then each in turn back along the cycle.
    for (let i = count - 2; i >= 0; i--) {
      await expect(workers[i]!.next(['acquired', 'failed'])).resolves.toMatchObject({ event: 'acquired' });
      workers[i]!.send('exit');
    }
    last.send('exit');
    await Promise.all(workers.map((w) => w.exited));
  });
});

const CHURN_SECONDS = Number(process.env.DEADLOCK_CHURN_SECONDS ?? 20);

describe('churn', () => {
  it(
    `${CHURN_SECONDS} s of nested locks taken in one order by 3 processes (mutexes, read-write halves, multi-locks, try-once the other way): no DeadlockError, no cycle reported`,
    async () => {
      const observer = await connect();
      const root = uniquePath('dl-churn');
      const workers = Array.from({ length: 3 }, (_, i) =>
        DeadlockWorker.start({ MODE: 'churn', LOCK_ROOT: root, LOCKS: '5', CHAINS: '4', SECONDS: String(CHURN_SECONDS), INSTANCE: `c${i}` }),
      );
      // Meanwhile an operator looks, again and again: never a cycle.
      let looks = 0;
      let nestedWaitsSeen = 0;
      const reported: unknown[] = [];
      let running = true;
      const watcher = (async () => {
        while (running) {
          const locks = await inspectLocks(observer, root).catch(() => []);
          nestedWaitsSeen += locks.flatMap((l) => l.waiting).filter((w) => (w.holder.holds?.length ?? 0) > 0).length;
          reported.push(...(await inspectDeadlocks(observer, root).catch(() => [])));
          looks++;
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      const results: WorkerMessage[] = [];
      try {
        for (const worker of workers) results.push(await worker.result(CHURN_SECONDS * 1000 + 90_000));
      } finally {
        running = false;
        await watcher;
      }
      const total = (key: string) => results.reduce((sum, r) => sum + (Array.isArray(r[key]) ? (r[key] as unknown[]).length : Number(r[key])), 0);
      process.stdout.write(
        `churn ${CHURN_SECONDS} s: ${total('rounds')} rounds, ${total('timeouts')} timeouts, ${total('tryOnceTaken')} try-once taken, ` +
          `${looks} looks, ${nestedWaitsSeen} nested waits seen\n`,
      );
      expect(results.flatMap((r) => r.errors as string[])).toEqual([]);
      expect(results.flatMap((r) => r.deadlocks as string[])).toEqual([]);
      expect(reported).toEqual([]);
      expect(total('timeouts')).toBe(0);
      expect(total('rounds')).toBeGreaterThan(0);
      expect(nestedWaitsSeen).toBeGreaterThan(0);
    },
    CHURN_SECONDS * 1000 + 120_000,
  );
});
