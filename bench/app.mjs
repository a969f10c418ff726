// `app`: the cost a service pays per locked request. The sample app (sample-app/, the ticket sale of
// `npm run demo`) runs as two sets of 3 instances on this run's ZooKeeper, one with @WithLock and
// one with LOCKS=off, each on its own SQLite file with EVENTS events (seats enough for the whole
// run). 200 concurrent buyers (this process, node:http with keep-alive, round-robin over a set's
// instances, a uniformly random event each) purchase one seat per request; the sets take turns,
// round by round (the idle set only runs its per-second jobs). Per round: answers by status,
// requests/s, the instances' own CPU time (/proc, the three summed) per request, ZooKeeper's CPU
// and packets per request, and this process's CPU per request (the buyers share the 2 cores).
// "CPU per lock cycle" is the instances' CPU per request with locks minus without.
// --profile adds a V8 CPU profile of one instance of each set under the same load
// (bench/app-profiler.mjs, preloaded with --import; started and stopped by SIGWINCH).
// The sample app and its startup are sample-app/scenario.mjs's (shared with the demo and chaos --load).
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { build, getJson, http, startInstances, stopInstances } from '../sample-app/scenario.mjs';
import { BASE, fail, opts, stamp, wants } from './options.mjs';
import { BENCH_DIR, median, mntr, percentile, processCpuMs, sleep, summarizeCpuProfile } from './support.mjs';

const INSTANCES = 3;
const BUYERS = 200;
const EVENTS = 1000;
const MODES = /** @type {const} */ (['locks', 'off']);
const PROFILER = join(BENCH_DIR, 'app-profiler.mjs');

/** @typedef {import('../sample-app/scenario.mjs').Instance} Instance */
/** @typedef {(typeof MODES)[number]} Mode */
/**
 * One measured window of one set.
 * @typedef {object} AppRound
 * @property {number} requests answers completed in the window
 * @property {number} reqPerSec
 * @property {Record<string, number>} byStatus
 * @property {number[]} lat milliseconds, per answer
 * @property {number} instanceCpuUs CPU of the set's instances (summed) per request
 * @property {number[]} instanceCpuMs per instance, in the window
 * @property {number | undefined} zkCpuUs
 * @property {number} zkRequests ZooKeeper packets received per request
 * @property {number} loadCpuUs this process's CPU (the buyers) per request
 * @property {number} sales201 every 201 answer of this load (settling and draining included)
 * @property {string[]} samples a few answers other than 201 and 409
 */

/**
 * Buyers on one set: `BUYERS` loops until stop(); `answers` collects [endedAt, status, latencyMs, instance index].
 * @param {Instance[]} instances
 * @param {number[]} eventIds
 */
function startBuyers(instances, eventIds) {
  /** @type {[number, number | string, number, number][]} */
  const answers = [];
  /** A few answers other than 201 and 409, with their bodies. @type {string[]} */
  const samples = [];
  let stopping = false;
  let next = 0;
  const buyer = async () => {
    while (!stopping) {
      const k = next++ % instances.length;
      const id = eventIds[Math.floor(Math.random() * eventIds.length)];
      const t0 = performance.now();
      let status;
      try {
        const answer = await http('POST', `${instances[k].url}/events/${id}/purchase`, { quantity: 1, buyer: `b${next}` }, 30_000);
        status = answer.status;
        if (status !== 201 && status !== 409 && samples.length < 3) samples.push(`${status} ${JSON.stringify(answer.body)}`);
      } catch (error) {
        status = error.code ?? 'error';
        if (samples.length < 3) samples.push(String(error.message));
        await sleep(50);
      }
      const t1 = performance.now();
      answers.push([t1, status, t1 - t0, k]);
    }
  };
  const loops = Array.from({ length: BUYERS }, buyer);
  return {
    answers,
    samples,
    stop: async () => {
      stopping = true;
      await Promise.all(loops);
    },
  };
}

/**
 * Load on one set: `settleMs` of load, then a `ms` window measured, then the buyers drain.
 * `during(t0)` runs right after the window opened (the profiler's start), `atEnd` as it closes.
 * @param {{ zk: string, zkPid?: number[] }} ctx
 * @param {Instance[]} instances
 * @param {number[]} eventIds
 * @param {{ ms: number, settleMs: number, atStart?: () => void, atEnd?: () => void }} options
 * @returns {Promise<AppRound>}
 */
async function measure(ctx, instances, eventIds, { ms, settleMs, atStart, atEnd }) {
  const buyers = startBuyers(instances, eventIds);
  await sleep(settleMs);
  const snap = async () => ({
    at: performance.now(),
    cpu: instances.map((i) => processCpuMs(i.pid) ?? NaN),
    zkCpu: processCpuMs(ctx.zkPid),
    load: process.cpuUsage(),
    mntr: await mntr(ctx.zk),
    answered: buyers.answers.length,
  });
  const s0 = await snap();
  atStart?.();
  await sleep(ms);
  atEnd?.();
  const s1 = await snap();
  await buyers.stop();
  const window = buyers.answers.slice(s0.answered, s1.answered);
  const requests = Math.max(1, window.length);
  /** @type {Record<string, number>} */
  const byStatus = {};
  for (const [, status] of window) byStatus[status] = (byStatus[status] ?? 0) + 1;
  const instanceCpuMs = s1.cpu.map((c, i) => c - s0.cpu[i]);
  const loadCpu = process.cpuUsage(s0.load);
  return {
    requests: window.length,
    reqPerSec: (window.length * 1000) / (s1.at - s0.at),
    byStatus,
    lat: window.map(([, , ms]) => ms),
    instanceCpuMs,
    instanceCpuUs: (instanceCpuMs.reduce((a, b) => a + b, 0) * 1000) / requests,
    zkCpuUs: s0.zkCpu === undefined || s1.zkCpu === undefined ? undefined : ((s1.zkCpu - s0.zkCpu) * 1000) / requests,
    zkRequests: (s1.mntr.zk_packets_received - s0.mntr.zk_packets_received) / requests,
    loadCpuUs: (loadCpu.user + loadCpu.system) / requests,
    sales201: buyers.answers.filter(([, status]) => status === 201).length,
    samples: buyers.samples,
  };
}

/** Creates `count` events (16 requests at a time) with seats enough for any run; resolves with their ids. */
async function createEvents(instance, count) {
  const ids = [];
  let made = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (made < count) {
        const n = ++made;
        const answer = await http('POST', `${instance.url}/events`, { name: `bench event ${n}`, seats: 1_000_000 });
        if (answer.status !== 201) throw new Error(`creating an event: ${answer.status} ${JSON.stringify(answer.body)}`);
        ids.push(answer.body.id);
      }
    }),
  );
  return ids;
}

/**
 * One purchase of every event on every instance (64 at a time): each instance then knows every
 * lock path exists, as in a service that has run for a while. Without it, the first use of a key
 * by an instance also sends a container create for its path (NODEEXISTS), and with 1 000 keys
 * over 3 instances that lasted through a minute of rounds.
 * @param {Instance[]} instances
 * @param {number[]} eventIds
 */
async function touchEveryKey(instances, eventIds) {
  const work = instances.flatMap((instance) => eventIds.map((id) => ({ instance, id })));
  let next = 0;
  let sales = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < work.length) {
        const { instance, id } = work[next++];
        const answer = await http('POST', `${instance.url}/events/${id}/purchase`, { quantity: 1, buyer: 'warm-up' }, 30_000);
        if (answer.status === 201) sales++;
      }
    }),
  );
  return sales;
}

/**
 * @param {import('./workloads.mjs').BenchContext} ctx
 */
export async function runApp(ctx) {
  if (!wants('app')) return;
  const { results } = ctx;
  const roundMs = opts.quick ? 2000 : 4000;
  const rounds = opts.quick ? 3 : Math.max(4, opts.rounds);
  const settleMs = 700;
  process.stdout.write(`app: sample app, ${INSTANCES} instances per set, ${BUYERS} buyers, ${EVENTS} events; building it… `);
  build({ library: false });
  const work = mkdtempSync(join(tmpdir(), 'zk-lock-bench-app-'));
  const profileDir = join(BENCH_DIR, 'results', `profiles-${stamp()}`);
  if (opts.profile) mkdirSync(profileDir, { recursive: true });
  /** @type {Record<Mode, Instance[]>} */
  const sets = /** @type {any} */ ({});
  /** @type {Record<Mode, number[]>} */
  const events = /** @type {any} */ ({});
  try {
    for (const mode of MODES) {
      sets[mode] = await startInstances({
        count: INSTANCES,
        zkConnect: ctx.zk,
        databaseFile: join(work, `${mode}.db`),
        logDir: join(work, mode),
        locks: mode === 'locks',
        basePath: `${BASE}/app`,
        nodeArgs: opts.profile ? ['--import', PROFILER] : [],
        env: opts.profile ? { APP_CPU_PROFILE: join(profileDir, `app-${mode}.cpuprofile`) } : {},
      });
      events[mode] = await createEvents(sets[mode][0], EVENTS);
    }
    process.stdout.write(`up (logs in ${work}); warm-up`);
    /** @type {Record<Mode, number>} */
    const sales = { locks: 0, off: 0 };
    // Long enough for the JITs: ZooKeeper's JVM and the instances' V8 compile the locked path for
    // seconds (a 1.5 s warm-up left ZooKeeper at 5 ms of CPU per request, most of it compiling).
    const warmupMs = opts.quick ? 3000 : 10_000;
    for (const mode of MODES) {
      sales[mode] += await touchEveryKey(sets[mode], events[mode]);
      sales[mode] += (await measure(ctx, sets[mode], events[mode], { ms: warmupMs, settleMs })).sales201;
    }
    /** @type {Record<Mode, AppRound[]>} */
    const perMode = { locks: [], off: [] };
    for (let r = 0; r < rounds; r++) {
      process.stdout.write(` · round ${r + 1}/${rounds}`);
      for (const mode of r % 2 === 0 ? MODES : [...MODES].reverse()) {
        const round = await measure(ctx, sets[mode], events[mode], { ms: roundMs, settleMs });
        sales[mode] += round.sales201;
        perMode[mode].push(round);
      }
    }
    process.stdout.write('\n');

    /** @type {Record<string, any>} */
    const out = { instances: INSTANCES, buyers: BUYERS, events: EVENTS, roundMs, rounds };
    for (const mode of MODES) {
      const rs = perMode[mode];
      const med = (/** @type {(r: AppRound) => number | undefined} */ f) => {
        const xs = rs.map(f).filter((x) => x !== undefined && Number.isFinite(x));
        return xs.length ? median(/** @type {number[]} */ (xs)) : undefined;
      };
      /** @type {Record<string, number>} */
      const byStatus = {};
      for (const r of rs) for (const [s, n] of Object.entries(r.byStatus)) byStatus[s] = (byStatus[s] ?? 0) + n;
      const lat = rs.flatMap((r) => r.lat);
      out[mode] = {
        otherAnswers: rs.flatMap((r) => r.samples).slice(0, 5),
        reqPerSec: med((r) => r.reqPerSec),
        rounds: rs.map((r) => Math.round(r.reqPerSec)),
        byStatus,
        p50: percentile(lat, 50),
        p99: percentile(lat, 99),
        instanceCpuUs: med((r) => r.instanceCpuUs),
        instanceCpuUsRounds: rs.map((r) => Math.round(r.instanceCpuUs)),
        zkCpuUs: med((r) => r.zkCpuUs),
        zkRequests: med((r) => r.zkRequests),
        loadCpuUs: med((r) => r.loadCpuUs),
      };
    }
    for (const mode of MODES) {
      const list = /** @type {{ sold: number }[]} */ (await getJson(`${sets[mode][0].url}/events`));
      const sold = list.reduce((n, e) => n + e.sold, 0);
      // Every 201 is a seat the database counts (a fenced write with locks; an atomic increment without).
      out[mode].sold = sold;
      out[mode].check = sold === sales[mode] ? 'ok' : `FAILED: ${sales[mode]} answered 201, ${sold} sold`;
      if (sold !== sales[mode]) fail(`app ${mode}: ${out[mode].check}`);
      if (out[mode].byStatus.other || Object.keys(out[mode].byStatus).some((s) => !['201', '409'].includes(s))) {
        console.log(`app ${mode}: answers other than 201 and 409, e.g. ${out[mode].otherAnswers.join(' | ')}`);
      }
    }
    results.app = out;

    if (opts.profile) {
      out.profiles = {};
      for (const mode of MODES) {
        process.stdout.write(`app: profiling instance-1 (${mode})… `);
        const target = sets[mode][0];
        const file = join(profileDir, `app-${mode}.cpuprofile`);
        rmSync(file, { force: true });
        const round = await measure(ctx, sets[mode], events[mode], {
          ms: opts.profileSeconds * 1000,
          settleMs: 1000,
          atStart: () => process.kill(target.pid, 'SIGWINCH'),
          atEnd: () => process.kill(target.pid, 'SIGWINCH'),
        });
        for (let waited = 0; !existsSync(file) && waited < 30_000; waited += 100) await sleep(100);
        if (!existsSync(file)) {
          fail(`app: no profile from ${target.name} (${file})`);
          continue;
        }
        out.profiles[mode] = {
          file,
          requests: Math.round(round.requests / INSTANCES), // round-robin: each instance got a third
          reqPerSec: round.reqPerSec,
          cpuMs: round.instanceCpuMs[0],
          ...summarizeCpuProfile(file, 25, { inclusiveOf: (url) => url.includes('/dist/') || url.includes('node_modules/') }),
        };
      }
      process.stdout.write('\n');
    }
  } finally {
    await stopInstances(MODES.flatMap((m) => sets[m] ?? []));
  }
}
