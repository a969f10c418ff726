// The tables of a bench run (stdout) and its JSON (bench/results/<date>.json).
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { failures, opts, stamp } from './options.mjs';
import { BENCH_DIR, printTable } from './support.mjs';

export const fmt = {
  ops: (x) => (x === undefined ? '' : x >= 100 ? x.toFixed(0) : x.toFixed(1)),
  ms: (x) => (x === undefined || Number.isNaN(x) ? '' : x < 10 ? x.toFixed(3) : x < 100 ? x.toFixed(2) : x.toFixed(1)),
  ratio: (x) => (x === undefined || !Number.isFinite(x) ? '' : `${x.toFixed(2)}×`),
  n: (x, d = 1) => (x === undefined || !Number.isFinite(x) ? '' : x.toFixed(d)),
  mb: (bytes) => `${(bytes / 1048576).toFixed(1)} MiB`,
};

// ---------------------------------------------------------------------------------------------

export const PEER_LABEL = {
  raw: 'raw create+delete (serial)',
  exists: 'raw exists round trip',
  ours: 'nestjs-zk-lock Mutex',
  'ours-traced': 'nestjs-zk-lock Mutex, traced (OpenTelemetry SDK registered)',
  'ours-fifo': 'nestjs-zk-lock Mutex, coalesce: false',
  'ours-retain': 'nestjs-zk-lock Mutex, retainMs: 1000',
  'ours-bg': 'nestjs-zk-lock Mutex, releaseInBackground',
  'ours-keys': 'nestjs-zk-lock Mutex per key (random key)',
  'raw-keys': 'raw lock requests per key (create + listing, delete; 16 workers, no waiting)',
  'ours-auth': 'nestjs-zk-lock Mutex, digest auth + SECURE_PARENT_ACL',
  herd: 'naive herd lock (same client)',
  curator: 'Curator InterProcessMutex',
  redis: 'redis-semaphore Mutex (Redis)',
};

// ---------------------------------------------------------------------------------------------
// Report

/**
 * Leadership handover against ZooKeeper's floor and Curator's LeaderLatch, and the cost of digest
 * auth: each a ratio to a peer measured in the same run.
 * @param {Record<string, any>} results
 */
function reportRatios(results) {
  const rows = [];
  const L = results.leadership;
  if (L) {
    const pair = (/** @type {any} */ x) => `${fmt.ms(x.p50)} / ${fmt.ms(x.p99)} ms`;
    const ratio = (/** @type {any} */ a, /** @type {any} */ b) => `${fmt.ratio(a.p50 / b.p50)} / ${fmt.ratio(a.p99 / b.p99)}`;
    const floor = `ZooKeeper delete → watch event in another process: ${pair(L.floor)}`;
    const label = (/** @type {string} */ call) => `handover, ${L.participants} participants: ${call} → successor's gained, p50 / p99`;
    rows.push([label("leader's close()"), pair(L.close), floor, ratio(L.close, L.floor), `${L.close.check} (${L.close.samples})`]);
    if (L.curator) rows.push(['', '', `Curator LeaderLatch close() → successor's isLeader(): ${pair(L.curator)}`, ratio(L.close, L.curator), `(${L.curator.samples})`]);
    rows.push([label("leader's stepDown()"), pair(L.stepDown), floor, ratio(L.stepDown, L.floor), `${L.stepDown.check} (${L.stepDown.samples})`]);
  }
  const plain = results.timed?.['W1/ours'];
  const raw = results.timed?.['W1/raw'];
  for (const peer of ['ours', 'ours-bg', 'ours-retain']) {
    const a = results.timed?.[`W1/${peer}`];
    if (!a || !raw) continue;
    rows.push([
      `W1 uncontended (1 worker), ${PEER_LABEL[peer]}, cycles/s`,
      `${fmt.ops(a.opsPerSec)} (${fmt.n(a.zkRequestsPerOp, 2)} req/op, ${fmt.n(a.clientCpuUsPerOp, 0)} µs CPU/op)`,
      `raw serial create+delete: ${fmt.ops(raw.opsPerSec)} (${fmt.n(raw.zkRequestsPerOp, 2)} req/op)`,
      fmt.ratio(a.opsPerSec / raw.opsPerSec),
      a.check,
    ]);
  }
  const pipelined = results.timed?.['W5/raw'];
  for (const workload of ['W5', 'W5x4']) {
    const a = results.timed?.[`${workload}/ours-keys`];
    if (!a || !pipelined) continue;
    rows.push([
      `${workload === 'W5' ? 'W5 1 process' : 'W5 4 processes'} × 16 callers, 10 000 keys, acquisitions/s`,
      `${fmt.ops(a.opsPerSec)} (${fmt.n(a.zkRequestsPerOp, 2)} req/op, ${fmt.n(a.clientCpuUsPerOp, 0)} µs client CPU/op)`,
      `raw create+delete, 64 outstanding: ${fmt.ops(pipelined.opsPerSec)} (${fmt.n(pipelined.zkRequestsPerOp, 2)} req/op)`,
      fmt.ratio(a.opsPerSec / pipelined.opsPerSec),
      a.check,
    ]);
    const floor = results.timed?.['W5/raw-keys'];
    if (floor) {
      rows.push([
        `${workload === 'W5' ? 'W5 1 process' : 'W5 4 processes'}: against the same three requests without the library (16 workers, 10 000 container paths)`,
        `${fmt.ops(a.opsPerSec)} (${fmt.n(a.clientCpuUsPerOp, 0)} µs client, ${fmt.n(a.serverCpuUsPerOp, 0)} µs server CPU/op)`,
        `raw lock requests: ${fmt.ops(floor.opsPerSec)} (${fmt.n(floor.zkRequestsPerOp, 2)} req/op, ${fmt.n(floor.clientCpuUsPerOp, 0)} µs client, ${fmt.n(floor.serverCpuUsPerOp, 0)} µs server CPU/op)`,
        fmt.ratio(a.opsPerSec / floor.opsPerSec),
        'n/a',
      ]);
    }
    const cold = results.keysWarmup?.[workload];
    if (cold) {
      rows.push([
        `${workload === 'W5' ? 'W5 1 process' : 'W5 4 processes'}: the warm-up's cold pass (every key once, new to the process), acquisitions/s`,
        `${fmt.ops(cold.perSec)} (${fmt.n(cold.clientCpuUsPerOp, 0)} µs client CPU/op)`,
        `raw create+delete, 64 outstanding: ${fmt.ops(pipelined.opsPerSec)}`,
        fmt.ratio(cold.perSec / pipelined.opsPerSec),
        'n/a',
      ]);
    }
    const second = cold?.second;
    if (second) {
      rows.push([
        `${workload === 'W5' ? 'W5 1 process' : 'W5 4 processes'}: the warm-up's second pass (every key once more: its path watch set), acquisitions/s`,
        `${fmt.ops(second.perSec)} (${fmt.n(second.clientCpuUsPerOp, 0)} µs client CPU/op)`,
        `raw create+delete, 64 outstanding: ${fmt.ops(pipelined.opsPerSec)}`,
        fmt.ratio(second.perSec / pipelined.opsPerSec),
        'n/a',
      ]);
    }
  }
  for (const workload of ['W1', 'W2']) {
    const traced = results.timed?.[`${workload}/ours-traced`];
    const off = results.timed?.[`${workload}/ours`];
    if (!traced || !off) continue;
    const figures = (/** @type {any} */ a) => `${fmt.ops(a.opsPerSec)} (p50 ${fmt.ms(a.p50)} ms, ${fmt.n(a.zkRequestsPerOp, 2)} req/op, ${fmt.n(a.clientCpuUsPerOp, 0)} µs CPU/op)`;
    rows.push([
      `${workload === 'W1' ? 'W1 (1 worker)' : 'W2 (8 workers, 1 process)'} traced: OpenTelemetry SDK registered, batch processor, cycles/s`,
      figures(traced),
      `tracing off (no tracer provider): ${figures(off)}`,
      fmt.ratio(traced.opsPerSec / off.opsPerSec),
      traced.check,
    ]);
  }
  const authed = results.timed?.['W1/ours-auth'];
  if (plain && authed) {
    rows.push([
      'W1 with digest auth + SECURE_PARENT_ACL (1 worker), cycles/s',
      `${fmt.ops(authed.opsPerSec)} (p50 ${fmt.ms(authed.p50)} ms, ${fmt.n(authed.zkRequestsPerOp, 2)} req/op)`,
      `the same without auth: ${fmt.ops(plain.opsPerSec)} (p50 ${fmt.ms(plain.p50)} ms, ${fmt.n(plain.zkRequestsPerOp, 2)} req/op)`,
      fmt.ratio(authed.opsPerSec / plain.opsPerSec),
      authed.check,
    ]);
  }
  const K = results.keyChurn;
  if (K?.ours && K.containers) {
    const drained = (/** @type {any} */ k) => (k.drainMs === undefined ? `not drained ${k.drainSeconds} s later (+${k.leftAfterWindow})` : `drained ${fmt.n(k.drainMs / 1000, 1)} s later`);
    const describe = (/** @type {any} */ k) => `${fmt.ops(k.keysPerSec)} new keys/s: peak +${k.peakAbove} znodes, +${k.atEndAbove} at the end, ${drained(k)}`;
    rows.push([
      'key churn (every acquisition a new key): znodes left on the server',
      describe(K.ours),
      `container paths left to ZooKeeper's reaper (Curator): ${describe(K.containers)}`,
      `${fmt.ratio(K.ours.peakAbove / K.containers.peakAbove)} peak`,
      K.ours.errors.length || K.containers.errors.length ? `errors: ${[...K.ours.errors, ...K.containers.errors].slice(0, 2).join(' | ')}` : 'ok',
    ]);
  }
  if (!rows.length) return;
  console.log('\nRatios to a peer of the same run (leadership: one ZooKeeper session and process per participant; samples pooled over rounds)');
  printTable(['measure', 'ours', 'peer (same run)', 'ours ÷ peer', 'check (samples)'], rows, ['', 'r', '', 'r', '']);
  if (L) {
    console.log(
      "handover: from the leader's call to the successor's event (CLOCK_MONOTONIC, across processes); a closed participant joins " +
        "again after each handover. check: each successor's term began after the old term's signal aborted, with a greater fencing token.",
    );
  }
}

/**
 * The sample app with @WithLock and with LOCKS=off (bench/app.mjs), side by side.
 * @param {Record<string, any> | undefined} app
 */
function reportApp(app) {
  if (!app) return;
  console.log(`\nSample app: ${app.instances} instances, ${app.buyers} concurrent buyers over ${app.events} events, ${app.rounds} alternating rounds × ${app.roundMs} ms (medians)`);
  const statuses = (/** @type {Record<string, number>} */ by) => Object.entries(by).sort(([a], [b]) => a.localeCompare(b)).map(([s, n]) => `${s}: ${n}`).join(', ');
  const rows = [];
  for (const mode of ['locks', 'off']) {
    const a = app[mode];
    rows.push([
      mode === 'locks' ? '@WithLock' : 'LOCKS=off',
      fmt.ops(a.reqPerSec),
      `${Math.min(...a.rounds)}–${Math.max(...a.rounds)}`,
      statuses(a.byStatus),
      `${fmt.ms(a.p50)} / ${fmt.ms(a.p99)}`,
      fmt.n(a.instanceCpuUs, 0),
      `${Math.min(...a.instanceCpuUsRounds)}–${Math.max(...a.instanceCpuUsRounds)}`,
      fmt.n(a.zkCpuUs, 0),
      fmt.n(a.zkRequests, 2),
      fmt.n(a.loadCpuUs, 0),
      a.check,
    ]);
  }
  const on = app.locks;
  const off = app.off;
  rows.push([
    'locks ÷ off',
    fmt.ratio(on.reqPerSec / off.reqPerSec),
    '',
    '',
    '',
    fmt.ratio(on.instanceCpuUs / off.instanceCpuUs),
    '',
    '',
    '',
    fmt.ratio(on.loadCpuUs / off.loadCpuUs),
    '',
  ]);
  printTable(
    ['sample app', 'req/s', 'rounds min–max', 'answers by status (in the windows)', 'p50 / p99 ms', 'instance CPU µs/req', 'rounds min–max', 'ZK CPU µs/req', 'ZK req/req', 'buyers CPU µs/req', 'check'],
    rows,
    ['', 'r', 'r', '', 'r', 'r', 'r', 'r', 'r', 'r', ''],
  );
  console.log(
    `CPU per lock cycle (instances' CPU per request, @WithLock − LOCKS=off): ${fmt.n(on.instanceCpuUs - off.instanceCpuUs, 0)} µs. ` +
      "instance CPU: the three instances' user+sys time (/proc) over the window ÷ answers in it; buyers: this process. " +
      'check: every 201 of the run is a seat the database counts.',
  );
  for (const [mode, p] of Object.entries(app.profiles ?? {})) {
    const perReq = (/** @type {number} */ ms) => `${((ms * 1000) / p.requests).toFixed(1)} µs/req`;
    console.log(
      `\nCPU profile of instance-1, ${mode}: ~${p.requests} requests served in the window (a third of ${fmt.ops(p.reqPerSec * opts.profileSeconds)}), ` +
        `its CPU ${fmt.n((p.cpuMs * 1000) / p.requests, 0)} µs/req (profiled: slower than unprofiled); ${p.file}`,
    );
    console.log('  self time by area: ' + p.areas.filter((/** @type {any} */ a) => a.area !== 'idle').map((/** @type {any} */ a) => `${a.area} ${perReq(a.ms)}`).join(', '));
    console.log('  top self time:');
    for (const f of p.top.slice(0, 20)) console.log(`    ${perReq(f.ms).padStart(14)}  ${f.frame}`);
    console.log('  inclusive time (library, sample app, packages):');
    for (const f of p.inclusive.slice(0, 25)) console.log(`    ${perReq(f.ms).padStart(14)}  ${f.frame}`);
  }
}

/** Heap after GC per item while held (a scale run's raw nodes, locks or waiters). */
const heapPer = (/** @type {any} */ r) => (r.m1.heapUsed - r.m0.heapUsed) / r.count;

/** @param {Record<string, any>} results */
export function report(results) {
  const W = results.timed ?? {};
  console.log('');
  const rows = [];
  const ratioOf = (workload, peer) => {
    const ours = W[`${workload}/ours`]?.opsPerSec;
    const other = W[`${workload}/${peer}`]?.opsPerSec;
    return ours && other && peer !== 'ours' ? ours / other : undefined;
  };
  const workloadLabel = {
    W1: 'W1 uncontended (1 worker)',
    W2: 'W2 1 process × 8 workers',
    W3: 'W3 4 processes × 4 workers',
    W5: 'W5 10 000 keys, 1 process × 16 (raw: 64 outstanding)',
    W5x4: 'W5 10 000 keys, 4 processes × 16',
  };
  for (const workload of ['W1', 'W2', 'W3', 'W5', 'W5x4']) {
    const peers = ['raw', 'raw-keys', 'exists', 'ours', 'ours-traced', 'ours-bg', 'ours-retain', 'ours-auth', 'ours-keys', 'ours-fifo', 'herd', 'curator', 'redis'];
    for (const peer of peers.flatMap((p) => [p, `${p}@addon`])) {
      const a = W[`${workload}/${peer}`];
      if (!a) continue;
      const [name, client] = peer.split('@');
      rows.push([
        workloadLabel[workload],
        `${name === 'raw' && workload.startsWith('W5') ? 'raw create+delete, 64 outstanding' : PEER_LABEL[name]}${client ? ` [${client}]` : ''}`,
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
    console.log(
      'Throughput (median of rounds) and acquire latency (pooled); "ours ÷ peer" = our ops/s (default client) over the peer\'s in the same workload; ' +
        "[addon]: through ZkConnection's `client: 'addon'` (the C client), the other ZooKeeper rows through the default (TypeScript) client",
    );
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
    if (f) {
      console.log(
        `ZooKeeper's own floor, after ${f.idleMs} ms idle like a handoff after its hold: delete() call → another session's watch event, ` +
          `p50 ${fmt.ms(f.p50)} ms, p99 ${fmt.ms(f.p99)} ms; an exists round trip p50 ${fmt.ms(f.existsP50)} ms (${f.samples} samples each).`,
      );
    }
  }

  if (results.bigQueue) {
    console.log('\nBig queue: two contenders (a session each) hand one lock over, with a crowd of another session\'s nodes queued behind them');
    const rows = Object.entries(results.bigQueue).map(([waiters, q]) => [
      Number(waiters).toLocaleString('en'),
      fmt.mb(q.listingBytes),
      fmt.ms(q.handoffP50),
      fmt.ms(q.handoffP99),
      fmt.ms(q.enqueueP50),
      String(q.linkChanges),
      `${q.check} (${q.samples})`,
    ]);
    printTable(['waiters', 'listing', 'handoff p50 ms', 'handoff p99 ms', 'queue (create + listing) p50 ms', 'link changes', 'check (samples)'], rows, ['r', 'r', 'r', 'r', 'r', 'r', '']);
    console.log(
      "handoff: the next holder's acquire() resolving − the holder's release() call (same process, its own session): it waits on the holder's " +
        'node, so no listing is on that path. queue: from acquire() to its contended event, its create and the listing of the whole queue.',
    );
  }

  reportRatios(results);

  for (const [client, scale] of Object.entries(results.scale ?? {})) {
    const { raw, locks, waiters } = /** @type {any} */ (scale);
    console.log(`\nScale (one process, one connection, ${client} client)`);
    printTable(
      ['measure', 'value', 'check'],
      [
        [`${locks.count} distinct locks: acquire all (concurrently)`, `${fmt.n(locks.acquireMs, 0)} ms (${fmt.ops((locks.count * 1000) / locks.acquireMs)} locks/s)`, locks.check],
        ...(raw
          ? [[`  raw peer: ${raw.count} ephemeral nodes (a container path each) created at once`, `${fmt.n(raw.acquireMs, 0)} ms: ours ${fmt.ratio(raw.acquireMs / locks.acquireMs)} raw's rate; heap ${fmt.n(heapPer(raw), 0)} B/node (ours ${fmt.ratio(heapPer(locks) / heapPer(raw))}), client CPU ${fmt.n((raw.cpuMs * 1000) / raw.count, 0)} µs/node`, '']]
          : []),
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

  reportApp(results.app);

  // ---- Targets ------------------------------------------------------------------------------
  // Issue #36's first: what a lock costs the request that takes it, each a ratio to a peer of this
  // run on the same client (the target is set for the default client; the addon's rows against its
  // own peers, for comparison). Then issue #30's (the TypeScript client against the addon) and the
  // earlier issues'.
  /** @type {{ name: string, client: string, value: string, target: string, met: boolean | undefined, detail: string }[]} */
  const targets = [];
  /**
   * @param {string} name
   * @param {string} client
   * @param {number | undefined} ratio
   * @param {number} goal at least this ratio
   * @param {string} detail
   */
  const atLeast = (name, client, ratio, goal, detail, digits = 1) => {
    if (ratio === undefined || !Number.isFinite(ratio)) return;
    targets.push({ name, client, value: fmt.ratio(ratio), target: `≥ ${goal.toFixed(digits)}×`, met: ratio >= goal, detail });
  };
  /** @param {string} name @param {string} client @param {number | undefined} ratio @param {number} goal at most this ratio @param {string} detail */
  const atMost = (name, client, ratio, goal, detail) => {
    if (ratio === undefined || !Number.isFinite(ratio)) return;
    targets.push({ name, client, value: fmt.ratio(ratio), target: `≤ ${goal.toFixed(1)}×`, met: ratio <= goal, detail });
  };
  const add = (name, met, detail) => targets.push({ name, client: 'typescript', value: '', target: '', met, detail });
  const ops = (/** @type {any} */ a) => fmt.ops(a.opsPerSec);
  const on = (/** @type {string} */ key, /** @type {string} */ client) => W[`${key}${client === 'addon' ? '@addon' : ''}`];
  for (const client of ['typescript', 'addon']) {
    const raw = on('W1/raw', client);
    const a = on('W1/ours', client);
    if (!raw) continue;
    if (a) {
      atMost('#36 client CPU per uncontended lock cycle (W1 default) ÷ raw serial create+delete, same client', client, a.clientCpuUsPerOp / raw.clientCpuUsPerOp, 1.3, `${fmt.n(a.clientCpuUsPerOp, 0)} vs ${fmt.n(raw.clientCpuUsPerOp, 0)} µs client CPU (${fmt.n(a.zkRequestsPerOp, 2)} vs ${fmt.n(raw.zkRequestsPerOp, 2)} requests)`);
    }
    for (const [peer, label, goal] of /** @type {[string, string, number][]} */ ([['ours', 'default options', 0.9], ['ours-bg', 'releaseInBackground', 1.8]])) {
      const b = on(`W1/${peer}`, client);
      if (b) atLeast(`#36 W1 ${label} ÷ raw serial create+delete, same client`, client, b.opsPerSec / raw.opsPerSec, goal, `${ops(b)} vs ${ops(raw)} cycles/s (${fmt.n(b.zkRequestsPerOp, 2)} requests/cycle, ${fmt.n(b.clientCpuUsPerOp, 0)} µs client CPU)`);
    }
  }
  if (results.app?.locks && results.app?.off) {
    const { locks, off } = results.app;
    atLeast('#36 sample app: locked ÷ unlocked requests/s', 'typescript', locks.reqPerSec / off.reqPerSec, 0.7, `${fmt.ops(locks.reqPerSec)} vs ${fmt.ops(off.reqPerSec)} requests/s; CPU per lock cycle ${fmt.n(locks.instanceCpuUs - off.instanceCpuUs, 0)} µs (instances' CPU per request ${fmt.n(locks.instanceCpuUs, 0)} vs ${fmt.n(off.instanceCpuUs, 0)} µs)`);
  }
  const w3 = W['W3/ours'];
  if (w3 && W['W3/redis']) {
    atLeast('#36 W3 4 processes × 4 callers ÷ redis-semaphore', 'typescript', w3.opsPerSec / W['W3/redis'].opsPerSec, 1.1, `${ops(w3)} vs ${ops(W['W3/redis'])} acquisitions/s (redis fairness ${fmt.n(W['W3/redis'].fairness, 2)})`);
  }
  if (w3?.fairness !== undefined) {
    targets.push({ name: '#36 W3 fairness (fewest ÷ most acquisitions of one caller)', client: 'typescript', value: fmt.n(w3.fairness, 4), target: '≥ 0.99', met: w3.fairness >= 0.99, detail: `median of ${w3.rounds.length} rounds` });
  }
  for (const [client, scale] of Object.entries(results.scale ?? {})) {
    const { locks, raw } = /** @type {any} */ (scale);
    const kib = heapPer(locks) / 1024;
    targets.push({ name: '#36 heap per held lock (10 000 distinct locks held, after GC)', client, value: `${fmt.n(kib, 2)} KiB`, target: '≤ 3.00 KiB', met: kib <= 3, detail: `raw: ${fmt.n(heapPer(raw), 0)} B per ephemeral node; ${fmt.n((locks.cpuMs * 1000) / locks.count, 0)} µs client CPU per lock (acquire + release)` });
  }
  const bq = results.bigQueue;
  if (bq?.[10] && bq?.[100000]) {
    const sizes = Object.keys(bq).map(Number).sort((a, b) => a - b);
    atMost('#36 handoff p50 with 100 000 waiters queued ÷ with 10 ("flat")', 'typescript', bq[100000].handoffP50 / bq[10].handoffP50, 1.5, sizes.map((n) => `${n.toLocaleString('en')}: ${fmt.ms(bq[n].handoffP50)} ms`).join(', '));
  }
  // Issue #30's: the TypeScript client against the addon, raw peers side by side.
  const rawSerialAddon = W['W1/raw@addon'];
  const rawPipelinedAddon = W['W5/raw@addon'];
  const rawSerial = W['W1/raw'];
  const rawPipelined = W['W5/raw'];
  if (rawSerial && rawSerialAddon) {
    atLeast('#30 raw create+delete, serial: new client ÷ addon', 'typescript', rawSerial.opsPerSec / rawSerialAddon.opsPerSec, 1, `${ops(rawSerial)} vs ${ops(rawSerialAddon)} pairs/s (client CPU ${fmt.n(rawSerial.clientCpuUsPerOp, 0)} vs ${fmt.n(rawSerialAddon.clientCpuUsPerOp, 0)} µs/pair)`);
  }
  if (rawPipelined && rawPipelinedAddon) {
    atLeast('#30 raw create+delete, 64 outstanding: new client ÷ addon', 'typescript', rawPipelined.opsPerSec / rawPipelinedAddon.opsPerSec, 2, `${ops(rawPipelined)} vs ${ops(rawPipelinedAddon)} pairs/s (client CPU ${fmt.n(rawPipelined.clientCpuUsPerOp, 0)} vs ${fmt.n(rawPipelinedAddon.clientCpuUsPerOp, 0)} µs/pair)`);
  }
  const existsTs = W['W1/exists'];
  const existsAddon = W['W1/exists@addon'];
  if (existsTs && existsAddon) {
    targets.push({ name: 'raw exists round trip: new client ÷ addon', client: 'typescript', value: fmt.ratio(existsTs.opsPerSec / existsAddon.opsPerSec), target: 'report', met: undefined, detail: `${ops(existsTs)} vs ${ops(existsAddon)} round trips/s (p50 ${fmt.ms(existsTs.p50)} vs ${fmt.ms(existsAddon.p50)} ms; client CPU ${fmt.n(existsTs.clientCpuUsPerOp, 0)} vs ${fmt.n(existsAddon.clientCpuUsPerOp, 0)} µs)` });
  }
  if (rawPipelinedAddon) {
    const w5x4 = W['W5x4/ours-keys'];
    const vsOwn = (/** @type {number} */ perSec) => (rawPipelined ? `; ${fmt.ratio(perSec / rawPipelined.opsPerSec)} the new client's raw (${ops(rawPipelined)})` : '');
    if (w5x4) {
      atLeast('#30 W5 4 processes × 16 ÷ raw pipelined (addon, 64 outstanding)', 'typescript', w5x4.opsPerSec / rawPipelinedAddon.opsPerSec, 0.8, `${ops(w5x4)} vs ${ops(rawPipelinedAddon)} acquisitions/s (${fmt.n(w5x4.zkRequestsPerOp, 2)} requests each)${vsOwn(w5x4.opsPerSec)}`);
    }
    for (const [workload, label] of [['W5x4', '4 processes'], ['W5', '1 process']]) {
      const cold = results.keysWarmup?.[workload];
      if (!cold) continue;
      atLeast(`#30 W5 keys new to the process (cold pass, ${label}) ÷ raw pipelined (addon)`, 'typescript', cold.perSec / rawPipelinedAddon.opsPerSec, 0.6, `${fmt.ops(cold.perSec)} vs ${ops(rawPipelinedAddon)} acquisitions/s${vsOwn(cold.perSec)}`);
    }
  }
  for (const [client, c] of Object.entries(results.closeBlock ?? {})) {
    // The median: one of a few samples may be preempted by other processes on a busy machine.
    const ok = c.closeMs !== undefined && c.closeMs < 1;
    targets.push({
      name: '#30 closing a lost session on a silent link: event-loop block of close()',
      client,
      value: c.closeMs === undefined ? 'not closed' : `${fmt.ms(c.closeMs)} ms`,
      target: client === 'typescript' ? '0 ms (median < 1)' : 'report (~1.5 s)',
      met: client === 'typescript' ? ok : undefined,
      detail: `median of ${c.runs.length} (max ${fmt.ms(c.closeMsMax)} ms); longest event-loop stall from the silence to 2 s after the loss ${fmt.ms(c.maxStallMs)} ms (idle link: ${fmt.ms(c.baselineStallMs)} ms); lost ${fmt.n(c.lostAfterMs, 0)} ms after the silence (session timeout ${c.sessionTimeoutMs} ms)`,
    });
  }
  // Earlier issues' targets (W1 with retainMs against the default client's raw serial pairs).
  const retain = W['W1/ours-retain'];
  if (retain && rawSerial) {
    const r = retain.opsPerSec / rawSerial.opsPerSec;
    targets.push({ name: 'W1 with retainMs ÷ raw serial create+delete', client: 'typescript', value: fmt.ratio(r), target: '≥ 1.0×', met: r >= 1, detail: `${ops(retain)} vs ${ops(rawSerial)} cycles/s` });
  }
  if (W['W3/ours'] && W['W3/curator']) {
    const r = W['W3/ours'].opsPerSec / W['W3/curator'].opsPerSec;
    add('W3 ≥ 1.5× Curator', r >= 1.5, `${fmt.ops(W['W3/ours'].opsPerSec)} vs ${fmt.ops(W['W3/curator'].opsPerSec)} ops/s = ${r.toFixed(2)}×`);
  }
  const q64 = results.queue?.['ours/64'];
  const f = results.notifyFloor;
  if (q64 && f?.existsP50 !== undefined) {
    const bound = f.p50 + f.existsP50;
    add(
      'W4 handoff p50 (64 waiters) ≤ delete → watch floor + one exists round trip',
      q64.handoffP50 <= bound,
      `${fmt.ms(q64.handoffP50)} ms vs ${fmt.ms(f.p50)} + ${fmt.ms(f.existsP50)} = ${fmt.ms(bound)} ms (both after ${f.idleMs} ms idle, as a handoff); ours ÷ floor ${(q64.handoffP50 / f.p50).toFixed(2)}×`,
    );
  }
  const perL = opts.queueLengths.map((L) => [L, results.queue?.[`ours/${L}`]]).filter(([, q]) => q);
  if (perL.length) {
    // The head's own-node watch, the next node's watch on the head and the watch of the node two
    // behind it (see exclusiveVerdict): three, whatever the length (the herd: one per waiter).
    const ok = perL.every(([, q]) => q.notificationsPerReleaseRounds.every((x) => x <= 3.02));
    add('at most 3 notifications per release at any queue length', ok, perL.map(([L, q]) => `${L} waiters: ${q.notificationsPerReleaseRounds.map((x) => x.toFixed(2)).join('/')}`).join('; '));
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
    console.log("\nTargets (ratios within this run; #36 and #30: those issues' targets, set for the default client; the addon's #36 rows against its own peers, for comparison)");
    printTable(
      ['target', 'client', 'measured', 'target', 'met', 'numbers'],
      targets.map((t) => [t.name, t.client, t.value, t.target, t.met === undefined ? '' : t.met ? 'met' : 'NOT MET', t.detail]),
      ['', '', 'r', 'r', '', ''],
    );
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
