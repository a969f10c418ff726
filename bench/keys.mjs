// Key churn: locks that are rarely reused (a lock per order) leave an empty lock path each. ZooKeeper's
// container reaper removes at most about 10 000 a minute, so under churn they pile up; the library
// keeps at most maxIdleLockPaths (10 000) empty paths it made, deleting the least recently used beyond
// that and any after 60 s (lib/core/operations/container-paths.ts). This runs the same churn
// with the library and with containers left to the reaper (what Curator does), and counts the
// server's znodes during the run and after it (zk_znode_count).
import { BASE, opts, wants } from './options.mjs';
import { mntr, sleep } from './support.mjs';
import { nodeAgent } from './timed.mjs';

const SAMPLE_MS = 500;
/** Left over at most this many above the baseline counts as drained. */
const DRAINED_WITHIN = 50;

/**
 * @param {import('./workloads.mjs').BenchContext} ctx
 */
export async function runKeyChurn({ zk, config, agents, track, results }) {
  if (!wants('keychurn')) return;
  const seconds = opts.quick ? 8 : 30;
  // Ours drains within a minute of the last use (plus a sweep); the reaper at its own pace.
  const drainSeconds = opts.quick ? 70 : 150;
  process.stdout.write(`key churn: ${seconds} s per peer…`);
  const agent = track(nodeAgent('agent-keys', config));
  await agent.ready;
  const znodes = async () => (await mntr(zk)).zk_znode_count ?? NaN;
  /** @type {Record<string, any>} */
  const out = {};
  for (const peer of ['ours', 'containers']) {
    process.stdout.write(` ${peer}`);
    const baseline = await znodes();
    let peak = baseline;
    let running = true;
    const sampling = (async () => {
      while (running) {
        peak = Math.max(peak, await znodes());
        await sleep(SAMPLE_MS);
      }
    })();
    const run = await agent.request({ cmd: 'keyChurn', peer, seconds, base: `${BASE}/keychurn-${peer}` });
    running = false;
    await sampling;
    const atEnd = await znodes();
    const endedAt = performance.now();
    let left = atEnd - baseline;
    while (left > DRAINED_WITHIN && performance.now() - endedAt < drainSeconds * 1000) {
      await sleep(SAMPLE_MS);
      left = (await znodes()) - baseline;
    }
    const drainMs = left > DRAINED_WITHIN ? undefined : performance.now() - endedAt;
    out[peer] = { keys: run.keys, keysPerSec: run.keys / seconds, peakAbove: peak - baseline, atEndAbove: atEnd - baseline, drainMs, leftAfterWindow: left, drainSeconds, errors: run.errors };
  }
  await agent.close();
  agents.splice(agents.indexOf(agent), 1);
  process.stdout.write('\n');
  results.keyChurn = out;
}
