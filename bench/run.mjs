// Benchmarks of nestjs-zk-lock against the locks users would pick instead, side by side in one run.
//
//   npm run build && node bench/run.mjs [--quick] [--churn-seconds N] [--rounds N] [--round-ms N]
//                                      [--only w1,w2,w3,w4,w5,bigqueue,leader,auth,sem,rw,scale,close,churn,keychurn,app]
//                                      [--profile] [--ensemble] [--no-curator] [--no-redis] [--no-addon]
//   (`npm run bench -- --quick` runs it)
//
//   default: 8 rounds × 1000 ms per peer, 300 s churn (~9.5 min, and ~3.5 min of `app`); --quick:
//   2 × 800 ms, 20 s churn (~1.5 min, and ~70 s of `app`); --profile adds V8 CPU profiles of raw, W1 and W2, and
//   with app of one sample-app instance per set (bench/results/profiles-<date>/).
//
// A standalone ZooKeeper is started here (unless ZK_CONNECT is set; --ensemble: a 3-server quorum,
// server CPU summed over the three), with ZooKeeper's default container reaping (every 60 s), and our own redis-server on a
// free loopback port. This process holds no ZooKeeper session: every client runs in a child
// "agent" (bench/agent.mjs for Node, bench/java/CuratorBench.java for Curator), so no native
// ZooKeeper socket can leak into the processes started here.
//
// Two ZooKeeper clients, side by side (issue #30): every agent runs ZkConnection's default client
// (the TypeScript one, lib/core/client/wire/), and where the comparison matters a twin agent runs
// `client: 'addon'` (the C client of the `zookeeper` package; its rows marked [addon]): the raw
// peers (serial create+delete and an exists round trip in W1, 64 outstanding in W5), W1 default
// and releaseInBackground, scale (heap per held lock) and close. --no-addon: the default client
// only. The "Targets" table sets issue #36's ratios, each against a peer of the same run on the
// same client (CPU per uncontended cycle and W1 against raw create+delete, the sample app locked
// against unlocked, W3 against redis-semaphore, heap per held lock, handoff p50 with 100 000
// waiters against 10), then issue #30's (the TypeScript client against the addon).
//
// Workloads (one lock path each; every run checked with a non-atomic counter, see agent.mjs):
//   W1  uncontended: 1 worker, lock+unlock cycles/s, acquire latency
//   W2  contended in one process: 8 async workers (Curator: 8 threads) on one connection
//   W3  contended across processes: 4 processes × 4 workers (Curator: 4 JVMs × 4 threads)
//   W4  queue: 2/8/64 waiters (one session each), 5 ms hold: handoff latency, watch
//       notifications and requests per release (server mntr counters)
//   bigqueue  a lock with 10, 1 000 and 100 000 waiters (another session's nodes queued behind):
//       two contenders hand it over, each acquire listing the whole queue (~5.9 MB at 100 000);
//       handoff p50/p99, the time to queue (create + listing), and no link change (bigqueue.mjs)
//   W5  many keys: 16 callers over 10 000 keys (random), 1 process and 4, after a warm-up that
//       uses every key twice in each process (both passes reported on their own); peer: raw
//       create+delete with 64 outstanding; for context the same three requests a lock of this layout
//       makes (create + listing, delete) without the library; exclusion checked per key
//   W1 also with retainMs (the node kept for the next local holder)
//   W1 and W2 also traced (`ours-traced`: the OpenTelemetry SDK registered in the agent for those
//       rounds, a batch processor and an exporter that drops the spans; every other peer runs with
//       no tracer provider): the cost of tracing, on against off (issue #37)
//   leader  leadership handover: 4 participants (one process each) in one election; the leader's
//       close() (or stepDown()) → the successor's `gained`, p50/p99 (election.mjs)
//   auth  W1 with digest auth and SECURE_PARENT_ACL (as ZkLockModule sets up `auth`) vs without
//   semaphore (4 permits, 16 workers), read-write lock (90 % reads, 16 workers), 2 ms holds
//   scale: 10 000 distinct locks held at once; 1 000 waiters on one lock (per client)
//   close: closing a lost session on a silent link (a loopback proxy that goes silent), per client:
//       how long the close held the event loop (the C client waits in it for the server's answer)
//   churn: a mix of acquires, tries, timeouts and semaphore leases; heap after GC before/after
//   keychurn: every acquisition a new key; server znodes during and after, vs containers left to
//       ZooKeeper's reaper (keys.mjs)
//   app  the sample app (3 instances, 200 buyers over 1 000 events) with @WithLock and with
//       LOCKS=off, alternating rounds: req/s, answers by status, instance CPU per request and the
//       CPU per lock cycle (the difference); with --profile, a CPU profile of one instance of each (app.mjs)
// Peers, alternating round by round (medians over rounds; latencies pooled):
//   raw create+delete and exists round trips, our mutex without in-process coalescing
//   (`coalesce: false`: one node per caller, as Curator), the naive "herd" lock, Curator's
//   InterProcessMutex, redis-semaphore's Mutex on ioredis; for leadership ZooKeeper's own
//   delete → watch event across processes and Curator's LeaderLatch.
// Results: a table on stdout and bench/results/<date>.json.
//
// The parts: options.mjs (this command line), timed.mjs (one timed round of a peer),
// workloads.mjs (each workload of a run), bigqueue.mjs (a crowded lock; agent-bigqueue.mjs), app.mjs (the sample app), election.mjs (leadership handover; its agent side is
// agent-election.mjs), keys.mjs (key churn; agent-keys.mjs), report.mjs (the tables), support.mjs (servers, agents,
// statistics); scripts/support/zookeeper.mjs (the ZooKeeper runner, shared with the tests).
import { spawnSync } from 'node:child_process';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { fourLetter } from '../scripts/support/zookeeper.mjs';
import { opts, startedAt, wants } from './options.mjs';
import { fmt, report } from './report.mjs';
import { BENCH_DIR, prepareCurator, startRedis, withZooKeeper } from './support.mjs';
import { runLeadership } from './election.mjs';
import { runKeyChurn } from './keys.mjs';
import { runBigQueue } from './bigqueue.mjs';
import { runApp } from './app.mjs';
import { runAlternatingRounds, runChurn, runCloseBlock, runProfiles, runQueue, runRecipes, runScale, startAgents } from './workloads.mjs';

async function main() {
  console.log(
    `nestjs-zk-lock bench (${opts.quick ? 'quick' : 'full'}): ${opts.rounds} rounds × ${opts.roundMs} ms per peer, alternating; ` +
      `node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), ${fmt.mb(totalmem())} RAM; ${startedAt.toISOString()}; ` +
      `load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`,
  );
  /** @type {Record<string, any>} */
  const results = { startedAt: startedAt.toISOString(), git: gitState(), options: opts, node: process.version, cpus: cpus().length, loadAverageAtStart: loadavg() };
  console.log(`library: dist/ built from ${results.git}`);
  await withZooKeeper(async (zk, { pid: zkPid }) => {
    const srvr = await fourLetter(zk.split(',')[0], 'srvr', 5000);
    results.zookeeper = { connect: zk, version: /version: ([^\s,-]+)/i.exec(srvr)?.[1], serverPidKnown: zkPid !== undefined };
    results.zookeeper.servers = zk.split(',').length;
    console.log(
      `ZooKeeper ${results.zookeeper.version} at ${zk}${process.env.ZK_CONNECT ? ' (ZK_CONNECT)' : ` (started for this run: ${opts.ensemble ? 'a 3-server quorum on this machine' : 'standalone'}, forceSync=no)`}`,
    );

    let redis;
    if (opts.redis && ['w1', 'w2', 'w3'].some(wants)) {
      try {
        redis = await startRedis();
        if (!redis) console.log('Redis peer skipped: redis-server not installed (apt-get install -y --no-install-recommends redis-server)');
        else console.log(`redis-server (ours) on 127.0.0.1:${redis.port}, pid ${redis.pid}, no persistence`);
      } catch (error) {
        console.log(`Redis peer skipped: ${error.message}`);
      }
    }
    let curatorArgs;
    if (opts.curator && ['w1', 'w2', 'w3', 'leader'].some(wants)) {
      try {
        curatorArgs = prepareCurator();
      } catch (error) {
        console.log(`Curator peer skipped: ${error.message}`);
      }
    }
    /** @type {import('./support.mjs').Agent[]} */
    const agents = [];
    /** @type {import('./workloads.mjs').BenchContext} */
    const ctx = { zk, zkPid, redis, config: { zk, redisPort: redis?.port }, agents, track: (a) => (agents.push(a), a), results };
    try {
      const started = await startAgents(ctx, curatorArgs);
      // W4 first: its notification and request counts are the server's (mntr), and W5 leaves up to
      // 10 000 path watches per process that fire as ZooKeeper's reaper removes the idle key paths
      // (1 to 9 notifications per release landed in W4's windows when it ran after W5).
      await runQueue(ctx, started.main);
      await runAlternatingRounds(ctx, started);
      await runBigQueue(ctx);
      await runLeadership(ctx, started);
      await runRecipes(ctx, started.main);
      await runCloseBlock(ctx, started);
      // Close the long-lived agents before the memory runs (fewer sessions, less noise).
      await Promise.all(agents.splice(0).map((a) => a.close()));
      await runApp(ctx);
      await runScale(ctx);
      await runChurn(ctx);
      await runKeyChurn(ctx);
      await runProfiles(ctx);
    } finally {
      await Promise.all(agents.splice(0).map((a) => a.close().catch(() => undefined)));
      await redis?.stop();
    }
  }, { ensemble: opts.ensemble });
  results.loadAverageAtEnd = loadavg();
  report(results);
}

/** The commit the library was built from, and whether lib/ had uncommitted changes. */
function gitState() {
  const git = (...args) => spawnSync('git', args, { cwd: join(BENCH_DIR, '..'), encoding: 'utf8' });
  const head = git('rev-parse', '--short', 'HEAD');
  if (head.status !== 0) return 'unknown (not a git checkout)';
  const dirty = git('status', '--porcelain', '--', 'lib').stdout.trim() !== '';
  return `${head.stdout.trim()}${dirty ? ' + uncommitted changes in lib/' : ''}`;
}

await main();
