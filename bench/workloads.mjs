// The workloads of a bench run, one function each, in the order run.mjs calls them. Each records
// its figures in ctx.results and its correctness failures with fail().
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BASE, fail, opts, stamp, wants } from './options.mjs';
import { Agent, BENCH_DIR, median, mntr, notificationsIn, percentile, processCpuMs, summarizeCpuProfile } from './support.mjs';
import { aggregate, counterFile, javaAgent, nodeAgent, readCounterFile, runKey, timed } from './timed.mjs';

/** The clients a workload runs through where the comparison matters: the default, and the addon unless --no-addon. */
export const CLIENTS = /** @type {('typescript' | 'addon')[]} */ (opts.addon ? ['typescript', 'addon'] : ['typescript']);
/** An agent's config for `client` (ZkConnection's default when 'typescript'). */
const withClient = (config, client) => (client === 'addon' ? { ...config, client } : config);

/**
 * What the workloads share: the servers, the agents' config, the live agents (closed at the end
 * by run.mjs) and the results.
 * @typedef {object} BenchContext
 * @property {string} zk
 * @property {number[] | undefined} zkPid the ZooKeeper servers' JVMs (their CPU time), when started here
 * @property {{ port: number, pid?: number, stop: () => Promise<void> } | undefined} redis
 * @property {{ zk: string, redisPort?: number }} config
 * @property {Agent[]} agents
 * @property {(agent: Agent) => Agent} track
 * @property {Record<string, any>} results
 */

/** @param {number[]} xs */
function rangeOf(xs) {
  return `${Math.round(Math.min(...xs))}–${Math.round(Math.max(...xs))}`;
}

/**
 * The long-lived agents: the main Node one (the default client), its twin through the addon (the
 * raw baselines, W1 and the close block side by side), four processes (W3, leadership), Curator's
 * (when it can run here).
 * @param {BenchContext} ctx
 * @param {((connectString: string) => string[]) | undefined} curatorArgs
 */
export async function startAgents({ zk, config, agents, track }, curatorArgs) {
  const needMain = ['w1', 'w2', 'w4', 'w5', 'sem', 'rw', 'auth', 'close'].some(wants);
  const needProcs = wants('w3') || wants('w5') || wants('leader');
  const main = needMain ? track(nodeAgent('agent-main', config)) : undefined;
  const mainAddon = opts.addon && ['w1', 'w5', 'close'].some(wants) ? track(nodeAgent('agent-main-addon', withClient(config, 'addon'))) : undefined;
  const procs = needProcs ? [0, 1, 2, 3].map((i) => track(nodeAgent(`agent-proc-${i}`, config))) : [];
  const curatorMain = curatorArgs && (wants('w1') || wants('w2')) ? track(javaAgent('curator-main', curatorArgs(zk))) : undefined;
  const curatorProcs = curatorArgs && needProcs ? [0, 1, 2, 3].map((i) => track(javaAgent(`curator-proc-${i}`, curatorArgs(zk)))) : [];
  const ready = await Promise.all(agents.map((a) => a.ready));
  console.log(`agents ready: ${agents.map((a, i) => (ready[i]?.client ? `${a.name} (${ready[i].client})` : a.name)).join(', ')}\n`);
  for (const [agent, client] of /** @type {[Agent | undefined, string][]} */ ([[main, 'typescript'], [mainAddon, 'addon']])) {
    const said = agent && ready[agents.indexOf(agent)]?.client;
    if (agent && said !== client) throw new Error(`${agent.name} runs the ${said} client, not ${client}`);
  }
  return { main, mainAddon, procs, curatorMain, curatorProcs };
}

/**
 * W1-W3, alternating round by round, and the negative control of the counter check.
 * @param {BenchContext} ctx
 * @param {Awaited<ReturnType<typeof startAgents>>} agents
 */
export async function runAlternatingRounds(ctx, { main, mainAddon, procs: w3, curatorMain, curatorProcs: curatorW3 }) {
  const { redis, results } = ctx;
  // W1 and W2 are wanted only with the main agent started (startAgents).
  const mainAgent = /** @type {Agent} */ (main);
  // ---- W1, W2, W3: alternating rounds -------------------------------------------------
  /** @type {Array<{ workload: string, peer: string, agents: Agent[], workers: number, client?: 'addon' }>} */
  const plan = [];
  // `auth`: our W1 with digest auth (and the module's ACL for it) next to our W1 without.
  const w1Peers = wants('w1') ? ['raw', 'exists', 'ours', 'ours-traced', 'ours-bg', 'ours-retain', 'ours-fifo', 'herd'] : wants('auth') ? ['ours'] : [];
  if (wants('auth')) w1Peers.splice(w1Peers.indexOf('ours') + 1, 0, 'ours-auth');
  for (const peer of w1Peers) {
    plan.push({ workload: 'W1', peer, agents: [mainAgent], workers: 1 });
    // The same through the addon where the clients' comparison matters (issues #30, #36): the raw
    // peers (serial create+delete, an exists round trip), and the library's uncontended cycle with
    // and without releaseInBackground, each against the raw peers of its own client.
    if (mainAddon && wants('w1') && ['raw', 'exists', 'ours', 'ours-bg'].includes(peer)) plan.push({ workload: 'W1', peer, agents: [mainAddon], workers: 1, client: 'addon' });
  }
  if (wants('w1')) {
    if (curatorMain) plan.push({ workload: 'W1', peer: 'curator', agents: [curatorMain], workers: 1 });
    if (redis) plan.push({ workload: 'W1', peer: 'redis', agents: [mainAgent], workers: 1 });
  }
  if (wants('w2')) {
    for (const peer of ['ours', 'ours-traced', 'ours-fifo', 'herd']) plan.push({ workload: 'W2', peer, agents: [mainAgent], workers: 8 });
    if (curatorMain) plan.push({ workload: 'W2', peer: 'curator', agents: [curatorMain], workers: 8 });
    if (redis) plan.push({ workload: 'W2', peer: 'redis', agents: [mainAgent], workers: 8 });
  }
  if (wants('w3')) {
    for (const peer of ['ours', 'ours-fifo', 'herd']) plan.push({ workload: 'W3', peer, agents: w3, workers: 4 });
    if (curatorW3.length) plan.push({ workload: 'W3', peer: 'curator', agents: curatorW3, workers: 4 });
    if (redis) plan.push({ workload: 'W3', peer: 'redis', agents: w3, workers: 4 });
  }
  if (wants('w5')) {
    // Many keys: 16 callers over 10 000 lock paths, in one process and in four; the peer is raw
    // create+delete with 64 requests outstanding (64 serial workers on one session).
    plan.push({ workload: 'W5', peer: 'ours-keys', agents: [mainAgent], workers: 16 });
    plan.push({ workload: 'W5x4', peer: 'ours-keys', agents: w3, workers: 16 });
    plan.push({ workload: 'W5', peer: 'raw', agents: [mainAgent], workers: 64 });
    if (mainAddon) plan.push({ workload: 'W5', peer: 'raw', agents: [mainAddon], workers: 64, client: 'addon' });
    // Context, not the goal's peer: the three requests of this lock layout without the library.
    plan.push({ workload: 'W5', peer: 'raw-keys', agents: [mainAgent], workers: 16 });
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
    process.stdout.write(`W1-W5:`);
    // Rounds run workload by workload, the peers of one workload alternating round by round: a
    // workload runs continuously, as in a service. Interleaved with the others, W5's rounds were a
    // minute apart, its 10 000 key paths were reaped between them (ZooKeeper's reaper, every 60 s)
    // and its every acquisition was a key's first use (that case is the warm-up's cold pass).
    /** @type {Map<string, typeof plan>} */
    const groups = new Map();
    for (const p of plan) {
      const workload = p.workload.replace(/x4$/, '');
      groups.set(workload, [...(groups.get(workload) ?? []), p]);
    }
    for (const [workload, group] of groups) {
      process.stdout.write(` ${workload}: warm-up`);
      await warmUpKeys(group, results);
      for (const p of group) await timed(ctx, { ...p, ms: p.peer === 'curator' ? opts.jvmWarmupMs : opts.warmupMs });
      for (let r = 0; r < opts.rounds; r++) {
        process.stdout.write(` · ${r + 1}`);
        const order = r % 2 === 0 ? group : [...group].reverse();
        for (const p of order) {
          const key = runKey(p);
          (timedRounds[key] ??= []).push(await timed(ctx, { ...p, ms: opts.roundMs }));
        }
      }
    }
    process.stdout.write('\n');
  }
  const W = Object.fromEntries(Object.entries(timedRounds).map(([k, v]) => [k, aggregate(v)]));
  results.timed = W;
  results.timedRounds = Object.fromEntries(Object.entries(timedRounds).map(([k, v]) => [k, v.map(({ lat, ...rest }) => rest)]));
}

/**
 * W5: each process uses every key twice before the rounds (the raw peer's path is made before
 * its rounds too): the first pass makes the paths (the cold pass), the second is a key's first
 * return (its path watch set); both are reported on their own. Four processes first: the one
 * process's keys are then used last before the rounds.
 * @param {Array<{ workload: string, peer: string, agents: Agent[], workers: number }>} group
 * @param {Record<string, any>} results
 */
async function warmUpKeys(group, results) {
  for (const p of group.filter((p) => p.peer === 'ours-keys').reverse()) {
    const path = `${BASE}/${p.workload}-${p.peer}`;
    const warm = await Promise.all(p.agents.map((a) => a.request({ cmd: 'warmKeys', path, workers: p.workers })));
    const pass = (i) => {
      const keys = warm.reduce((n, w) => n + w.passes[i].keys, 0);
      const ms = Math.max(...warm.map((w) => w.passes[i].ms));
      return { acquisitions: keys, ms, perSec: (keys * 1000) / ms, clientCpuUsPerOp: (warm.reduce((n, w) => n + w.passes[i].cpuMs, 0) * 1000) / keys };
    };
    const [cold, second] = [pass(0), pass(1)];
    (results.keysWarmup ??= {})[p.workload] = { ...cold, second };
    process.stdout.write(` (${p.workload}: every key twice, ${cold.acquisitions} each pass in ${(cold.ms / 1000).toFixed(1)} + ${(second.ms / 1000).toFixed(1)} s)`);
  }
}

/**
 * W4: queue handoff, one session per waiter.
 * @param {BenchContext} ctx
 * @param {Agent | undefined} main
 */
export async function runQueue({ results }, main) {
  // ---- W4: queue handoff --------------------------------------------------------------
  const queue = {};
  if (wants('w4')) {
    process.stdout.write('W4 (queue, one session per waiter):');
    for (let r = 0; r < opts.queueRounds; r++) {
      for (const L of opts.queueLengths) {
        const peers = (r + L) % 2 === 0 ? ['ours', 'herd'] : ['herd', 'ours'];
        for (const peer of peers) {
          process.stdout.write(` ${peer}×${L}`);
          const res = await /** @type {Agent} */ (main).request({
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
    const floor = await /** @type {Agent} */ (main).request({ cmd: 'notifyFloor', samples: opts.queueReleases, path: `${BASE}/W4-floor`, idleMs: opts.holdMs });
    results.notifyFloor = {
      p50: percentile(floor.times, 50),
      p99: percentile(floor.times, 99),
      existsP50: percentile(floor.exists, 50),
      idleMs: opts.holdMs,
      samples: floor.times.length,
    };
    await /** @type {Agent} */ (main).request({ cmd: 'closePool' });
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
}

/**
 * The semaphore and the read-write lock, alternating round by round.
 * @param {BenchContext} ctx
 * @param {Agent | undefined} main
 */
export async function runRecipes({ results }, main) {
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
          const res = await /** @type {Agent} */ (main).request({ cmd: 'semaphore', permits: 4, workers: 16, holdMs: opts.recipeHoldMs, path: `${BASE}/sem`, t0, t1 });
          const ok = res.maxInside <= 4 && res.released === res.acquired && res.errors.length === 0;
          if (!ok) fail(`semaphore: max ${res.maxInside} holders for 4 permits ${res.errors.slice(0, 2).join(' | ')}`);
          semRounds.push({ opsPerSec: (res.inWindow * 1000) / opts.roundMs, lat: res.lat, maxInside: res.maxInside, ok, cpuUsPerOp: (res.cpuMs * 1000) / res.acquired });
        } else {
          const res = await /** @type {Agent} */ (main).request({ cmd: 'rw', workers: 16, readShare: 0.9, holdMs: opts.recipeHoldMs, path: `${BASE}/rw`, t0, t1 });
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
}

/**
 * Scale: many distinct locks held at once, many waiters on one lock.
 * @param {BenchContext} ctx
 */
export async function runScale({ zk, zkPid, config, agents, track, results }) {
  // ---- Scale ---------------------------------------------------------------------------
  if (!wants('scale')) return;
  results.scale = {};
  for (const client of CLIENTS) {
    process.stdout.write(`scale (${client} client): `);
    const agent = track(nodeAgent(`agent-scale-${client}`, withClient(config, client)));
    await agent.ready;
    const base = `${BASE}/scale-${client}`;
    process.stdout.write(`${opts.scaleLocks} locks… `);
    const serverSide = async (work) => {
      const z0 = await mntr(zk);
      const c0 = processCpuMs(zkPid);
      const res = await work();
      const c1 = processCpuMs(zkPid);
      const z1 = await mntr(zk);
      return { ...res, zkRequests: z1.zk_packets_received - z0.zk_packets_received, zkNotifications: notificationsIn(z0, z1), zkCpuMs: c0 === undefined || c1 === undefined ? undefined : c1 - c0 };
    };
    const raw = await serverSide(() => agent.request({ cmd: 'scaleRaw', count: opts.scaleLocks, base: `${base}/raw` }));
    const locks = await serverSide(() => agent.request({ cmd: 'scaleLocks', count: opts.scaleLocks, base: `${base}/locks` }));
    const locksOk = locks.held === locks.count && locks.counter === locks.count && locks.distinctPaths === locks.count;
    if (!locksOk) fail(`scale (${client}): ${locks.held} of ${locks.count} locks held at once, counter ${locks.counter}`);
    process.stdout.write(`${opts.scaleWaiters} waiters… `);
    const waiters = await serverSide(() => agent.request({ cmd: 'scaleWaiters', count: opts.scaleWaiters, path: `${base}/waiters` }));
    const waitersOk = waiters.counter === waiters.count && waiters.acquired === waiters.count && waiters.errors.length === 0;
    if (!waitersOk) fail(`${opts.scaleWaiters} waiters (${client}): counter ${waiters.counter} ≠ ${waiters.count} ${waiters.errors.slice(0, 2).join(' | ')}`);
    await agent.close();
    agents.splice(agents.indexOf(agent), 1);
    results.scale[client] = { raw, locks: { ...locks, check: locksOk ? 'ok' : 'FAILED' }, waiters: { ...waiters, check: waitersOk ? 'ok' : 'FAILED' } };
    process.stdout.write('done\n');
  }
}

/**
 * Closing a lost session on a silent link, through each client (see closeBlock in agent.mjs): how
 * long the close held the event loop.
 * @param {BenchContext} ctx
 * @param {{ main?: Agent, mainAddon?: Agent }} agents
 */
export async function runCloseBlock({ results }, { main, mainAddon }) {
  if (!wants('close')) return;
  results.closeBlock = {};
  for (const [client, agent] of /** @type {[string, Agent | undefined][]} */ ([['typescript', main], ['addon', mainAddon]])) {
    if (!agent) continue;
    process.stdout.write(`close of a lost session on a silent link (${client} client, ${opts.closeSamples}×)… `);
    const { runs } = await agent.request({ cmd: 'closeBlock', samples: opts.closeSamples, sessionTimeoutMs: opts.closeSessionTimeoutMs, path: `${BASE}/close-${client}` });
    const closeMs = runs.map((r) => r.closeMs).filter((x) => x !== undefined);
    if (closeMs.length < runs.length) fail(`close block (${client}): the lost session's handle was not closed within 2 s of the loss in ${runs.length - closeMs.length} of ${runs.length}`);
    if (runs.some((r) => !r.leaseAborted)) fail(`close block (${client}): a lease's signal did not abort when its session was lost`);
    results.closeBlock[client] = {
      runs,
      closeMs: closeMs.length ? median(closeMs) : undefined,
      closeMsMax: closeMs.length ? Math.max(...closeMs) : undefined,
      maxStallMs: median(runs.map((r) => r.maxStallMs)),
      baselineStallMs: median(runs.map((r) => r.baselineStallMs)),
      lostAfterMs: median(runs.map((r) => r.lostAfterMs)),
      sessionTimeoutMs: opts.closeSessionTimeoutMs,
    };
    process.stdout.write('done\n');
  }
}

/**
 * Churn: a mix of acquires, tries, timeouts and leases; heap after GC before and after.
 * @param {BenchContext} ctx
 */
export async function runChurn({ config, agents, track, results }) {
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
}

/**
 * Profiles (opt-in): the V8 sampling profiler over one measured window per workload.
 * @param {BenchContext} ctx
 */
export async function runProfiles(ctx) {
  const { config, agents, track, results } = ctx;
  // ---- Profiles (opt-in): V8 sampling profiler over one measured window per workload ------
  if (opts.profile && ['w1', 'w2'].some(wants)) {
    results.profiles = {};
    const dir = join(BENCH_DIR, 'results', `profiles-${stamp()}`);
    mkdirSync(dir, { recursive: true });
    /** @type {Map<string, Agent>} */
    const byClient = new Map();
    for (const client of CLIENTS) byClient.set(client, track(nodeAgent(`agent-prof-${client}`, withClient(config, client))));
    await Promise.all([...byClient.values()].map((a) => a.ready));
    const withAddon = (/** @type {[string, string, number][]} */ list) =>
      list.flatMap(([name, peer, workers]) => [[name, peer, workers, 'typescript'], ...(opts.addon ? [[`${name}-addon`, peer, workers, 'addon']] : [])]);
    for (const [name, peer, workers, client] of /** @type {[string, string, number, string][]} */ ([
      ...withAddon([
        ['raw', 'raw', 1],
        ['W1-ours', 'ours', 1],
        ['W1-bg', 'ours-bg', 1],
      ]),
      ['W1-fifo', 'ours-fifo', 1, 'typescript'],
      ['W2-ours', 'ours', 8, 'typescript'],
      ['W2-herd', 'herd', 8, 'typescript'],
    ])) {
      const agent = /** @type {Agent} */ (byClient.get(client));
      process.stdout.write(`profile ${name}… `);
      const file = join(dir, `${name}.cpuprofile`);
      await timed(ctx, { workload: `prof-${name}`, peer, agents: [agent], workers, ms: 500 }); // warm-up
      const r = await timed(ctx, { workload: `prof-${name}`, peer, agents: [agent], workers, ms: opts.profileSeconds * 1000, profile: file });
      const summary = summarizeCpuProfile(file);
      results.profiles[name] = { opsPerSec: r.opsPerSec, acquired: r.acquired, clientCpuUsPerOp: r.clientCpuUsPerOp, serverCpuUsPerOp: r.serverCpuUsPerOp, ...summary, file };
    }
    for (const agent of byClient.values()) {
      await agent.close();
      agents.splice(agents.indexOf(agent), 1);
    }
    process.stdout.write('\n');
  }
}
