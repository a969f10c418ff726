// A lock with a crowd queued on it: 10, 1 000 and 100 000 waiters behind two contenders that hand
// it over to each other (bench/agent-bigqueue.mjs). Every acquire lists the whole queue (100 000
// protected names are about 5.9 MB, over ZooKeeper's 1 MiB jute.maxbuffer, under the client's
// 16 MiB maxReplyBytes); the connections must stay up throughout.
import { BASE, fail, opts, wants } from './options.mjs';
import { percentile } from './support.mjs';
import { nodeAgent } from './timed.mjs';

export const BIG_QUEUE_SIZES = [10, 1_000, 100_000];

/**
 * @param {import('./workloads.mjs').BenchContext} ctx
 */
export async function runBigQueue({ config, agents, track, results }) {
  if (!wants('bigqueue')) return;
  process.stdout.write('big queue (handoff with a crowd queued):');
  const agent = track(nodeAgent('agent-bigqueue', config));
  await agent.ready;
  /** @type {Record<string, any>} */
  const out = {};
  for (const waiters of BIG_QUEUE_SIZES) {
    process.stdout.write(` ${waiters}`);
    const res = await agent.request({ cmd: 'bigQueueHandoff', waiters, releases: opts.quick ? 15 : 40, warmup: 3, holdMs: opts.holdMs, path: `${BASE}/bigqueue-${waiters}` });
    const ok = res.errors.length === 0 && res.linkChanges.length === 0 && res.left === 0;
    if (!ok) fail(`big queue ×${waiters}: ${res.linkChanges.length} link changes (${res.linkChanges.slice(0, 4).join(', ')}), ${res.left} nodes left ${res.errors.slice(0, 2).join(' | ')}`);
    out[waiters] = {
      handoffP50: percentile(res.handoffs, 50),
      handoffP99: percentile(res.handoffs, 99),
      enqueueP50: percentile(res.enqueues, 50),
      samples: res.handoffs.length,
      crowdMs: res.crowdMs,
      // Each name `_c_<uuid>-lock-<10 digits>` is 55 bytes, 59 with its length; the header and Stat 88.
      listingBytes: (waiters + 2) * 59 + 88,
      linkChanges: res.linkChanges.length,
      check: ok ? 'ok' : 'FAILED',
    };
  }
  await agent.close();
  agents.splice(agents.indexOf(agent), 1);
  process.stdout.write('\n');
  results.bigQueue = out;
}
