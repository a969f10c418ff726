#!/usr/bin/env node
// Chaos under load: ZooKeeper faults against the sample app while buyers keep purchasing.
//
//   npm run chaos -- --load [--rounds N] [--faults leader,follower,pause] [--concurrency 200]
//                           [--instances 3] [--json FILE] [--verbose]
//
// Starts a 3-node ensemble and the sample app's instances on it (each with its own connection),
// creates one event per fault with enough seats for the whole fault, and keeps `concurrency` buyers
// purchasing (round-robin over the instances, the sample's lock wait bound LOCK_WAIT_MS=3000).
// Then, --rounds times, each fault in turn, with 5 s of steady load before it:
// - leader:   kill -9 of the ensemble leader, restarted 3 s later;
// - follower: kill -9 of the follower with the most client connections, restarted 3 s later;
// - pause:    SIGSTOP of one instance for 2 s more than its session timeout (15 s), then SIGCONT.
// Per fault it prints: the stall (the longest time without a sale, from the last sale before the
// fault), the time until sales run at half the rate of the 5 s before the fault again, the answers
// by status from the fault to 10 s after it ended (SIGCONT for a pause), those answered in the fault's first second (waits
// started before it included), process exits, and the event's oversold seats and lost
// updates (201 answers that the database does not count; sales whose answer the buyer never got, as
// when its request waited on a SIGSTOPped instance, are listed apart). Exit code 0 when no instance died and
// nothing was oversold or lost, 1 otherwise, 2 when the run itself failed.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { build, getJson, http, startInstances, stopInstances } from '../../sample-app/scenario.mjs';
import { newZkDir, startEnsemble, ZkEnsembleHandle } from '../support/zookeeper.mjs';

const SERVER_IDS = [1, 2, 3];

const { values: args } = parseArgs({
  options: {
    load: { type: 'boolean', default: true },
    rounds: { type: 'string', default: '1' },
    faults: { type: 'string', default: 'leader,follower,pause' },
    concurrency: { type: 'string', default: '200' },
    instances: { type: 'string', default: '3' },
    json: { type: 'string' },
    verbose: { type: 'boolean', default: false },
  },
});
const FAULTS = { leader: killLeader, follower: killFollower, pause: pauseInstance };
const faults = args.faults.split(',').map((f) => f.trim());
if (!faults.every((f) => f in FAULTS)) fail(`--faults expects a comma-separated list of ${Object.keys(FAULTS).join(', ')}`);
const rounds = Number(args.rounds);
const concurrency = Number(args.concurrency);
const SESSION_TIMEOUT_MS = 15_000; // the sample app's (the library's default)
const STEADY_MS = 5000;
const DOWN_MS = 3000;
const AFTER_MS = 10_000;

function fail(message) {
  process.stderr.write(`chaos --load: ${message}\n`);
  process.exit(2);
}
const T0 = Date.now();
const log = (message) => process.stderr.write(`[load +${((Date.now() - T0) / 1000).toFixed(1).padStart(6)}s] ${message}\n`);

// Made up front: the cleanup below stops it whatever point the run reached.
const ZK = new ZkEnsembleHandle(newZkDir('chaos'), { echoStderr: args.verbose });
const workDir = mkdtempSync(join(tmpdir(), 'zk-lock-chaos-load-'));
let instances = [];
/** Every purchase: [startedAt, endedAt, status, eventId]. */
const answers = [];
const exits = [];
let eventId;
let stopping = false;

async function buyer(index) {
  for (let n = 0; !stopping; n++) {
    const instance = instances[(index + n) % instances.length];
    const id = eventId;
    const startedAt = Date.now();
    let status;
    try {
      status = (await http('POST', `${instance.url}/events/${id}/purchase`, { quantity: 1, buyer: `b${index}-${n}` }, 20_000)).status;
    } catch (error) {
      status = error.code ?? 'error';
      await sleep(100); // a dead or stopped instance: do not spin
    }
    answers.push([startedAt, Date.now(), status, id]);
  }
}

async function newEvent(label) {
  eventId = (await http('POST', `${instances[0].url}/events`, { name: label, seats: 1_000_000 })).body.id;
  return eventId;
}

async function connectionsOf(id) {
  try {
    return Number(/^Connections: (\d+)$/m.exec(await ZK.fourLetter(id, 'srvr', 1000))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

async function killServer(id) {
  await ZK.stopServer(id, 'SIGKILL');
  const at = Date.now();
  await sleep(DOWN_MS);
  await ZK.restartServer(id);
  return at;
}
async function killLeader() {
  const leader = await ZK.waitForLeader([], 30_000);
  log(`kill -9 leader ${leader}`);
  return { at: await killServer(leader), detail: `server ${leader}` };
}
async function killFollower() {
  const leader = await ZK.waitForLeader([], 30_000);
  const followers = SERVER_IDS.filter((id) => id !== leader);
  const counts = await Promise.all(followers.map(connectionsOf));
  const victim = followers[counts.indexOf(Math.max(...counts))];
  log(`kill -9 follower ${victim} (${Math.max(...counts)} client connections)`);
  return { at: await killServer(victim), detail: `server ${victim}, ${Math.max(...counts)} connections` };
}
let pauses = 0;
async function pauseInstance() {
  const instance = instances[pauses++ % instances.length];
  log(`SIGSTOP ${instance.name} for ${SESSION_TIMEOUT_MS + 2000} ms`);
  const at = Date.now();
  process.kill(instance.pid, 'SIGSTOP');
  await sleep(SESSION_TIMEOUT_MS + 2000);
  process.kill(instance.pid, 'SIGCONT');
  return { at, endAt: Date.now(), detail: instance.name };
}

/** Sales (201) completed in [from, to). */
const salesIn = (from, to) => answers.filter(([, end, status]) => status === 201 && end >= from && end < to).length;

/** `at`: the fault; `endAt`: when it ended (SIGCONT), for faults that last. */
function measure(fault, { at, endAt = at, detail }, id) {
  const windowEnd = endAt + AFTER_MS;
  const baseline = salesIn(at - STEADY_MS, at) / (STEADY_MS / 1000); // sales per second
  const saleTimes = answers.filter(([, end, status]) => status === 201).map(([, end]) => end).sort((a, b) => a - b);
  const before = saleTimes.filter((t) => t < at).pop() ?? at;
  let stallMs = 0;
  let previous = before;
  for (const t of saleTimes.filter((t) => t >= at && t < windowEnd)) {
    stallMs = Math.max(stallMs, t - previous);
    previous = t;
  }
  let normalMs;
  for (let t = at; t + 1000 <= windowEnd; t += 100) {
    if (salesIn(t, t + 1000) >= baseline / 2) {
      normalMs = t - at;
      break;
    }
  }
  const byStatus = {};
  // The answers that came in the fault's first second, waits that started before it included (the
  // ones whose waitMs ran out during a leader election): what a buyer saw at the fault.
  const firstSecond = {};
  for (const [start, end, status, ofEvent] of answers) {
    if (ofEvent === id && start >= at && start < windowEnd) byStatus[status] = (byStatus[status] ?? 0) + 1;
    if (ofEvent === id && end >= at && end < at + 1000) firstSecond[status] = (firstSecond[status] ?? 0) + 1;
  }
  return { fault, detail, eventId: id, baselinePerS: Math.round(baseline), stallMs, normalMs, byStatus, firstSecond };
}

/** After the load stopped: each fault's event against the answers (201s the database does not count are lost updates). */
/**
 * A fault's figures: measure()'s, the process exits during it, and countSales()'s (set after the load stopped).
 * @typedef {ReturnType<typeof measure> & { exits: unknown[], sold: number, ok: number, lostUpdates: number, unanswered: number, oversold: number }} FaultResult
 */

/** @param {FaultResult} result */
async function countSales(result) {
  const event = await getJson(`${instances[0].url}/events/${result.eventId}`);
  const ok = answers.filter(([, , status, ofEvent]) => status === 201 && ofEvent === result.eventId).length;
  // More sold than answered 201 is not a fault of the lock: a buyer gave up waiting (its request
  // reached a SIGSTOPped instance) while the sale went through.
  Object.assign(result, { sold: event.sold, ok, lostUpdates: Math.max(0, ok - event.sold), unanswered: Math.max(0, event.sold - ok), oversold: event.oversold });
}

async function main() {
  log('building the sample app');
  build({ library: false });
  const { connectString } = await startEnsemble({ dir: ZK.dir, echoStderr: args.verbose });
  log(`ensemble ${connectString}`);
  instances = await startInstances({
    count: Number(args.instances),
    zkConnect: connectString,
    databaseFile: join(workDir, 'tickets.db'),
    logDir: workDir,
    lockWaitMs: 3000,
  });
  for (const instance of instances) instance.exited.then((code) => !stopping && exits.push({ name: instance.name, code, at: Date.now() }));
  log(`instances ${instances.map((i) => `${i.name}:${i.port}`).join(' ')}; logs in ${workDir}`);
  await newEvent('warm-up');
  const buyers = Array.from({ length: concurrency }, (_, i) => buyer(i));
  /** @type {FaultResult[]} */
  const results = [];
  for (let round = 0; round < rounds; round++) {
    for (const fault of faults) {
      const id = await newEvent(`${fault} ${round + 1}`);
      await sleep(STEADY_MS);
      const exitsBefore = exits.length;
      const injected = await FAULTS[fault]();
      await sleep(Math.max(0, (injected.endAt ?? injected.at) + AFTER_MS - Date.now()));
      const result = { ...measure(fault, injected, id), exits: exits.slice(exitsBefore) };
      results.push(/** @type {FaultResult} */ (result)); // countSales() fills in the rest
      log(`${fault} (${result.detail}): stall ${result.stallMs} ms, normal after ${result.normalMs ?? 'never'} ms, ` +
        `answers ${JSON.stringify(result.byStatus)} (in its first second ${JSON.stringify(result.firstSecond)}), exits ${result.exits.length}`);
      if (exits.length) break;
    }
    if (exits.length) break;
  }
  stopping = true;
  await Promise.all(buyers);
  for (const result of results) await countSales(result);
  return results;
}

function table(results) {
  const rows = [['fault', 'detail', 'sales/s before', 'stall ms', 'normal after ms', 'answers from the fault to its end + 10 s', 'answered in its first second', 'exits', 'oversold', 'lost updates', 'sold, answer lost']];
  const statuses = (counts) => Object.entries(counts).map(([s, n]) => `${s}: ${n}`).join(', ');
  for (const r of results) {
    rows.push([r.fault, r.detail, r.baselinePerS, r.stallMs, r.normalMs ?? 'never', statuses(r.byStatus), statuses(r.firstSecond), r.exits.map((e) => `${e.name} ${e.code}`).join(' ') || 0, r.oversold, r.lostUpdates, r.unanswered]);
  }
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => String(row[c]).length)));
  return rows.map((row) => row.map((cell, c) => String(cell).padEnd(widths[c])).join(' | ')).join('\n');
}

let code = 2;
try {
  const results = await main();
  console.log(table(results));
  for (const fault of faults) {
    const of = results.filter((r) => r.fault === fault);
    if (!of.length) continue;
    const stalls = of.map((r) => r.stallMs).sort((a, b) => a - b);
    const normals = of.map((r) => r.normalMs ?? Infinity).sort((a, b) => a - b);
    console.log(`${fault}: ${of.length}×, stall median ${stalls[stalls.length >> 1]} ms (max ${stalls.at(-1)}), normal after median ${normals[normals.length >> 1]} ms (max ${normals.at(-1)})`);
  }
  const bad = exits.length > 0 || results.some((r) => r.oversold > 0 || r.lostUpdates > 0);
  console.log(`process exits: ${exits.length}; oversold: ${results.reduce((n, r) => n + r.oversold, 0)}; lost updates: ${results.reduce((n, r) => n + r.lostUpdates, 0)}`);
  if (args.json) writeFileSync(args.json, JSON.stringify({ results, exits }, null, 2));
  code = bad ? 1 : 0;
} catch (error) {
  process.stderr.write(`chaos --load: ${error.stack ?? error}\n`);
} finally {
  stopping = true;
  await stopInstances(instances).catch(() => {});
  await ZK.stop().catch(() => {});
}
process.exit(code);
