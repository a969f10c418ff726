// The cross-process contention runs of the recipe tests (test/integration/fixtures/recipe-worker.mjs)
// and what they measure: the intervals each worker held, and how many of them overlapped.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { childrenOf, zkConnectString } from './helpers.js';

export const RECIPE_WORKER = fileURLToPath(new URL('../integration/fixtures/recipe-worker.mjs', import.meta.url));

/** An interval a worker held the lock (process.hrtime.bigint(), one clock for the machine's processes). */
export interface Interval {
  kind: string;
  start: bigint;
  end: bigint;
}

export function overlaps(a: Interval, b: Interval): boolean {
  return a.start < b.end && b.start < a.end;
}

/** Largest number of intervals open at one instant (an end and a start at the same instant do not overlap). */
export function maxOverlap(intervals: readonly Interval[]): number {
  const events = intervals.flatMap((i) => [
    { at: i.start, delta: 1 },
    { at: i.end, delta: -1 },
  ]);
  events.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.delta - b.delta));
  let open = 0;
  let max = 0;
  for (const e of events) max = Math.max(max, (open += e.delta));
  return max;
}

/** Runs `processes` recipe-worker processes (settings in `env`) and returns every interval they held the lock. */
export async function runRecipeWorkers(processes: number, env: Record<string, string>): Promise<Interval[]> {
  const startAt = String(Date.now() + 2500); // after every Node process has loaded and connected
  const outputs = await Promise.all(
    Array.from(
      { length: processes },
      () =>
        new Promise<string>((resolve, reject) =>
          execFile(
            process.execPath,
            [RECIPE_WORKER],
            { env: { ...process.env, ZK_CONNECT: zkConnectString(), START_AT: startAt, ...env }, timeout: 150_000, maxBuffer: 16 * 1024 * 1024 },
            (error, stdout, stderr) => (error ? reject(new Error(`worker failed: ${error.message}\n${stderr}`)) : resolve(stdout)),
          ),
        ),
    ),
  );
  return outputs.flatMap((out) =>
    out
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const { kind, start, end } = JSON.parse(line) as { kind: string; start: string; end: string };
        return { kind, start: BigInt(start), end: BigInt(end) };
      }),
  );
}

export interface ChildCountTracker {
  readonly max: number;
  stop(): Promise<number>;
}
const trackers: ChildCountTracker[] = [];

/** Polls the number of children of `path` in the background and remembers the largest seen. */
export function trackMaxChildren(observer: ZkConnection, path: string): ChildCountTracker {
  let max = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      max = Math.max(max, (await childrenOf(observer, path).catch(() => [])).length);
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const tracker = {
    get max() {
      return max;
    },
    stop: async () => {
      running = false;
      await loop;
      return max;
    },
  };
  trackers.push(tracker);
  return tracker;
}

/** Stops every tracker still polling (afterEach: a failed test must not leave its poller running). */
export async function stopChildCountTrackers(): Promise<void> {
  await Promise.all(trackers.splice(0).map((t) => t.stop()));
}
