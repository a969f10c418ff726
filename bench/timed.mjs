// One timed round of a peer on its agents (child processes: bench/agent.mjs for Node,
// CuratorBench.java for Curator), and the rounds' aggregate.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BASE, fail } from './options.mjs';
import { Agent, BENCH_DIR, JAVA, median, mntr, notificationsIn, percentile, processCpuMs } from './support.mjs';

const AGENT = join(BENCH_DIR, 'agent.mjs');

/**
 * @typedef {object} TimedRun
 * @property {string} workload
 * @property {string} peer
 * @property {Agent[]} agents
 * @property {number} workers
 * @property {number} ms
 * @property {string} [profile] a .cpuprofile to write
 * @property {'addon'} [client] the agents' ZooKeeper client when not the default (their paths apart)
 */

/**
 * A peer's key in the results: `W1/raw`, and `W1/raw@addon` through the addon.
 * @param {{ workload: string, peer: string, client?: string }} run
 */
export function runKey({ workload, peer, client }) {
  return `${workload}/${peer}${client ? `@${client}` : ''}`;
}

export function nodeAgent(name, config, extraNodeArgs = []) {
  return new Agent(name, process.execPath, ['--expose-gc', ...extraNodeArgs, AGENT, JSON.stringify({ ...config, name })]);
}

export function javaAgent(name, javaArgs) {
  const agent = new Agent(name, JAVA, javaArgs);
  agent.quitLine = 'quit\n';
  return agent;
}

// ---------------------------------------------------------------------------------------------
// One timed round of a peer

export const ZK_PEERS = new Set(['ours', 'ours-traced', 'ours-fifo', 'ours-bg', 'ours-retain', 'ours-auth', 'ours-keys', 'herd', 'raw', 'raw-keys', 'exists', 'curator']);

/** Slots of a shared counter file: one per W5 key (8 bytes each). */
const COUNTER_SLOTS = 10_000;

export function counterFile() {
  const file = `/dev/shm/nestjs-zk-lock-bench.${process.pid}.counter`;
  writeFileSync(file, Buffer.alloc(8 * COUNTER_SLOTS));
  return file;
}

/** The sum of every slot. */
export function readCounterFile(file) {
  const all = readFileSync(file);
  let sum = 0;
  for (let i = 0; i < all.length; i += 8) sum += Number(all.readBigInt64LE(i));
  return sum;
}

/**
 * Runs `peer` on `agents` (one worker group per agent) for `ms` starting together, collects
 * throughput, latencies, the counter check and CPU/requests per acquisition.
 */
/**
 * @param {{ zk: string, zkPid?: number[], redis?: { pid?: number } }} ctx
 * @param {TimedRun} run
 */
export async function timed(ctx, { workload, peer, agents, workers, ms, profile, client }) {
  const shared = agents.length > 1;
  const file = shared ? counterFile() : undefined;
  const counter = file ?? 'mem';
  const path = `${BASE}/${workload}-${peer}${client ? `-${client}` : ''}`;
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
  const isLock = peer !== 'raw' && peer !== 'raw-keys' && peer !== 'exists';
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
    zkRequestsPerOp: zkBefore && zkAfter ? (zkAfter.zk_packets_received - zkBefore.zk_packets_received) / Math.max(1, acquired) : undefined,
    notificationsPerOp: zkBefore && zkAfter ? notificationsIn(zkBefore, zkAfter) / Math.max(1, acquired) : undefined,
  };
}

// ---------------------------------------------------------------------------------------------
// Aggregation and formatting

export function aggregate(rounds) {
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
