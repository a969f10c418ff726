// Benchmarks of nestjs-zk-lock against the locks users would pick instead, side by side in one run.
//
//   npm run build && node bench/run.mjs [--quick] [--churn-seconds N] [--rounds N] [--round-ms N]
//                                      [--only w1,w2,w3,w4,sem,rw,scale,churn] [--profile]
//                                      [--no-curator] [--no-redis]
//   (`npm run bench -- --quick` runs it through bench/mutex.mjs)
//
//   default: 8 rounds × 1000 ms per peer, 300 s churn (~9.5 min); --quick: 2 × 800 ms, 20 s churn
//   (~1.5 min); --profile adds V8 CPU profiles of raw, W1 and W2 (bench/results/profiles-<date>/).
//
// A standalone ZooKeeper is started here (unless ZK_CONNECT is set), and our own redis-server on a
// free loopback port. This process holds no ZooKeeper session: every client runs in a child
// "agent" (bench/agent.mjs for Node, bench/java/CuratorBench.java for Curator), so no native
// ZooKeeper socket can leak into the processes started here.
//
// Workloads (one lock path each; every run checked with a non-atomic counter, see agent.mjs):
//   W1  uncontended: 1 worker, lock+unlock cycles/s, acquire latency
//   W2  contended in one process: 8 async workers (Curator: 8 threads) on one connection
//   W3  contended across processes: 4 processes × 4 workers (Curator: 4 JVMs × 4 threads)
//   W4  queue: 2/8/64 waiters (one session each), 5 ms hold: handoff latency, watch
//       notifications and requests per release (server mntr counters)
//   semaphore (4 permits, 16 workers), read-write lock (90 % reads, 16 workers), 2 ms holds
//   scale: 10 000 distinct locks held at once; 1 000 waiters on one lock
//   churn: a mix of acquires, tries, timeouts and semaphore leases; heap after GC before/after
// Peers, alternating round by round (medians over rounds; latencies pooled):
//   raw create+delete and exists round trips, our mutex without in-process coalescing
//   (`coalesce: false`: one node per caller, as Curator), the naive "herd" lock, Curator's
//   InterProcessMutex, redis-semaphore's Mutex on ioredis.
// Results: a table on stdout and bench/results/<date>.json.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import {
  Agent,
  BENCH_DIR,
  fourLetterWord,
  JAVA,
  median,
  mntr,
  notificationsIn,
  percentile,
  prepareCurator,
  printTable,
  processCpuMs,
  startRedis,
  summarizeCpuProfile,
  withZooKeeper,
} from './support.mjs';

// ---------------------------------------------------------------------------------------------
// Options

function parseArgs(argv) {
  const opts = { quick: false, curator: true, redis: true, profile: false, only: undefined };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--quick':
        opts.quick = true;
        break;
      case '--churn-seconds':
        opts.churnSeconds = Number(value());
        break;
      case '--rounds':
        opts.rounds = Number(value());
        break;
      case '--round-ms':
        opts.roundMs = Number(value());
        break;
      case '--only':
        opts.only = new Set(value().split(','));
        break;
      case '--profile':
        opts.profile = true;
        break;
      case '--no-curator':
        opts.curator = false;
        break;
      case '--no-redis':
        opts.redis = false;
        break;
      case '--help':
      case '-h':
        console.log(readFileSync(new URL(import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//')).join('\n'));
        process.exit(0);
        break;
      default:
        throw new Error(`unknown option ${argv[i]} (see --help)`);
    }
  }
  const q = opts.quick;
  return {
    ...opts,
    // Many short alternating rounds: on a shared 2-core machine load comes in bursts, and a
    // median over more rounds is less at their mercy.
    rounds: opts.rounds ?? (q ? 2 : 8),
    roundMs: opts.roundMs ?? (q ? 800 : 1000),
    warmupMs: q ? 400 : 700,
    // Curator's JVM needs seconds of C2 compilation before its client CPU per acquisition settles
    // (in a 700 ms warm-up it fell from ~470 to ~100 µs over the following rounds).
    jvmWarmupMs: q ? 2000 : 5000,
    churnSeconds: opts.churnSeconds ?? (q ? 20 : 300),
    queueLengths: [2, 8, 64],
    queueRounds: q ? 1 : 3,
    queueReleases: q ? 100 : 300,
    holdMs: 5,
    recipeHoldMs: 2,
    scaleLocks: 10_000,
    scaleWaiters: 1_000,
    profileSeconds: q ? 3 : 6,
  };
}

const opts = parseArgs(process.argv.slice(2));
const wants = (part) => !opts.only || opts.only.has(part);
const RUN = `run-${process.pid}`;
const BASE = `/bench/${RUN}`;
const AGENT = join(BENCH_DIR, 'agent.mjs');
const startedAt = new Date();
const failures = [];

function fail(message) {
  failures.push(message);
  console.error(`\n!!!!!!!! CORRECTNESS FAILURE: ${message}\n`);
}

// ---------------------------------------------------------------------------------------------
// Agents

function nodeAgent(name, config, extraNodeArgs = []) {
  return new Agent(name, process.execPath, ['--expose-gc', ...extraNodeArgs, AGENT, JSON.stringify({ ...config, name })]);
}

function javaAgent(name, javaArgs) {
  const agent = new Agent(name, JAVA, javaArgs);
  agent.quitLine = 'quit\n';
  return agent;
}

// ---------------------------------------------------------------------------------------------
// One timed round of a peer

const ZK_PEERS = new Set(['ours', 'ours-fifo', 'herd', 'raw', 'exists', 'curator']);

function counterFile() {
  const file = `/dev/shm/nestjs-zk-lock-bench.${process.pid}.counter`;
  writeFileSync(file, Buffer.alloc(8));
  return file;
}

function readCounterFile(file) {
  return Number(readFileSync(file).readBigInt64LE(0));
}

/**
 * Runs `peer` on `agents` (one worker group per agent) for `ms` starting together, collects
 * throughput, latencies, the counter check and CPU/requests per acquisition.
 */
async function timed(ctx, { workload, peer, agents, workers, ms, profile }) {
  const shared = agents.length > 1;
  const file = shared ? counterFile() : undefined;
  const counter = file ?? 'mem';
  const path = `${BASE}/${workload}-${peer}`;
  const t0 = Date.now() + (shared || profile ? 150 : 60);
  const t1 = t0 + ms;
  const zkBefore = ZK_PEERS.has(peer) ? await mntr(ctx.zk) : undefined;
  const srvPid = peer === 'redis' ? ctx.redis?.pid : ctx.zkPid;
  const srvCpu0 = processCpuMs(srvPid);
  const replies = await Promise.all(
    agents.map((agent) =>
      peer === 'curator'
        ? agent.request(`run ${workers} ${t0} ${t1} ${path} ${counter} 50000`)
        : agent.request({ cmd: 'run', peer, workers, path, t0, t1, counter, profile }),
    ),
  );
  const srvCpu1 = processCpuMs(srvPid);
  const zkAfter = zkBefore ? await mntr(ctx.zk) : undefined;
  const acquired = replies.reduce((n, r) => n + r.acquired, 0);
  const inWindow = replies.reduce((n, r) => n + r.inWindow, 0);
  const errors = replies.flatMap((r) => r.errors ?? []);
  const isLock = peer !== 'raw' && peer !== 'exists';
  let check = 'n/a';
  if (isLock) {
    const value = file ? readCounterFile(file) : replies.reduce((n, r) => n + r.counter, 0);
    check = value === acquired && errors.length === 0 ? 'ok' : `FAILED: counter ${value} ≠ ${acquired} acquisitions`;
    if (check !== 'ok') fail(`${workload} ${peer}: ${check}${errors.length ? `; errors: ${errors.slice(0, 3).join(' | ')}` : ''}`);
  } else if (errors.length) {
    fail(`${workload} ${peer}: ${errors.slice(0, 3).join(' | ')}`);
  }
  if (file) rmSync(file, { force: true });
  const perWorker = replies.flatMap((r) => r.perWorker);
  return {
    opsPerSec: (inWindow * 1000) / ms,
    acquired,
    lat: replies.flatMap((r) => r.lat),
    check,
    errors,
    fairness: perWorker.length > 1 ? Math.min(...perWorker) / Math.max(1, Math.max(...perWorker)) : 1,
    clientCpuUsPerOp: (replies.reduce((n, r) => n + (r.cpuMs ?? 0), 0) * 1000) / Math.max(1, acquired),
    serverCpuUsPerOp: srvCpu0 !== undefined && srvCpu1 !== undefined ? ((srvCpu1 - srvCpu0) * 1000) / Math.max(1, acquired) : undefined,
    zkRequestsPerOp: zkAfter ? (zkAfter.zk_packets_received - zkBefore.zk_packets_received) / Math.max(1, acquired) : undefined,
    notificationsPerOp: zkAfter ? notificationsIn(zkBefore, zkAfter) / Math.max(1, acquired) : undefined,
  };
}

// ---------------------------------------------------------------------------------------------
// Aggregation and formatting

function aggregate(rounds) {
  if (!rounds?.length) return undefined;
  const lat = rounds.flatMap((r) => r.lat);
  const med = (key) => {
    const xs = rounds.map((r) => r[key]).filter((x) => x !== undefined && Number.isFinite(x));
    return xs.length ? median(xs) : undefined;
  };
  return {
    opsPerSec: med('opsPerSec'),
    rounds: rounds.map((r) => Math.round(r.opsPerSec)),
    p50: percentile(lat, 50),
    p99: percentile(lat, 99),
    samples: lat.length,
    check: rounds.every((r) => r.check === 'ok') ? 'ok' : rounds.find((r) => r.check !== 'ok' && r.check !== 'n/a')?.check ?? 'n/a',
    fairness: med('fairness'),
    clientCpuUsPerOp: med('clientCpuUsPerOp'),
    serverCpuUsPerOp: med('serverCpuUsPerOp'),
    zkRequestsPerOp: med('zkRequestsPerOp'),
    notificationsPerOp: med('notificationsPerOp'),
  };
}

function rangeOf(xs) {
  return `${Math.round(Math.min(...xs))}–${Math.round(Math.max(...xs))}`;
}

const fmt = {
  ops: (x) => (x === undefined ? '' : x >= 100 ? x.toFixed(0) : x.toFixed(1)),
  ms: (x) => (x === undefined || Number.isNaN(x) ? '' : x < 10 ? x.toFixed(3) : x < 100 ? x.toFixed(2) : x.toFixed(1)),
  ratio: (x) => (x === undefined || !Number.isFinite(x) ? '' : `${x.toFixed(2)}×`),
  n: (x, d = 1) => (x === undefined || !Number.isFinite(x) ? '' : x.toFixed(d)),
  mb: (bytes) => `${(bytes / 1048576).toFixed(1)} MiB`,
};

// ---------------------------------------------------------------------------------------------

const PEER_LABEL = {
  raw: 'raw create+delete (serial)',
  exists: 'raw exists round trip',
  ours: 'nestjs-zk-lock Mutex',
  'ours-fifo': 'nestjs-zk-lock Mutex, coalesce: false',
  herd: 'naive herd lock (same client)',
  curator: 'Curator InterProcessMutex',
  redis: 'redis-semaphore Mutex (Redis)',
};

async function main() {
  console.log(
    `nestjs-zk-lock bench (${opts.quick ? 'quick' : 'full'}): ${opts.rounds} rounds × ${opts.roundMs} ms per peer, alternating; ` +
      `node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), ${fmt.mb(totalmem())} RAM; ${startedAt.toISOString()}; ` +
      `load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`,
  );
  const results = { startedAt: startedAt.toISOString(), git: gitState(), options: opts, node: process.version, cpus: cpus().length, loadAverageAtStart: loadavg() };
  console.log(`library: dist/ built from ${results.git}`);
  await withZooKeeper(async (zk, { pid: zkPid }) => {
    const srvr = await fourLetterWord(zk.split(',')[0], 'srvr');
    results.zookeeper = { connect: zk, version: /version: ([^\s,-]+)/i.exec(srvr)?.[1], serverPidKnown: zkPid !== undefined };
    console.log(`ZooKeeper ${results.zookeeper.version} at ${zk}${process.env.ZK_CONNECT ? ' (ZK_CONNECT)' : ' (started for this run, forceSync=no)'}`);

    let redis;
    if (opts.redis) {
      try {
        redis = await startRedis();
        if (!redis) console.log('Redis peer skipped: redis-server not installed (apt-get install -y --no-install-recommends redis-server)');
        else console.log(`redis-server (ours) on 127.0.0.1:${redis.port}, pid ${redis.pid}, no persistence`);
      } catch (error) {
        console.log(`Redis peer skipped: ${error.message}`);
      }
    }
    let curatorArgs;
    if (opts.curator) {
      try {
        curatorArgs = prepareCurator();
      } catch (error) {
        console.log(`Curator peer skipped: ${error.message}`);
      }
    }
    const ctx = { zk, zkPid, redis };
    const config = { zk, redisPort: redis?.port };
    const agents = [];
    const track = (a) => (agents.push(a), a);
    try {
      const needMain = ['w1', 'w2', 'w4', 'sem', 'rw'].some(wants);
      const main = needMain ? track(nodeAgent('agent-main', config)) : undefined;
      const w3 = wants('w3') ? [0, 1, 2, 3].map((i) => track(nodeAgent(`agent-w3-${i}`, config))) : [];
      const curatorMain = curatorArgs && (wants('w1') || wants('w2')) ? track(javaAgent('curator-main', curatorArgs(zk))) : undefined;
      const curatorW3 = curatorArgs && wants('w3') ? [0, 1, 2, 3].map((i) => track(javaAgent(`curator-w3-${i}`, curatorArgs(zk)))) : [];
      await Promise.all(agents.map((a) => a.ready));
      console.log(`agents ready: ${agents.map((a) => a.name).join(', ')}\n`);

      // ---- W1, W2, W3: alternating rounds -------------------------------------------------
      const plan = [];
      if (wants('w1')) {
        for (const peer of ['raw', 'exists', 'ours', 'ours-fifo', 'herd']) plan.push({ workload: 'W1', peer, agents: [main], workers: 1 });
        if (curatorMain) plan.push({ workload: 'W1', peer: 'curator', agents: [curatorMain], workers: 1 });
        if (redis) plan.push({ workload: 'W1', peer: 'redis', agents: [main], workers: 1 });
      }
      if (wants('w2')) {
        for (const peer of ['ours', 'ours-fifo', 'herd']) plan.push({ workload: 'W2', peer, agents: [main], workers: 8 });
        if (curatorMain) plan.push({ workload: 'W2', peer: 'curator', agents: [curatorMain], workers: 8 });
        if (redis) plan.push({ workload: 'W2', peer: 'redis', agents: [main], workers: 8 });
      }
      if (wants('w3')) {
        for (const peer of ['ours', 'ours-fifo', 'herd']) plan.push({ workload: 'W3', peer, agents: w3, workers: 4 });
        if (curatorW3.length) plan.push({ workload: 'W3', peer: 'curator', agents: curatorW3, workers: 4 });
        if (redis) plan.push({ workload: 'W3', peer: 'redis', agents: w3, workers: 4 });
      }
      // ---- Negative control: without a lock the counter must lose updates ---------------------
      const control = {};
      if (main) {
        const t0 = Date.now() + 60;
        const r = await main.request({ cmd: 'run', peer: 'none', workers: 8, path: `${BASE}/control`, t0, t1: t0 + 300, counter: 'mem' });
        control.node = { acquisitions: r.acquired, counter: r.counter };
      }
      if (w3.length) {
        const file = counterFile();
        const t0 = Date.now() + 150;
        const rs = await Promise.all(w3.map((a) => a.request({ cmd: 'run', peer: 'none', workers: 1, path: `${BASE}/control`, t0, t1: t0 + 300, counter: file })));
        control.nodeProcesses = { acquisitions: rs.reduce((n, r) => n + r.acquired, 0), counter: readCounterFile(file) };
        rmSync(file, { force: true });
      }
      if (curatorMain) {
        const t0 = Date.now() + 60;
        const r = await curatorMain.request(`run 8 ${t0} ${t0 + 300} none mem 0`);
        control.curator = { acquisitions: r.acquired, counter: r.counter };
      }
      results.negativeControl = control;
      const undetected = Object.entries(control).filter(([, c]) => c.counter === c.acquisitions).map(([k]) => k);
      console.log(
        'negative control (no lock, counter must lose updates): ' +
          Object.entries(control).map(([k, c]) => `${k} ${c.acquisitions - c.counter} of ${c.acquisitions} lost`).join(', '),
      );
      if (undetected.length) fail(`the counter check cannot see a missing lock here (${undetected.join(', ')}): its results prove nothing`);

      const timedRounds = {};
      if (plan.length) {
        process.stdout.write(`W1-W3: warm-up`);
        for (const p of plan) await timed(ctx, { ...p, ms: p.peer === 'curator' ? opts.jvmWarmupMs : opts.warmupMs });
        for (let r = 0; r < opts.rounds; r++) {
          process.stdout.write(` · round ${r + 1}/${opts.rounds}`);
          const order = r % 2 === 0 ? plan : [...plan].reverse();
          for (const p of order) {
            const key = `${p.workload}/${p.peer}`;
            (timedRounds[key] ??= []).push(await timed(ctx, { ...p, ms: opts.roundMs }));
          }
        }
        process.stdout.write('\n');
      }
      const W = Object.fromEntries(Object.entries(timedRounds).map(([k, v]) => [k, aggregate(v)]));
      results.timed = W;
      results.timedRounds = Object.fromEntries(Object.entries(timedRounds).map(([k, v]) => [k, v.map(({ lat, ...rest }) => rest)]));

      // ---- W4: queue handoff --------------------------------------------------------------
      const queue = {};
      if (wants('w4')) {
        process.stdout.write('W4 (queue, one session per waiter):');
        for (let r = 0; r < opts.queueRounds; r++) {
          for (const L of opts.queueLengths) {
            const peers = (r + L) % 2 === 0 ? ['ours', 'herd'] : ['herd', 'ours'];
            for (const peer of peers) {
              process.stdout.write(` ${peer}×${L}`);
              const res = await main.request({
                cmd: 'queue',
                peer,
                waiters: L,
                holdMs: opts.holdMs,
                releases: opts.queueReleases,
                warmup: L + 10,
                path: `${BASE}/W4-${peer}-${L}-${r}`,
              });
              const ok = res.counter === res.acquired && res.errors.length === 0;
              if (!ok) fail(`W4 ${peer} ×${L}: counter ${res.counter} ≠ ${res.acquired} acquisitions ${res.errors.slice(0, 2).join(' | ')}`);
              const q = (queue[`${peer}/${L}`] ??= { handoffs: [], perRelease: [], requestsPerRelease: [], cpuPerRelease: [], ok: true });
              q.handoffs.push(...res.handoffs);
              q.perRelease.push(res.notifications / res.releases);
              q.requestsPerRelease.push(res.requests / res.releases);
              q.cpuPerRelease.push((res.cpuMs * 1000) / res.releases);
              q.ok &&= ok;
            }
          }
        }
        const floor = await main.request({ cmd: 'notifyFloor', samples: opts.queueReleases, path: `${BASE}/W4-floor` });
        results.notifyFloor = { p50: percentile(floor.times, 50), p99: percentile(floor.times, 99), samples: floor.times.length };
        await main.request({ cmd: 'closePool' });
        process.stdout.write('\n');
      }
      results.queue = Object.fromEntries(
        Object.entries(queue).map(([k, q]) => [
          k,
          {
            handoffP50: percentile(q.handoffs, 50),
            handoffP99: percentile(q.handoffs, 99),
            samples: q.handoffs.length,
            notificationsPerRelease: median(q.perRelease),
            notificationsPerReleaseRounds: q.perRelease,
            requestsPerRelease: median(q.requestsPerRelease),
            clientCpuUsPerRelease: median(q.cpuPerRelease),
            check: q.ok ? 'ok' : 'FAILED',
          },
        ]),
      );

      // ---- Semaphore and read-write lock ----------------------------------------------------
      const semRounds = [];
      const rwRounds = [];
      if (wants('sem') || wants('rw')) {
        process.stdout.write('semaphore / read-write:');
        for (let r = 0; r < opts.rounds; r++) {
          process.stdout.write(` ${r + 1}`);
          const jobs = [];
          if (wants('sem')) jobs.push('sem');
          if (wants('rw')) jobs.push('rw');
          if (r % 2) jobs.reverse();
          for (const job of jobs) {
            const t0 = Date.now() + 60;
            const t1 = t0 + opts.roundMs;
            if (job === 'sem') {
              const res = await main.request({ cmd: 'semaphore', permits: 4, workers: 16, holdMs: opts.recipeHoldMs, path: `${BASE}/sem`, t0, t1 });
              const ok = res.maxInside <= 4 && res.released === res.acquired && res.errors.length === 0;
              if (!ok) fail(`semaphore: max ${res.maxInside} holders for 4 permits ${res.errors.slice(0, 2).join(' | ')}`);
              semRounds.push({ opsPerSec: (res.inWindow * 1000) / opts.roundMs, lat: res.lat, maxInside: res.maxInside, ok, cpuUsPerOp: (res.cpuMs * 1000) / res.acquired });
            } else {
              const res = await main.request({ cmd: 'rw', workers: 16, readShare: 0.9, holdMs: opts.recipeHoldMs, path: `${BASE}/rw`, t0, t1 });
              const ok = res.violations === 0 && res.counter === res.writes && res.errors.length === 0;
              if (!ok) fail(`read-write: ${res.violations} violations, counter ${res.counter} ≠ ${res.writes} writes ${res.errors.slice(0, 2).join(' | ')}`);
              rwRounds.push({
                opsPerSec: (res.inWindow * 1000) / opts.roundMs,
                readLat: res.lat.read,
                writeLat: res.lat.write,
                maxReaders: res.maxReaders,
                reads: res.reads,
                writes: res.writes,
                ok,
                cpuUsPerOp: (res.cpuMs * 1000) / (res.reads + res.writes),
              });
            }
          }
        }
        process.stdout.write('\n');
      }
      results.semaphore = semRounds.length
        ? {
            opsPerSec: median(semRounds.map((r) => r.opsPerSec)),
            range: rangeOf(semRounds.map((r) => r.opsPerSec)),
            p50: percentile(semRounds.flatMap((r) => r.lat), 50),
            p99: percentile(semRounds.flatMap((r) => r.lat), 99),
            maxHolders: Math.max(...semRounds.map((r) => r.maxInside)),
            cpuUsPerOp: median(semRounds.map((r) => r.cpuUsPerOp)),
            check: semRounds.every((r) => r.ok) ? 'ok' : 'FAILED',
          }
        : undefined;
      results.readWrite = rwRounds.length
        ? {
            opsPerSec: median(rwRounds.map((r) => r.opsPerSec)),
            range: rangeOf(rwRounds.map((r) => r.opsPerSec)),
            readP50: percentile(rwRounds.flatMap((r) => r.readLat), 50),
            readP99: percentile(rwRounds.flatMap((r) => r.readLat), 99),
            writeP50: percentile(rwRounds.flatMap((r) => r.writeLat), 50),
            writeP99: percentile(rwRounds.flatMap((r) => r.writeLat), 99),
            maxReaders: Math.max(...rwRounds.map((r) => r.maxReaders)),
            writeShare: rwRounds.reduce((n, r) => n + r.writes, 0) / rwRounds.reduce((n, r) => n + r.reads + r.writes, 0),
            cpuUsPerOp: median(rwRounds.map((r) => r.cpuUsPerOp)),
            check: rwRounds.every((r) => r.ok) ? 'ok' : 'FAILED',
          }
        : undefined;

      // Close the long-lived agents before the memory runs (fewer sessions, less noise).
      await Promise.all(agents.splice(0).map((a) => a.close()));

      // ---- Scale ---------------------------------------------------------------------------
      if (wants('scale')) {
        process.stdout.write('scale: ');
        const agent = track(nodeAgent('agent-scale', config));
        await agent.ready;
        process.stdout.write(`${opts.scaleLocks} locks… `);
        const serverSide = async (work) => {
          const z0 = await mntr(zk);
          const c0 = processCpuMs(zkPid);
          const res = await work();
          const c1 = processCpuMs(zkPid);
          const z1 = await mntr(zk);
          return { ...res, zkRequests: z1.zk_packets_received - z0.zk_packets_received, zkNotifications: notificationsIn(z0, z1), zkCpuMs: c0 === undefined ? undefined : c1 - c0 };
        };
        const locks = await serverSide(() => agent.request({ cmd: 'scaleLocks', count: opts.scaleLocks, base: `${BASE}/scale` }));
        const locksOk = locks.held === locks.count && locks.counter === locks.count && locks.distinctPaths === locks.count;
        if (!locksOk) fail(`scale: ${locks.held} of ${locks.count} locks held at once, counter ${locks.counter}`);
        process.stdout.write(`${opts.scaleWaiters} waiters… `);
        const waiters = await serverSide(() => agent.request({ cmd: 'scaleWaiters', count: opts.scaleWaiters, path: `${BASE}/waiters` }));
        const waitersOk = waiters.counter === waiters.count && waiters.acquired === waiters.count && waiters.errors.length === 0;
        if (!waitersOk) fail(`1000 waiters: counter ${waiters.counter} ≠ ${waiters.count} ${waiters.errors.slice(0, 2).join(' | ')}`);
        await agent.close();
        agents.splice(agents.indexOf(agent), 1);
        results.scale = { locks: { ...locks, check: locksOk ? 'ok' : 'FAILED' }, waiters: { ...waiters, check: waitersOk ? 'ok' : 'FAILED' } };
        process.stdout.write('done\n');
      }

      // ---- Churn ---------------------------------------------------------------------------
      if (wants('churn')) {
        process.stdout.write(`churn: ${opts.churnSeconds} s… `);
        const agent = track(nodeAgent('agent-churn', config));
        await agent.ready;
        const res = await agent.request({ cmd: 'churn', seconds: opts.churnSeconds, base: `${BASE}/churn`, sampleEverySeconds: opts.churnSeconds >= 60 ? 15 : 5 });
        await agent.close();
        agents.splice(agents.indexOf(agent), 1);
        const ok = res.counter === res.hotAcquired && res.errors.length === 0;
        if (!ok) fail(`churn: counter ${res.counter} ≠ ${res.hotAcquired} ${res.errors.slice(0, 2).join(' | ')}`);
        results.churn = { ...res, check: ok ? 'ok' : 'FAILED', heapGrowth: res.after.heapUsed - res.before.heapUsed };
        process.stdout.write('done\n');
      }

      // ---- Profiles (opt-in): V8 sampling profiler over one measured window per workload ------
      if (opts.profile) {
        results.profiles = {};
        const dir = join(BENCH_DIR, 'results', `profiles-${stamp()}`);
        mkdirSync(dir, { recursive: true });
        const agent = track(nodeAgent('agent-prof', config));
        await agent.ready;
        for (const [name, peer, workers] of [
          ['raw', 'raw', 1],
          ['W1-ours', 'ours', 1],
          ['W2-ours', 'ours', 8],
          ['W2-herd', 'herd', 8],
        ]) {
          process.stdout.write(`profile ${name}… `);
          const file = join(dir, `${name}.cpuprofile`);
          await timed(ctx, { workload: `prof-${name}`, peer, agents: [agent], workers, ms: 500 }); // warm-up
          const r = await timed(ctx, { workload: `prof-${name}`, peer, agents: [agent], workers, ms: opts.profileSeconds * 1000, profile: file });
          const summary = summarizeCpuProfile(file);
          results.profiles[name] = { opsPerSec: r.opsPerSec, acquired: r.acquired, clientCpuUsPerOp: r.clientCpuUsPerOp, serverCpuUsPerOp: r.serverCpuUsPerOp, ...summary, file };
        }
        await agent.close();
        agents.splice(agents.indexOf(agent), 1);
        process.stdout.write('\n');
      }
    } finally {
      await Promise.all(agents.splice(0).map((a) => a.close().catch(() => undefined)));
      await redis?.stop();
    }
  });
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

function stamp() {
  return startedAt.toISOString().replace(/[:.]/g, '-');
}

// ---------------------------------------------------------------------------------------------
// Report

function report(results) {
  const W = results.timed ?? {};
  console.log('');
  const rows = [];
  const ratioOf = (workload, peer) => {
    const ours = W[`${workload}/ours`]?.opsPerSec;
    const other = W[`${workload}/${peer}`]?.opsPerSec;
    return ours && other && peer !== 'ours' ? ours / other : undefined;
  };
  const workloadLabel = { W1: 'W1 uncontended (1 worker)', W2: 'W2 1 process × 8 workers', W3: 'W3 4 processes × 4 workers' };
  for (const workload of ['W1', 'W2', 'W3']) {
    for (const peer of ['raw', 'exists', 'ours', 'ours-fifo', 'herd', 'curator', 'redis']) {
      const a = W[`${workload}/${peer}`];
      if (!a) continue;
      rows.push([
        workloadLabel[workload],
        PEER_LABEL[peer],
        fmt.ops(a.opsPerSec),
        `${Math.min(...a.rounds)}–${Math.max(...a.rounds)}`,
        fmt.ms(a.p50),
        fmt.ms(a.p99),
        peer === 'ours' ? '—' : fmt.ratio(ratioOf(workload, peer)),
        fmt.n(a.clientCpuUsPerOp, 0),
        fmt.n(a.serverCpuUsPerOp, 0),
        a.serverCpuUsPerOp === undefined ? '' : fmt.n((a.opsPerSec * (a.clientCpuUsPerOp + a.serverCpuUsPerOp)) / 1e6, 2),
        fmt.n(a.zkRequestsPerOp, 2),
        fmt.n(a.notificationsPerOp, 2),
        a.fairness === undefined || workload === 'W1' ? '' : fmt.n(a.fairness, 2),
        a.check,
      ]);
    }
  }
  if (results.semaphore) {
    const s = results.semaphore;
    rows.push([`semaphore 4 permits × 16 workers, ${opts.recipeHoldMs} ms hold`, PEER_LABEL.ours, fmt.ops(s.opsPerSec), s.range, fmt.ms(s.p50), fmt.ms(s.p99), '', fmt.n(s.cpuUsPerOp, 0), '', '', '', '', '', `${s.check} (max ${s.maxHolders} holders)`]);
  }
  if (results.readWrite) {
    const s = results.readWrite;
    rows.push([
      `read-write 90% reads × 16 workers, ${opts.recipeHoldMs} ms hold`,
      PEER_LABEL.ours,
      fmt.ops(s.opsPerSec),
      s.range,
      `r ${fmt.ms(s.readP50)} w ${fmt.ms(s.writeP50)}`,
      `r ${fmt.ms(s.readP99)} w ${fmt.ms(s.writeP99)}`,
      '',
      fmt.n(s.cpuUsPerOp, 0),
      '',
      '',
      '',
      '',
      '',
      `${s.check} (≤${s.maxReaders} readers)`,
    ]);
  }
  if (rows.length) {
    console.log('Throughput (median of rounds) and acquire latency (pooled); "ours ÷ peer" = our ops/s over the peer\'s in the same workload');
    printTable(
      ['workload', 'peer', 'ops/s', 'rounds min–max', 'p50 ms', 'p99 ms', 'ours ÷ peer', 'client CPU µs/op', 'server CPU µs/op', 'cores busy', 'ZK req/op', 'notif/op', 'fairness', 'check'],
      rows,
      ['', '', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', ''],
    );
    console.log(
      'p50/p99: latency of acquire() (raw rows: of the operation itself). client CPU: the client processes\' user+sys CPU per acquisition ' +
        '(JVM: all threads); server CPU: the ZooKeeper (or redis-server) process; cores busy: ops/s × (client + server CPU) — this machine has ' +
        `${cpus().length}. ZK req/op: packets the server received per acquisition ` +
        '(incl. pings); notif/op: watch notifications sent (mntr zk_sum_node_*_watch_count). fairness: fewest/most acquisitions of one worker.',
    );
  }

  if (results.queue && Object.keys(results.queue).length) {
    console.log(`\nW4 queue: L waiters (one ZooKeeper session each) cycling through one lock, ${opts.holdMs} ms hold`);
    const qrows = [];
    for (const L of opts.queueLengths) {
      for (const peer of ['ours', 'herd']) {
        const q = results.queue[`${peer}/${L}`];
        if (!q) continue;
        qrows.push([String(L), PEER_LABEL[peer], fmt.ms(q.handoffP50), fmt.ms(q.handoffP99), fmt.n(q.notificationsPerRelease, 2), fmt.n(q.requestsPerRelease, 2), fmt.n(q.clientCpuUsPerRelease, 0), q.check]);
      }
    }
    printTable(['waiters', 'peer', 'handoff p50 ms', 'handoff p99 ms', 'notifications/release', 'ZK requests/release', 'client CPU µs/release', 'check'], qrows, ['r', '', 'r', 'r', 'r', 'r', 'r', '']);
    console.log('handoff: the next holder\'s acquire() returning − the holder\'s release() call (same process, different sessions).');
    const f = results.notifyFloor;
    if (f) console.log(`ZooKeeper's own floor: delete() call → another session's watch event, p50 ${fmt.ms(f.p50)} ms, p99 ${fmt.ms(f.p99)} ms (${f.samples} samples).`);
  }

  if (results.scale) {
    const { locks, waiters } = results.scale;
    console.log('\nScale (one process, one connection)');
    printTable(
      ['measure', 'value', 'check'],
      [
        [`${locks.count} distinct locks: acquire all (concurrently)`, `${fmt.n(locks.acquireMs, 0)} ms (${fmt.ops((locks.count * 1000) / locks.acquireMs)} locks/s)`, locks.check],
        [`  release all`, `${fmt.n(locks.releaseMs, 0)} ms`, ''],
        [`  heap while held (after GC)`, `+${fmt.mb(locks.m1.heapUsed - locks.m0.heapUsed)} (${fmt.n((locks.m1.heapUsed - locks.m0.heapUsed) / locks.count, 0)} B/lock)`, ''],
        [`  RSS while held`, `+${fmt.mb(locks.m1.rss - locks.m0.rss)} (${fmt.mb(locks.m1.rss)} total)`, ''],
        [`  heap after release (after GC)`, `${locks.m2.heapUsed >= locks.m0.heapUsed ? '+' : ''}${fmt.mb(locks.m2.heapUsed - locks.m0.heapUsed)} vs before`, ''],
        [`  client CPU`, `${fmt.n((locks.cpuMs * 1000) / locks.count, 0)} µs/lock (acquire + release)`, ''],
        [`  ZooKeeper requests / server CPU`, `${fmt.n(locks.zkRequests / locks.count, 2)} requests/lock, ${locks.zkCpuMs === undefined ? 'n/a' : `${fmt.n((locks.zkCpuMs * 1000) / locks.count, 0)} µs/lock`}`, ''],
        [`${waiters.count} waiters on one lock: all queued`, `${fmt.n(waiters.enqueueMs, 0)} ms`, waiters.check],
        [`  drain (first release → last release)`, `${fmt.n(waiters.drainMs, 0)} ms (${fmt.ms(waiters.drainMs / (waiters.count - 1))} ms/handoff, ${fmt.ops(((waiters.count - 1) * 1000) / waiters.drainMs)} handoffs/s)`, ''],
        [`  heap with ${waiters.count} queued (after GC)`, `+${fmt.mb(waiters.m1.heapUsed - waiters.m0.heapUsed)} (${fmt.n((waiters.m1.heapUsed - waiters.m0.heapUsed) / waiters.count, 0)} B/waiter)`, ''],
        [`  heap after the queue drained (after GC)`, `${waiters.m2.heapUsed >= waiters.m0.heapUsed ? '+' : ''}${fmt.mb(waiters.m2.heapUsed - waiters.m0.heapUsed)} vs before`, ''],
        [`  client CPU during drain`, `${fmt.n(waiters.cpuMs, 0)} ms (${fmt.n((waiters.cpuMs * 1000) / waiters.count, 0)} µs/handoff)`, ''],
        [`  ZooKeeper requests / notifications (enqueue + drain)`, `${fmt.n(waiters.zkRequests / waiters.count, 2)} requests/waiter, ${fmt.n(waiters.zkNotifications / waiters.count, 2)} notifications/waiter`, ''],
      ],
    );
  }

  if (results.churn) {
    const c = results.churn;
    console.log(
      `\nChurn ${c.seconds} s (8 workers: hot mutex, 256 names, tryAcquire, 1 ms timeouts, semaphore): ${c.cycles} cycles, ` +
        `heap after GC ${fmt.mb(c.before.heapUsed)} → ${fmt.mb(c.after.heapUsed)} (${c.heapGrowth >= 0 ? '+' : ''}${fmt.n(c.heapGrowth / 1024, 0)} KiB), ` +
        `RSS ${fmt.mb(c.before.rss)} → ${fmt.mb(c.after.rss)}; samples (heap MiB): ${c.samples.map((s) => (s.heapUsed / 1048576).toFixed(1)).join(' ')}; ` +
        `connection listeners ${JSON.stringify(c.listenersBefore)} → ${JSON.stringify(c.listenersAfter)}; check ${c.check}`,
    );
  }

  // ---- Targets ------------------------------------------------------------------------------
  const targets = [];
  const add = (name, met, detail) => targets.push({ name, met, detail });
  const w1 = W['W1/ours'];
  const raw = W['W1/raw'];
  if (w1 && raw) {
    const r = w1.opsPerSec / raw.opsPerSec;
    add('W1 ≥ 95% of raw serial create+delete', r >= 0.95, `${fmt.ops(w1.opsPerSec)} vs ${fmt.ops(raw.opsPerSec)} cycles/s = ${(r * 100).toFixed(1)}%`);
  }
  if (W['W3/ours'] && W['W3/curator']) {
    const r = W['W3/ours'].opsPerSec / W['W3/curator'].opsPerSec;
    add('W3 ≥ 1.5× Curator', r >= 1.5, `${fmt.ops(W['W3/ours'].opsPerSec)} vs ${fmt.ops(W['W3/curator'].opsPerSec)} ops/s = ${r.toFixed(2)}×`);
  }
  const exists = W['W1/exists'];
  const q64 = results.queue?.['ours/64'];
  if (q64 && exists) {
    const r = q64.handoffP50 / exists.p50;
    const f = results.notifyFloor;
    const floor = f ? `; ZooKeeper's own delete → watch event p50 ${fmt.ms(f.p50)} ms = ${(f.p50 / exists.p50).toFixed(2)}× exists, ours ÷ that ${(q64.handoffP50 / f.p50).toFixed(2)}×` : '';
    add('handoff p50 ≤ 2 × exists round trip', r <= 2, `W4 (64 waiters) handoff p50 ${fmt.ms(q64.handoffP50)} ms vs exists p50 ${fmt.ms(exists.p50)} ms = ${r.toFixed(2)}×${floor}`);
  }
  const perL = opts.queueLengths.map((L) => [L, results.queue?.[`ours/${L}`]]).filter(([, q]) => q);
  if (perL.length) {
    const ok = perL.every(([, q]) => q.notificationsPerReleaseRounds.every((x) => Math.abs(x - 1) <= 0.02));
    add('exactly 1 notification per release at any queue length', ok, perL.map(([L, q]) => `${L} waiters: ${q.notificationsPerReleaseRounds.map((x) => x.toFixed(2)).join('/')}`).join('; '));
  }
  if (W['W2/ours'] && (W['W2/curator'] || W['W2/redis'])) {
    const c = W['W2/curator'] ? W['W2/ours'].opsPerSec / W['W2/curator'].opsPerSec : undefined;
    const rd = W['W2/redis'] ? W['W2/ours'].opsPerSec / W['W2/redis'].opsPerSec : undefined;
    add(
      'W2 ≥ 5× Curator and ahead of the Redis lock',
      (c === undefined || c >= 5) && (rd === undefined || rd > 1),
      `${fmt.ops(W['W2/ours'].opsPerSec)} ops/s: ${c === undefined ? 'Curator n/a' : `${c.toFixed(2)}× Curator (${fmt.ops(W['W2/curator'].opsPerSec)})`}, ${rd === undefined ? 'Redis n/a' : `${rd.toFixed(2)}× Redis (${fmt.ops(W['W2/redis'].opsPerSec)})`}`,
    );
  }
  if (results.churn) {
    const g = results.churn.heapGrowth;
    add(
      'memory flat over churn (heap after GC grows < 1 MiB)',
      g < 1048576,
      `${results.churn.seconds} s, ${results.churn.cycles} cycles: ${g >= 0 ? '+' : ''}${fmt.n(g / 1024, 0)} KiB (${fmt.n(g / Math.max(1, results.churn.cycles), 2)} B/cycle)`,
    );
  }
  results.targets = targets;
  if (targets.length) {
    console.log('\nTargets (ratios within this run)');
    printTable(['target', 'result', 'numbers'], targets.map((t) => [t.name, t.met ? 'met' : 'NOT MET', t.detail]));
  }

  if (results.profiles) {
    for (const [name, p] of Object.entries(results.profiles)) {
      console.log(
        `\nCPU profile ${name}: ${fmt.ops(p.opsPerSec)} ops/s, ${p.acquired} acquisitions, client CPU ${fmt.n(p.clientCpuUsPerOp, 0)} µs/op, ` +
          `ZooKeeper CPU ${fmt.n(p.serverCpuUsPerOp, 0)} µs/op, wall ${fmt.n(1e6 / p.opsPerSec, 0)} µs/op (profiled: slower than unprofiled)`,
      );
      const perOp = (ms) => `${((ms * 1000) / p.acquired).toFixed(1)} µs/op`;
      console.log('  self time by area: ' + p.areas.map((a) => `${a.area} ${perOp(a.ms)}`).join(', '));
      console.log('  top self time:');
      for (const f of p.top.slice(0, 12)) console.log(`    ${perOp(f.ms).padStart(12)}  ${f.frame}`);
      console.log('  inclusive time (library and binding entry points):');
      for (const f of p.inclusive.slice(0, 14)) console.log(`    ${perOp(f.ms).padStart(12)}  ${f.frame}`);
    }
  }

  console.log(
    `\nload average at start ${results.loadAverageAtStart.map((x) => x.toFixed(2)).join(' ')}, at end ${results.loadAverageAtEnd.map((x) => x.toFixed(2)).join(' ')} ` +
      `(${cpus().length} CPUs; other processes on this machine compete with the clients and the servers)`,
  );
  if (failures.length) {
    console.log(`\n!!!!!!!! ${failures.length} CORRECTNESS FAILURE(S):`);
    for (const f of failures) console.log(`  - ${f}`);
    process.exitCode = 1;
  }
  results.failures = failures;
  const dir = join(BENCH_DIR, 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${stamp()}.json`);
  writeFileSync(file, JSON.stringify(results, null, 1));
  console.log(`\nresults: ${file}`);
}

await main();
