#!/usr/bin/env node
// Chaos run: lock recipes under ZooKeeper faults, on a throw-away 3-node ensemble.
//
//   node scripts/chaos/run.mjs [--seconds N] [--short] [--processes N] [--json FILE] [--verbose]
//                              [--faults leader,follower,partition,silent-partition,notify-partition,pause,kill-holder,
//                                        kill-waiter,rolling-restart,foreign-set,try-once-outage,ensemble]
//
// Needs the built package (`npm run build`) and ZooKeeper (`bash scripts/zookeeper.sh install`).
//
// What it does:
// - starts a 3-node ensemble with scripts/zookeeper.sh (stopped again at the end, also if this
//   process dies: --owner-pid);
// - starts one loopback TCP proxy per (worker process, ensemble member), so a worker reaches
//   ZooKeeper only through its own three proxies and can be cut off alone;
// - forks worker processes (scripts/chaos/worker.mjs) that loop on a mutex, a semaphore
//   (permits 2) and a read-write lock. This process never holds a ZooKeeper connection (what it
//   observes must not depend on the library under test): it talks to ZooKeeper only with four-letter words, and the final check runs in a child process;
// - is the workers' data store, over the IPC channel: a fenced counter per lock. A read or write
//   carrying a token lower than one the store has seen is rejected and counted;
// - injects each fault at least once: kill -9 of the leader (restarted later), kill -9 of a
//   follower a client is connected to (restarted), a holder partitioned past its session timeout
//   with its connections closed and silently (nothing passes, nothing closes; its late write must
//   be rejected), SIGSTOP of a holder past the session timeout then SIGCONT,
//   the whole ensemble killed and restarted (with try-once traffic from every worker while it is
//   down), a worker SIGKILLed while holding and while waiting, the worker next in line silenced
//   right after the watch event that makes it the holder (the head's deletion) reached it, a
//   rolling restart (SIGTERM with a critical section longer than shutdownGraceMs and short ones
//   in flight: engine.shutdown(), close, exit 0, then a new worker), a foreign client's `set` on
//   every lock node (twice, while a holder is in a long critical section) then a delete of that
//   holder's node, try-once traffic while a worker is cut off and while it is silenced;
// - watches the ensemble all along (the observer: the leader's `dump` every 100 ms) to know when
//   each lock node disappeared;
// - stops the workers, waits for the dead sessions to expire, counts the lock nodes left behind
//   from a fresh client, stops the ensemble and prints the tables (exit code 1 if a check failed).
//
// --short: one pass over the faults with a 4 s session timeout (the Jest variant, about 90 s).
// Default: 150 s (--seconds), 6 s session timeout; faults repeat until the time is up (one full
// pass always runs). --json FILE writes the result; exit code 0 = every check passed, 1 = a check
// failed, 2 = the run itself failed.
//
// One clock: every process reports process.hrtime (CLOCK_MONOTONIC, shared by all processes of
// the machine); the proxies' timestamps are converted to it.
//
// Fault table: "fault → ..." times are measured from the fault: for server kills from the moment
// the killed server(s) are certainly gone, for holder faults from the cut / SIGSTOP / SIGKILL.
// "old session gone" is when the leader's `dump` no longer lists the victim session's ephemeral
// nodes (polled every 50 ms); "next holder after old session gone" compares the next holder's
// acquisition with the last poll that still listed them (sound, no false alarm). Overlaps: two
// holders whose own intervals [acquired, released-or-lost] overlap; those involving a holder that
// was lost, SIGKILLed or SIGSTOPped are expected (fencing is what protects the data then), any
// other is a failure.
// The promise itself ("while lease.signal has not aborted, nobody else holds the lock"), from each
// holder's own view (workers report when acquire() resolved, when the signal aborted, when they
// stopped using the lock): the time two holders of a lock overlapped while neither signal had
// aborted (semaphore: more than `permits` such holders at once) must be 0, excusing only holders
// SIGSTOPped through their hold and the holder whose node the foreign client deleted. And every
// lost signal is judged against the server's end of that hold (its node disappeared as the
// observer saw it, or another holder acquired): a signal after it is LATE (a failure). Try-once
// calls during outages must fail for want of a connection within 2 s (+ 250 ms for timers firing
// late; the worker's worst event-loop delay is reported alongside). Stale writes are judged by
// acquisition order, independently of the tokens.
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { TcpProxy } from '../support/tcp-proxy.mjs';
import { ensemble, fourLetter, REPO, SERVER_IDS } from './ensemble.mjs';

const WORKER = fileURLToPath(new URL('./worker.mjs', import.meta.url));

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string' },
    short: { type: 'boolean', default: false },
    processes: { type: 'string' },
    json: { type: 'string' },
    verbose: { type: 'boolean', default: false },
    faults: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  const lines = readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1);
  const header = lines.slice(0, lines.findIndex((l) => !l.startsWith('//')));
  process.stdout.write(`${header.map((l) => l.replace(/^\/\/ ?/, '')).join('\n')}\n`);
  process.exit(0);
}

const short = args.short;
const opts = {
  short,
  seconds: args.seconds !== undefined ? Number(args.seconds) : short ? 0 : 150,
  processes: Number(args.processes ?? 3),
  mutexWorkers: 4,
  semWorkers: 2,
  rwWorkers: 2,
  permits: 2,
  sessionTimeoutMs: short ? 4000 : 6000,
  waitMs: short ? 8000 : 10_000,
  holdMs: [5, 25],
  writeRatio: 0.3,
  /** How long killed servers stay down. */
  downMs: short ? 1500 : 4000,
  /** Quiet time between faults (after the system is healthy again). */
  gapMs: short ? 500 : 3000,
  /** How far past the session timeout a SIGSTOPped holder stays stopped. */
  pauseExtraMs: short ? 2000 : 4000,
  /** A SIGTERMed worker's holders get this long before their signals abort (engine.shutdown()). */
  shutdownGraceMs: 2000,
  /** How long a worker sends try-once acquires while cut off. */
  tryOnceBurstMs: short ? 2500 : 4000,
};
if (!Number.isFinite(opts.seconds) || opts.seconds < 0) fail('--seconds expects a number of seconds');
if (!Number.isInteger(opts.processes) || opts.processes < 3) fail('--processes expects an integer ≥ 3');
const FAULT_NAMES = [
  'leader', 'follower', 'partition', 'silent-partition', 'notify-partition', 'pause', 'kill-holder', 'kill-waiter',
  'rolling-restart', 'foreign-set', 'try-once-outage', 'ensemble',
];
if (args.faults !== undefined && !args.faults.split(',').every((f) => FAULT_NAMES.includes(f.trim()))) {
  fail(`--faults expects a comma-separated list of ${FAULT_NAMES.join(', ')}`);
}
const HARD_LIMIT_MS = (short ? 240 : opts.seconds + 360) * 1000;

function fail(message) {
  process.stderr.write(`chaos: ${message}\n`);
  process.exit(2);
}
if (!existsSync(join(REPO, 'dist', 'core', 'index.js'))) fail('dist/ is missing: run `npm run build` (or npx tsc -p tsconfig.build.json) first');

// ---------------------------------------------------------------------------------------------
// time and logging

const now = () => Number(process.hrtime.bigint()) / 1e6;
const T0 = now();
const rel = (t) => (t === undefined ? undefined : (t - T0) / 1000);
function log(message) {
  process.stderr.write(`[chaos +${((now() - T0) / 1000).toFixed(1).padStart(5)}s] ${message}\n`);
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper: the script and four-letter words only

const ZK = ensemble({ verbose: args.verbose });
const ZK_DIR = ZK.dir;
const zk = ZK.script;
const serverPort = ZK.port;
const { modeOf, leaders, waitForLeader } = ZK;

/** Session ids (bigint) that own ephemeral nodes, from the `dump` of server `id`. */
async function sessionsWithEphemerals(id) {
  const text = await fourLetter(serverPort(id), 'dump', 2000);
  const start = text.indexOf('Sessions with Ephemerals');
  if (start < 0) throw new Error('no ephemerals section in dump');
  const end = text.indexOf('Connections dump', start);
  const section = text.slice(start, end < 0 ? undefined : end);
  return new Set([...section.matchAll(/^0x([0-9a-fA-F]+):$/gm)].map((m) => BigInt(`0x${m[1]}`)));
}
const sid = (hex) => BigInt(`0x${String(hex).replace(/^0x/i, '')}`);

/**
 * Polls the leader's `dump` until the session's ephemeral nodes are gone. `lastSeenAt` is when a
 * poll that still showed them was sent (they certainly existed then), `goneAt` when the first poll
 * without them came back (they were certainly gone by then).
 */
function watchSession(sessionHex) {
  const target = sid(sessionHex);
  const watch = { lastSeenAt: undefined, goneAt: undefined, stopped: false, errors: 0 };
  let leader;
  watch.done = (async () => {
    while (!watch.stopped && watch.goneAt === undefined) {
      const sentAt = now();
      try {
        leader ??= (await leaders())[0];
        if (leader === undefined) throw new Error('no leader');
        const present = (await sessionsWithEphemerals(leader)).has(target);
        if (present) watch.lastSeenAt = sentAt;
        else watch.goneAt = now();
      } catch {
        watch.errors++;
        leader = undefined;
      }
      await sleep(50);
    }
  })();
  watch.stop = async () => {
    watch.stopped = true;
    await watch.done;
  };
  return watch;
}

/** Every ephemeral node (path → session, bigint) in the `dump` of server `id`. */
async function ephemeralNodes(id) {
  const text = await fourLetter(serverPort(id), 'dump', 2000);
  const start = text.indexOf('Sessions with Ephemerals');
  if (start < 0) throw new Error('no ephemerals section in dump');
  const end = text.indexOf('Connections dump', start);
  const nodes = new Map();
  let session;
  for (const line of text.slice(start, end < 0 ? undefined : end).split('\n')) {
    const header = /^0x([0-9a-fA-F]+):$/.exec(line.trim());
    if (header) session = BigInt(`0x${header[1]}`);
    else if (session !== undefined && line.trim().startsWith('/')) nodes.set(line.trim(), session);
  }
  return nodes;
}

/**
 * The observer: polls the leader's `dump` every 100 ms for the whole run and keeps, for every lock
 * node it ever saw, `lastSeenAt` (when the last poll that still listed it was sent: it certainly
 * existed then) and `goneAt` (when the first poll without it came back: it was certainly gone).
 * A lost signal is judged against these: the server's expiry of a session (or a release) is the
 * moment its nodes disappear.
 */
const nodeLog = new Map();
const observer = { polls: 0, errors: 0, stopped: false, snapshot: undefined, done: undefined };
function startObserver() {
  const live = new Set();
  let leader;
  observer.done = (async () => {
    while (!observer.stopped) {
      const sentAt = now();
      try {
        leader ??= (await leaders())[0];
        if (leader === undefined) throw new Error('no leader');
        const nodes = await ephemeralNodes(leader);
        const repliedAt = now();
        for (const [path, session] of nodes) {
          if (!path.startsWith(`${BASE}/`)) continue;
          const entry = nodeLog.get(path);
          if (entry) entry.lastSeenAt = sentAt;
          else {
            nodeLog.set(path, { session, lastSeenAt: sentAt });
            live.add(path);
          }
        }
        for (const path of live) {
          if (nodes.has(path)) continue;
          nodeLog.get(path).goneAt = repliedAt;
          live.delete(path);
        }
        observer.snapshot = { at: repliedAt, nodes };
        observer.polls++;
      } catch {
        observer.errors++;
        leader = undefined;
      }
      await sleep(100);
    }
  })();
}
async function stopObserver() {
  observer.stopped = true;
  await observer.done;
}

/** The mutex queue as the observer saw it last: [{path, session}] by sequence number. */
function mutexQueue() {
  const prefix = `${BASE}/mutex/`;
  const nodes = observer.snapshot ? [...observer.snapshot.nodes].filter(([path]) => path.startsWith(prefix) && !path.slice(prefix.length).includes('/')) : [];
  return nodes.map(([path, session]) => ({ path, session })).sort((a, b) => a.path.slice(-10).localeCompare(b.path.slice(-10)));
}

// ---------------------------------------------------------------------------------------------
// proxies: one per (worker slot, ensemble member)

// (scripts/support/tcp-proxy.mjs, shared with the Jest tests)

// ---------------------------------------------------------------------------------------------
// run state

const BASE = `/chaos/run-${randomBytes(4).toString('hex')}`;
/** @type {any[]} */
const slots = [];
const holds = new Map();
const lostEvents = [];
const stateEvents = [];
const errorsByType = new Map();
const fatals = [];
const warnings = [];
const lateWrites = [];
const crashes = [];
/** SIGSTOP windows: {pid, from, to}. */
const pauses = [];
/** Workers that did not finish within 30 s of being told to stop. */
const stuckAtStop = [];
const faults = [];
let acquisitions = { mutex: 0, sem: 0, 'rw-read': 0, 'rw-write': 0 };
let storeOps = 0;
let stopping = false;

function newStore() {
  return {
    value: 0,
    maxToken: -1n,
    /** Latest acquisition time among the holders that have used the store. */
    maxAcqTouched: -Infinity,
    reads: 0,
    accepted: 0,
    rejectedReads: 0,
    rejectedWrites: 0,
    /** Accepted writes of a holder when a holder that acquired later had already used the store. */
    staleAccepted: 0,
    /** Rejections of the newest holder (its token was lower than an older holder's). */
    falseRejects: 0,
    /** Accepted writes based on a value that was no longer current. */
    lostUpdates: 0,
    lateAccepted: 0,
    lateRejected: 0,
  };
}
const store = { mutex: newStore(), rw: newStore() };

function storeOp(m) {
  storeOps++;
  const s = store[m.store];
  if (m.t === 'peek') return { ok: true, value: s.value };
  const token = BigInt(m.token);
  const laterHolderActive = m.acquiredAt < s.maxAcqTouched;
  s.maxAcqTouched = Math.max(s.maxAcqTouched, m.acquiredAt);
  if (token < s.maxToken) {
    if (m.t === 'read') s.rejectedReads++;
    else s.rejectedWrites++;
    if (m.late) s.lateRejected++;
    if (!laterHolderActive) s.falseRejects++;
    return { ok: false };
  }
  s.maxToken = token;
  if (m.t === 'read') {
    s.reads++;
    return { ok: true, value: s.value };
  }
  if (laterHolderActive) s.staleAccepted++;
  if (m.expect !== s.value) s.lostUpdates++;
  s.value = m.value;
  s.accepted++;
  if (m.late) s.lateAccepted++;
  return { ok: true };
}

// Waiters re-check their condition on every worker message and a few times per second.
const conditionWaiters = new Set();
function poke() {
  for (const w of [...conditionWaiters]) w();
}
setInterval(poke, 100).unref();
function until(what, predicate, timeoutMs) {
  return new Promise((resolve) => {
    const deadline = now() + timeoutMs;
    const check = () => {
      let value;
      try {
        value = predicate();
      } catch {
        value = undefined;
      }
      if (value !== undefined && value !== false) {
        conditionWaiters.delete(check);
        resolve(value);
      } else if (now() > deadline) {
        conditionWaiters.delete(check);
        if (what) log(`gave up waiting for ${what} after ${timeoutMs} ms`);
        resolve(undefined);
      }
    };
    conditionWaiters.add(check);
    check();
  });
}

function onMessage(slot, child, m) {
  switch (m.t) {
    case 'read':
    case 'write':
    case 'peek':
      child.send({ id: m.id, ...storeOp(m) });
      break;
    case 'ready':
      slot.ready = true;
      break;
    case 'state':
      slot.state = m.state;
      if (m.sessionId && m.sessionId !== '0') slot.sessionId = m.sessionId;
      stateEvents.push({ slot: slot.slot, pid: child.pid, state: m.state, previous: m.previous, sessionId: m.sessionId, at: m.at });
      break;
    case 'acquiring':
      slot.workers.set(m.w, { status: 'waiting', lock: m.lock, since: m.at });
      break;
    case 'acquired':
      acquisitions[m.lock] = (acquisitions[m.lock] ?? 0) + 1;
      holds.set(m.holdId, { ...m, slot: slot.slot, pid: child.pid, end: 'open' });
      slot.workers.set(m.w, { status: 'holding', lock: m.lock, since: m.at, holdId: m.holdId });
      break;
    case 'released': {
      const hold = holds.get(m.holdId);
      if (hold) Object.assign(hold, { endAt: m.endAt, end: m.lost ? 'lost' : 'released', readerSawWrite: m.readerSawWrite, skippedWrite: m.skippedWrite });
      slot.workers.set(m.w, { status: 'idle', since: m.at });
      break;
    }
    case 'lost': {
      const hold = holds.get(m.holdId);
      if (hold) hold.lostAt = m.at;
      lostEvents.push({ slot: slot.slot, holdId: m.holdId, lock: m.lock, reason: m.reason, name: m.name, at: m.at });
      break;
    }
    case 'release-done': {
      const hold = holds.get(m.holdId);
      if (hold) hold.releasedAt = m.at;
      break;
    }
    case 'error': {
      const key = `${m.name}${m.reason ? `(${m.reason})` : ''} on ${m.lock} ${m.op}${m.shutdown ? ' (shutting down)' : ''}`;
      errorsByType.set(key, (errorsByType.get(key) ?? 0) + 1);
      if (args.verbose) log(`slot ${slot.slot}: ${m.lock} ${m.op}: ${m.name} ${m.reason ?? ''} ${m.message}`);
      break;
    }
    case 'holding-for-fault':
      slot.faultHold = m;
      break;
    case 'late-write':
      lateWrites.push({ ...m, slot: slot.slot });
      break;
    case 'warning':
      warnings.push(m.message);
      break;
    case 'fatal':
      fatals.push({ slot: slot.slot, pid: child.pid, ...m });
      log(`slot ${slot.slot} (pid ${child.pid}) ${m.event}: ${m.name}: ${m.message}`);
      break;
    case 'done':
      slot.done = m.stats;
      break;
    case 'try-once-burst':
      slot.burst = m;
      break;
    case 'quiet':
      slot.quietIdle = m.idle;
      break;
    case 'notify-held':
      slot.notifyHeld = m;
      break;
    case 'stuck':
      slot.stuck = m;
      log(`slot ${slot.slot} (pid ${child.pid}) has not stopped: ${JSON.stringify(m)}`);
      break;
  }
  poke();
}

function spawnWorker(slot) {
  const cfg = {
    mode: 'work',
    slot: slot.slot,
    connectString: SERVER_IDS.map((id) => slot.proxies.get(id).connectString).join(','),
    sessionTimeoutMs: opts.sessionTimeoutMs,
    base: BASE,
    mutexWorkers: opts.mutexWorkers,
    semWorkers: opts.semWorkers,
    rwWorkers: opts.rwWorkers,
    permits: opts.permits,
    waitMs: opts.waitMs,
    holdMs: opts.holdMs,
    writeRatio: opts.writeRatio,
    shutdownGraceMs: opts.shutdownGraceMs,
  };
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify(cfg) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    serialization: 'json',
  });
  Object.assign(slot, { child, pid: child.pid, ready: false, state: 'connecting', sessionId: undefined, workers: new Map(), faultHold: undefined, done: undefined, exited: false });
  slot.generation = (slot.generation ?? 0) + 1;
  slot.stderr = [];
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    slot.stderr.push(chunk);
    if (slot.stderr.length > 50) slot.stderr.shift();
    if (args.verbose) process.stderr.write(chunk.replace(/^/gm, `[slot ${slot.slot}] `));
  });
  child.on('message', (m) => onMessage(slot, child, m));
  child.on('error', () => undefined);
  child.on('exit', (code, signal) => {
    const at = now();
    if (slot.child === child) slot.exited = true;
    for (const hold of holds.values()) {
      if (hold.pid === child.pid && hold.end === 'open') Object.assign(hold, { end: 'killed', endAt: hold.lostAt ?? at });
    }
    const killedByUs = child.expectedExit && signal === 'SIGKILL';
    const stoppedCleanly = child.expectedExit && code === 0;
    if (!killedByUs && !stoppedCleanly) {
      const crash = { slot: slot.slot, pid: child.pid, code, signal, at, stderr: '' };
      crashes.push(crash);
      log(`slot ${slot.slot} (pid ${child.pid}) exited unexpectedly: code ${code} signal ${signal}`);
      // stderr may still hold the last words (an abort's assertion message): read it once it closes.
      const lines = slot.stderr;
      child.once('close', () => {
        crash.stderr = lines.join('').slice(-4000);
        if (crash.stderr) log(`slot ${slot.slot} (pid ${child.pid}) stderr:\n${crash.stderr}`);
      });
      // Keep the load (and the slot's faults) going with a fresh process.
      if (!stopping && slot.child === child) {
        setTimeout(() => {
          if (!stopping && !cleanedUp && slot.child === child) {
            log(`slot ${slot.slot}: starting a new worker process`);
            spawnWorker(slot);
          }
        }, 500);
      }
    }
    poke();
  });
  return child;
}

// ---------------------------------------------------------------------------------------------
// queries over what the workers reported

const liveSlots = () => slots.filter((s) => !s.exited);
const mutexHolds = () => [...holds.values()].filter((h) => h.lock === 'mutex');
function firstAcquisition(after, { lock = 'mutex', excludeHoldId, excludePid } = {}) {
  let best;
  for (const h of holds.values()) {
    if (h.lock !== lock || h.acquiredAt <= after || h.holdId === excludeHoldId || h.pid === excludePid) continue;
    if (!best || h.acquiredAt < best.acquiredAt) best = h;
  }
  return best;
}
const firstLost = (after, filter = () => true) =>
  lostEvents.filter((e) => e.at > after && filter(e)).sort((a, b) => a.at - b.at)[0];
const suspendedSince = (after) => new Set(stateEvents.filter((e) => e.at > after && e.state === 'suspended').map((e) => `${e.slot}`));

async function settle(label) {
  const since = now();
  const healthy = await until(`${label}: every worker connected`, () => liveSlots().every((s) => s.state === 'connected' && s.ready), 90_000);
  const flowing = await until(`${label}: a mutex acquisition`, () => firstAcquisition(since), opts.sessionTimeoutMs * 2 + 30_000);
  await sleep(opts.gapMs);
  return Boolean(healthy && flowing);
}

const ms = (a, b) => (a === undefined || b === undefined ? undefined : Math.round(b - a));

// ---------------------------------------------------------------------------------------------
// faults

async function killLeader() {
  const leader = await waitForLeader(30_000);
  const record = { fault: 'kill -9 leader', target: `server ${leader}` };
  const at = now();
  record.at = at;
  await zk(['stop', '--dir', ZK_DIR, '--id', String(leader), '--signal', 'KILL']);
  const downAt = now(); // the server is certainly dead from here
  const newLeader = await waitForLeader(60_000, [leader]);
  record.newLeaderMs = ms(downAt, now());
  const next = await until('a mutex holder after the leader kill', () => firstAcquisition(downAt), 60_000);
  record.nextHolderMs = ms(downAt, next?.acquiredAt);
  await sleep(opts.downMs);
  await zk(['restart', '--dir', ZK_DIR, '--id', String(leader)]);
  record.restartedMs = ms(downAt, now());
  const lost = firstLost(at);
  record.lostMs = ms(downAt, lost?.at);
  record.lostReason = lost?.reason;
  await settle('after the leader kill');
  const suspended = suspendedSince(at);
  record.observed = newLeader !== undefined && suspended.size > 0;
  record.evidence = `new leader: server ${newLeader ?? 'none'} after ${record.newLeaderMs} ms; ${suspended.size} worker connection(s) suspended; next holder after ${record.nextHolderMs ?? '-'} ms; old leader restarted after ${record.restartedMs} ms, back as ${await modeOf(leader)}`;
  return record;
}

async function killFollower() {
  const leader = await waitForLeader(30_000);
  const followers = SERVER_IDS.filter((id) => id !== leader);
  const clients = (id) => liveSlots().filter((s) => s.proxies.get(id).connections > 0);
  // The follower with the most of our clients; wait a moment for one to have any.
  const pick = await until(undefined, () => followers.find((id) => clients(id).length > 0), 5_000);
  const victim = pick ?? followers[0];
  let moved = '';
  if (pick === undefined) {
    // Nobody is on a follower: move one client there by refusing it the other two servers for a moment.
    const slot = liveSlots()[0];
    const others = SERVER_IDS.filter((id) => id !== victim);
    for (const id of others) slot.proxies.get(id).cut();
    // Connected through it, and still so a second later (a lagging follower may refuse the session).
    let since;
    await until(`slot ${slot.slot} to reconnect through server ${victim}`, () => {
      const on = slot.proxies.get(victim).connections > 0 && slot.state === 'connected';
      since = on ? (since ?? now()) : undefined;
      return on && now() - since > 1000;
    }, 30_000);
    for (const id of others) slot.proxies.get(id).restore();
    moved = ` (moved slot ${slot.slot} onto it first)`;
    await sleep(500);
  }
  const affected = clients(victim).map((s) => s.slot);
  const record = { fault: 'kill -9 follower with clients', target: `server ${victim} (slots ${affected.join(',') || 'none'})` };
  const at = now();
  record.at = at;
  await zk(['stop', '--dir', ZK_DIR, '--id', String(victim), '--signal', 'KILL']);
  const downAt = now();
  const back = await until('the clients of the killed follower to reconnect', () =>
    affected.every((slot) => stateEvents.some((e) => e.slot === slot && e.at > at && e.state === 'connected')) || undefined, 60_000);
  record.reconnectedMs = back && affected.length > 0 ? ms(at, Math.max(...affected.map((slot) => stateEvents.find((e) => e.slot === slot && e.at > at && e.state === 'connected').at))) : undefined;
  const next = await until('a mutex holder after the follower kill', () => firstAcquisition(downAt), 60_000);
  record.nextHolderMs = ms(downAt, next?.acquiredAt);
  const lost = firstLost(at);
  record.lostMs = ms(downAt, lost?.at);
  record.lostReason = lost?.reason;
  await sleep(opts.downMs);
  await zk(['restart', '--dir', ZK_DIR, '--id', String(victim)]);
  await settle('after the follower kill');
  const suspended = suspendedSince(at);
  const sameSession = affected.filter((slot) =>
    stateEvents.some((e) => e.slot === slot && e.at > at && e.state === 'connected' && e.previous === 'suspended'),
  );
  record.observed = affected.length > 0 && affected.every((slot) => suspended.has(`${slot}`)) && Boolean(back);
  record.evidence = `slots on it: ${affected.join(',') || 'none'}${moved}; suspended: ${[...suspended].join(',') || 'none'}; back on the same session: ${sameSession.join(',') || 'none'}, ${record.reconnectedMs ?? '-'} ms after the kill was sent`;
  return record;
}

/** Asks `slot` to misbehave with its next mutex holder; resolves with that hold, or undefined. */
async function holderFor(slot, kind) {
  slot.faultHold = undefined;
  slot.child.send({ cmd: 'hold-next', kind });
  const held = await until(`slot ${slot.slot} to hold the mutex for the ${kind} fault`, () => slot.faultHold, 30_000);
  if (!held) slot.child.send({ cmd: 'hold-next', kind: undefined });
  return held;
}

async function partitionHolder(slot, silent = false) {
  const record = {
    fault: silent ? 'silent partition (nothing passes, nothing closes) of a holder past session timeout' : 'partition holder past session timeout',
    target: `slot ${slot.slot} (pid ${slot.pid})`,
  };
  const hold = await holderFor(slot, 'partition');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const at = now();
  record.at = at;
  for (const proxy of slot.proxies.values()) silent ? proxy.blackhole({ holdCloses: true }) : proxy.cut();
  const watch = watchSession(hold.sessionId);
  const lost = await until('the partitioned holder to see its lease lost', () => lostEvents.find((e) => e.holdId === hold.holdId), opts.sessionTimeoutMs + 20_000);
  record.lostMs = ms(at, lost?.at);
  record.lostReason = lost?.reason;
  const next = await until('another holder after the partition', () => firstAcquisition(at, { excludeHoldId: hold.holdId }), opts.sessionTimeoutMs + 30_000);
  await sleep(Math.max(0, (lost?.at ?? now()) + 1000 - now()));
  for (const proxy of slot.proxies.values()) proxy.restore();
  record.restoredMs = ms(at, now());
  await until('the old session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  await watch.stop();
  // The late write goes once a newer holder has used the store.
  await until('a newer holder to use the store', () => store.mutex.maxAcqTouched > hold.acquiredAt || undefined, 30_000);
  slot.child.send({ cmd: 'go' });
  const late = await until('the late write', () => lateWrites.find((l) => l.holdId === hold.holdId), 15_000);
  Object.assign(record, holderChecks(at, hold, watch, next), { lateWrite: late ? (late.ok ? 'ACCEPTED' : 'rejected') : 'not made' });
  // The server still had the session's nodes at lastSeenAt: the signal beat its expiry by at least this.
  record.marginMs = lost && watch.lastSeenAt !== undefined ? Math.round(watch.lastSeenAt - lost.at) : undefined;
  // Positive: the holder was told only after another process already held the lock (the client
  // must declare the loss before the server's deadline, counted from the last packet it got).
  record.signalAfterNextHolderMs = lost && next ? Math.round(lost.at - next.acquiredAt) : undefined;
  await settle('after the partition');
  record.observed = Boolean(lost && next && late && !late.ok && record.nextAfterSessionGone);
  record.evidence =
    `lost signal (${record.lostReason ?? 'none'}) after ${record.lostMs ?? '-'} ms; old session's nodes gone after ${record.sessionGoneMs ?? '-'} ms; ` +
    `next holder after ${record.nextHolderMs ?? '-'} ms (${record.nextAfterSessionGone ? 'after' : 'NOT after'} the old session was gone); ` +
    `the signal came ${record.signalAfterNextHolderMs === undefined ? '-' : record.signalAfterNextHolderMs > 0 ? `${record.signalAfterNextHolderMs} ms AFTER` : `${-record.signalAfterNextHolderMs} ms before`} the next holder acquired; late write ${record.lateWrite}`;
  return record;
}

async function pauseHolder(slot) {
  const record = { fault: 'SIGSTOP holder past session timeout, SIGCONT', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'pause');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const at = now();
  record.at = at;
  const child = slot.child;
  process.kill(child.pid, 'SIGSTOP');
  slot.paused = true;
  const watch = watchSession(hold.sessionId);
  await sleep(opts.sessionTimeoutMs + opts.pauseExtraMs);
  const next = firstAcquisition(at, { excludeHoldId: hold.holdId });
  process.kill(child.pid, 'SIGCONT');
  slot.paused = false;
  const resumedAt = now();
  pauses.push({ pid: child.pid, from: at, to: resumedAt });
  record.pausedMs = ms(at, resumedAt);
  const died = () => (child.exitCode !== null || child.signalCode !== null ? `the process died on SIGCONT (${child.signalCode ?? `exit ${child.exitCode}`})` : undefined);
  const late = await until('the paused holder to write', () => lateWrites.find((l) => l.holdId === hold.holdId) ?? died(), 15_000);
  const lost = await until('the paused holder to see its lease lost', () => lostEvents.find((e) => e.holdId === hold.holdId) ?? died(), opts.sessionTimeoutMs + 20_000);
  record.crashed = died();
  await until('the old session to be gone', () => watch.goneAt, 20_000);
  await watch.stop();
  const lostEvent = typeof lost === 'object' ? lost : undefined;
  const lateWrite = typeof late === 'object' ? late : undefined;
  record.lostMs = ms(at, lostEvent?.at);
  record.lostAfterResumeMs = ms(resumedAt, lostEvent?.at);
  record.lostReason = lostEvent?.reason;
  Object.assign(record, holderChecks(at, hold, watch, next), { lateWrite: lateWrite ? (lateWrite.ok ? 'ACCEPTED' : 'rejected') : record.crashed ? 'crashed' : 'not made' });
  await settle('after the pause');
  record.observed = Boolean(next && lostEvent && lateWrite && !lateWrite.ok && record.nextAfterSessionGone);
  record.evidence =
    `another holder during the pause after ${record.nextHolderMs ?? '-'} ms (${record.nextAfterSessionGone ? 'after' : 'NOT after'} the old session was gone at ${record.sessionGoneMs ?? '-'} ms); ` +
    (record.crashed
      ? `${record.crashed.toUpperCase()} (see crashes)`
      : `write on SIGCONT ${record.lateWrite}; lost signal (${record.lostReason ?? 'none'}) ${record.lostAfterResumeMs ?? '-'} ms after SIGCONT`);
  return record;
}

async function killHolder(slot) {
  const record = { fault: 'SIGKILL worker holding the mutex', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'kill');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const at = now();
  record.at = at;
  slot.child.expectedExit = true;
  process.kill(slot.pid, 'SIGKILL');
  const watch = watchSession(hold.sessionId);
  const next = await until('another holder after the kill', () => firstAcquisition(at, { excludePid: hold.pid }), opts.sessionTimeoutMs + 30_000);
  await until('the old session to be gone', () => watch.goneAt, 20_000);
  await watch.stop();
  spawnWorker(slot);
  Object.assign(record, holderChecks(at, hold, watch, next));
  await settle('after the kill of a holder');
  record.observed = Boolean(next && record.nextAfterSessionGone);
  record.evidence = `old session's nodes gone after ${record.sessionGoneMs ?? '-'} ms; next holder after ${record.nextHolderMs ?? '-'} ms (${record.nextAfterSessionGone ? 'after' : 'NOT after'} the old session was gone)`;
  return record;
}

async function killWaiter() {
  const record = { fault: 'SIGKILL worker waiting for the mutex' };
  const candidate = await until('a worker process that waits for the mutex and does not hold it', () =>
    liveSlots().find((s) => {
      if (s.state !== 'connected' || !s.sessionId) return false;
      const workers = [...s.workers.values()];
      const waitingLong = workers.some((w) => w.status === 'waiting' && w.lock === 'mutex' && now() - w.since > 20);
      const holdsMutex = workers.some((w) => w.status === 'holding' && w.lock === 'mutex');
      return waitingLong && !holdsMutex;
    }), 30_000);
  const slot = candidate ?? liveSlots()[0];
  record.target = `slot ${slot.slot} (pid ${slot.pid})${candidate ? '' : ' (no clean waiting moment found: it may hold)'}`;
  const waiting = [...slot.workers.values()].filter((w) => w.status === 'waiting').length;
  const at = now();
  record.at = at;
  const sessionId = slot.sessionId;
  const pid = slot.pid;
  slot.child.expectedExit = true;
  process.kill(pid, 'SIGKILL');
  const watch = watchSession(sessionId);
  await until('the killed waiter session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  await watch.stop();
  const next = await until('a mutex holder after the waiter kill', () => firstAcquisition(at, { excludePid: pid }), 30_000);
  spawnWorker(slot);
  record.sessionGoneMs = ms(at, watch.goneAt);
  record.nextHolderMs = ms(at, next?.acquiredAt);
  const afterGone = watch.goneAt !== undefined ? await until('a mutex holder after the killed waiter\'s session was gone', () => firstAcquisition(watch.goneAt, { excludePid: pid }), 30_000) : undefined;
  await settle('after the kill of a waiter');
  record.observed = Boolean(candidate && watch.goneAt !== undefined && next);
  record.evidence = `${waiting} waiting request(s) killed; its nodes gone after ${record.sessionGoneMs ?? '-'} ms; next holder after ${record.nextHolderMs ?? '-'} ms; queue moving after the expiry: ${afterGone ? 'yes' : 'no'}`;
  return record;
}

/**
 * The waiter next in line is silenced (nothing passes, nothing closes) right after the watch event
 * that makes it the holder reaches it: the deletion of the head node, after which it holds without
 * sending anything, so the server last heard from it before that. Its lost signal must still come
 * before the server expires its session, i.e. before another process takes the lock.
 * The sharp case, on a mutex of its own ("notify"): every worker pauses its loops, slot H holds
 * the notify mutex, slot T queues behind it; once the server has not heard from T for QUIET_MS
 * (about a quarter of the session timeout: T's next heartbeat is nearly due), H releases (and
 * queues again at once). The
 * deletion reaches T, which holds at once; T's link goes silent right after. Then the library's
 * deadline (counted from T's last answered request) comes before the C client's own receive
 * timeout (2/3 of the session timeout after the event), while the socket still looks connected.
 * Tried again (up to 5 times; a try that silences nothing costs a second or two) when a heartbeat
 * got in between.
 */
async function notifyPartition() {
  const record = { fault: 'silent partition right after a watch event reached a waiter' };
  const tries = [];
  try {
    for (let i = 0; i < 5; i++) {
      const one = await notifyPartitionOnce();
      tries.push(one);
      if (!one.madeHolder) log(`notification fault, try ${i + 1}: ${one.summary}`);
      if (one.madeHolder) break;
    }
  } finally {
    for (const slot of liveSlots()) slot.child.send({ cmd: 'quiet', on: false });
  }
  const last = tries[tries.length - 1];
  Object.assign(record, last, { tries: tries.length });
  record.observed = Boolean(last.madeHolder && last.lostBeforeExpiry);
  record.evidence =
    (tries.length > 1 ? `${tries.length} tries (${tries.slice(0, -1).map((t) => t.summary).join('; ')}); ` : '') + last.summary;
  await settle('after the notification partition');
  return record;
}

async function notifyPartitionOnce() {
  const live = liveSlots().filter((s) => s.ready && s.state === 'connected');
  if (live.length < 2) return { at: now(), madeHolder: false, summary: 'fewer than two connected workers' };
  // Everyone quiet: the loops pause before their next acquire.
  for (const slot of live) {
    slot.quietIdle = false;
    slot.child.send({ cmd: 'quiet', on: true });
  }
  for (const m of ['notifyHeld']) for (const slot of live) slot[m] = undefined;
  const idle = await until('the workers to pause their loops', () => live.every((s) => s.quietIdle) || undefined, 30_000);
  const [target, head] = [live[live.length - 1], live[0]];
  const result = { target: `slot ${target.slot} (pid ${target.pid}) behind slot ${head.slot}`, at: now() };
  if (!idle) return { ...result, madeHolder: false, summary: 'the workers did not pause' };
  head.child.send({ cmd: 'notify-hold', again: true });
  const held = await until('the notify mutex to be held', () => head.notifyHeld, 10_000);
  if (!held) return { ...result, madeHolder: false, summary: 'the notify mutex was not held' };
  target.child.send({ cmd: 'notify-wait' });
  const queued = await until('the target to queue for the notify mutex', () => {
    const prefix = `${BASE}/notify/`;
    const nodes = observer.snapshot ? [...observer.snapshot.nodes].filter(([path]) => path.startsWith(prefix)) : [];
    return nodes.some(([, session]) => target.sessionId && session === sid(target.sessionId)) || undefined;
  }, 10_000);
  if (!queued) {
    head.child.send({ cmd: 'notify-release' });
    return { ...result, madeHolder: false, summary: 'the target did not queue' };
  }
  const armedAt = now();
  result.at = armedAt;
  const sessionId = target.sessionId;
  const proxies = [...target.proxies.values()];
  const quietFor = () => performance.timeOrigin + performance.now() - Math.max(...proxies.map((p) => p.lastClientPacketTime));
  const silence = Promise.race([
    ...proxies.map((p) => p.blackholeAfterNotification({ type: 'deleted', path: held.path, minQuietMs: QUIET_MS - 5, holdCloses: true }).then(() => p)),
    sleep(15_000).then(() => undefined),
  ]);
  // Let go once the server has not heard from the target for QUIET_MS (before its next heartbeat).
  await until(undefined, () => quietFor() >= QUIET_MS - 150 || undefined, 10_000);
  // Sharper than the 100 ms poll of `until`: short timers for the last stretch (a heartbeat in
  // between starts it again).
  for (const deadline = now() + 10_000; quietFor() < QUIET_MS && now() < deadline; ) await sleep(1);
  head.child.send({ cmd: 'notify-release' });
  const releasedAt = now();
  const silenced = await Promise.race([silence, sleep(5000).then(() => undefined)]);
  for (const proxy of proxies) proxy.blackhole({ holdCloses: true }); // whichever server it tries next: silent too
  const silentAt = now();
  if (!silenced) {
    for (const proxy of proxies) proxy.forward(); // nothing was swallowed
    // It holds the notify mutex normally: let go, and let the other one take it once more.
    await until(undefined, () => [...holds.values()].some((h) => h.lock === 'notify' && h.pid === target.pid && h.acquiredAt > releasedAt) || undefined, 10_000);
    target.child.send({ cmd: 'notify-release' });
    await until(undefined, () => [...holds.values()].some((h) => h.lock === 'notify' && h.pid === head.pid && h.acquiredAt > releasedAt && h.end !== 'open') || undefined, 10_000);
    return { ...result, madeHolder: false, summary: `the head's deletion reached slot ${target.slot} after it had sent something (a heartbeat?) within ${QUIET_MS} ms` };
  }
  // The server last heard from the client then (proxy clock → ours).
  const lastHeard = Math.max(...proxies.map((p) => p.lastClientPacketTime)) + PERF_TO_NOW;
  const watch = watchSession(sessionId);
  const lostState = await until('the silenced worker to declare its session lost', () =>
    stateEvents.find((e) => e.slot === target.slot && e.at > armedAt && e.state === 'lost'), opts.sessionTimeoutMs + 20_000);
  await until('the silenced session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  const next = await until('the released holder to take the notify mutex again', () =>
    [...holds.values()].find((h) => h.lock === 'notify' && h.pid === head.pid && h.acquiredAt > releasedAt), 10_000);
  await watch.stop();
  for (const proxy of proxies) proxy.restore();
  const hold = [...holds.values()].find((h) => h.pid === target.pid && h.lock === 'notify' && h.acquiredAt > armedAt);
  const lost = hold && (await until('the silenced holder to be told', () => lostEvents.find((e) => e.holdId === hold.holdId), 10_000));
  const toldAt = lost?.at ?? lostState?.at;
  Object.assign(result, {
    event: `${silenced.silencedAfter?.type} ${silenced.silencedAfter?.path}`,
    madeHolder: Boolean(hold),
    lostMs: ms(silentAt, toldAt),
    lostReason: lost?.reason,
    sessionGoneMs: ms(silentAt, watch.goneAt),
    nextHolderMs: ms(silentAt, next?.acquiredAt),
    // At least this long before the server expired the session (its nodes were still there).
    marginMs: toldAt !== undefined && watch.lastSeenAt !== undefined ? Math.round(watch.lastSeenAt - toldAt) : undefined,
    // ... and this long before the earliest moment it could have: one timeout after it last heard from us.
    earliestExpiryMarginMs: toldAt !== undefined ? Math.round(lastHeard + opts.sessionTimeoutMs - toldAt) : undefined,
    signalBeforeNextHolderMs: toldAt !== undefined && next ? Math.round(next.acquiredAt - toldAt) : undefined,
    lastHeardBeforeSilenceMs: Math.round(silentAt - lastHeard),
    lostBeforeExpiry: Boolean(lost && watch.goneAt !== undefined && lost.at < watch.goneAt && (!next || lost.at < next.acquiredAt)),
  });
  result.summary =
    `silenced after "${result.event}" (the server last heard from it ${result.lastHeardBeforeSilenceMs} ms before); ` +
    `${hold ? `it held the lock on that event; told ${lost ? `(${lost.reason})` : 'NOT'}` : 'the event did not make it the holder'} ` +
    `${result.lostMs ?? '-'} ms after the silence; its session gone after ${result.sessionGoneMs ?? '-'} ms, the other process held the lock after ` +
    `${result.nextHolderMs ?? '-'} ms: told ${fmtMargin(result.marginMs)} the expiry, ${fmtMargin(result.signalBeforeNextHolderMs)} the other holder, ` +
    `${fmtMargin(result.earliestExpiryMarginMs)} the earliest possible expiry`;
  return result;
}
const fmtMargin = (m) => (m === undefined ? '- vs' : m >= 0 ? `${m} ms before` : `${-m} ms AFTER`);
/** lossMarginMs() of lib/core/zk-connection.ts: the library declares the loss this long before its deadline. */
const LOSS_MARGIN_MS = Math.max(250, opts.sessionTimeoutMs / 10);
/**
 * A client the server has not heard from for this long when it is silenced has its library
 * deadline (its newest answered request + timeout − margin) come before the C client's own
 * receive timeout (2/3 of the timeout after the last packet it got), by 30 ms at least. The
 * library's heartbeat (a request once the newest answered one is a quarter of the timeout old)
 * comes a little later.
 */
const QUIET_MS = Math.ceil(opts.sessionTimeoutMs / 3 - LOSS_MARGIN_MS + 30);
/** Add to performance.timeOrigin + performance.now() (the proxies' clock) to get now()'s clock. */
const PERF_TO_NOW = now() - (performance.timeOrigin + performance.now());

/**
 * A rolling restart: SIGTERM to a worker while one of its holders is in a long critical section
 * (longer than shutdownGraceMs) and others are in short ones. The worker does what Nest's shutdown
 * hooks do (engine.shutdown(), connection.close(), exit 0); the short holders finish, the long one
 * is told (reason shutdown) before its node goes; then a new worker takes the slot.
 */
async function rollingRestart(slot) {
  const record = { fault: 'rolling restart: SIGTERM (shutdown hooks) with holds in flight, then a new worker', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'long');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  await sleep(200); // the other processes queue behind it
  // SIGTERM right as a short critical section begins too (a semaphore or rw holder of this process).
  const pid = slot.child.pid;
  await until(undefined, () => [...holds.values()].some((h) => h.pid === pid && h.end === 'open' && h.holdId !== hold.holdId) || undefined, 5_000);
  const at = now();
  record.at = at;
  const child = slot.child;
  const inFlight = [...holds.values()].filter((h) => h.pid === pid && h.end === 'open');
  child.expectedExit = true;
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  process.kill(pid, 'SIGTERM');
  let how = await Promise.race([exited, sleep(opts.shutdownGraceMs + 30_000).then(() => 'still running')]);
  if (how === 'still running') {
    process.kill(pid, 'SIGKILL');
    how = `still running after ${opts.shutdownGraceMs + 30_000} ms (SIGKILLed)`;
  }
  record.exitMs = ms(at, now());
  const lost = lostEvents.find((e) => e.holdId === hold.holdId);
  record.lostMs = ms(at, lost?.at);
  record.lostReason = lost?.reason;
  const next = await until('another holder after the rolling restart', () => firstAcquisition(at, { excludePid: pid }), 30_000);
  record.nextHolderMs = ms(at, next?.acquiredAt);
  record.signalBeforeNextHolderMs = lost && next ? Math.round(next.acquiredAt - lost.at) : undefined;
  const released = inFlight.filter((h) => holds.get(h.holdId).end === 'released' && !lostEvents.some((e) => e.holdId === h.holdId)).length;
  const told = lostEvents.filter((e) => e.at >= at && inFlight.some((h) => h.holdId === e.holdId));
  if (slot.child === child) spawnWorker(slot);
  const replaced = await settle('after the rolling restart');
  // The node of the long hold disappeared after its signal (the observer polls every 100 ms).
  const node = nodeLog.get(hold.path);
  record.nodeGoneAfterSignal = lost && node?.goneAt !== undefined ? node.goneAt >= lost.at : undefined;
  record.observed = how === 0 && lost?.reason === 'shutdown' && Boolean(next) && record.signalBeforeNextHolderMs > 0 && record.nodeGoneAfterSignal !== false && replaced;
  record.evidence =
    `exit ${how} after ${record.exitMs} ms; ${inFlight.length} hold(s) in flight: ${released} finished within the grace, ` +
    `${told.length} told by signal (${told.map((e) => e.reason).join(', ') || '-'}); the long one told ${record.lostMs ?? '-'} ms after SIGTERM ` +
    `(grace ${opts.shutdownGraceMs} ms), ${record.signalBeforeNextHolderMs ?? '-'} ms before another process held the mutex; ` +
    `new worker ${replaced ? 'connected and working' : 'NOT working'}`;
  return record;
}

/** Forks a foreign client (worker.mjs mode "foreign"); `ask(cmd)` resolves with its answer. */
async function startForeign() {
  const connectString = SERVER_IDS.map((id) => `127.0.0.1:${serverPort(id)}`).join(',');
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify({ mode: 'foreign', connectString, base: BASE }) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  child.stderr.resume();
  const answers = [];
  child.on('message', (m) => {
    if (m.t === 'foreign') answers.push(m);
    poke();
  });
  const kill = setTimeout(() => child.kill('SIGKILL'), 120_000);
  kill.unref();
  child.on('exit', () => clearTimeout(kill));
  const answer = (cmd) => until(`the foreign client's ${cmd}`, () => answers.find((a) => a.cmd === cmd && !a.taken && (a.taken = true)), 30_000);
  if (!(await answer('ready'))) {
    child.kill('SIGKILL');
    return undefined;
  }
  return {
    ask(message) {
      child.send(message);
      return answer(message.cmd);
    },
    exit() {
      child.send({ cmd: 'exit' });
      return until(undefined, () => child.exitCode !== null || child.signalCode !== null || undefined, 10_000);
    },
  };
}

/**
 * A foreign client runs `set` on every lock node (held and queued, every recipe), twice, while a
 * holder sits in a long critical section: nobody may be told anything. Then it deletes that
 * holder's node: the holder must be told (node-deleted) and the queue must keep moving (waiters
 * whose predecessor was written to must still notice its release).
 */
async function foreignSet(slot) {
  const record = { fault: "foreign client: set on every lock node, then delete the holder's node", target: `slot ${slot.slot} (pid ${slot.pid})` };
  const hold = await holderFor(slot, 'long');
  if (!hold) return { ...record, at: now(), observed: false, evidence: 'the slot never held the mutex' };
  const foreign = await startForeign();
  if (!foreign) {
    slot.child.send({ cmd: 'go' });
    return { ...record, at: now(), observed: false, evidence: 'the foreign client did not connect' };
  }
  const at = now();
  record.at = at;
  const first = await foreign.ask({ cmd: 'set-all' });
  await sleep(short ? 300 : 1000);
  const second = await foreign.ask({ cmd: 'set-all' });
  await sleep(short ? 700 : 2000);
  const spurious = lostEvents.filter((e) => e.at >= at);
  const deletion = await foreign.ask({ cmd: 'delete', path: hold.path });
  holds.get(hold.holdId).foreignDeleted = true;
  const lost = await until('the holder of the deleted node to be told', () => lostEvents.find((e) => e.holdId === hold.holdId), 10_000);
  record.lostMs = lost && deletion ? ms(deletion.at, lost.at) : undefined;
  record.lostReason = lost?.reason;
  const next = deletion && (await until('another holder after the deletion', () => firstAcquisition(deletion.at, { excludeHoldId: hold.holdId }), 15_000));
  record.nextHolderMs = next && ms(deletion.at, next.acquiredAt);
  // Every process takes the mutex again (each one's predecessor was written to, twice).
  const moving = deletion && (await until('every process to take the mutex after the deletion', () =>
    liveSlots().every((s) => mutexHolds().some((h) => h.pid === s.pid && h.acquiredAt > deletion.at)) || undefined, 20_000));
  record.queueMovedMs = moving ? ms(deletion.at, Math.max(...liveSlots().map((s) => mutexHolds().find((h) => h.pid === s.pid && h.acquiredAt > deletion.at).acquiredAt))) : undefined;
  if (!lost) slot.child.send({ cmd: 'go' });
  await foreign.exit();
  await settle('after the foreign writes');
  const setCount = (first?.set.length ?? 0) + (second?.set.length ?? 0);
  const setHeld = [first, second].filter((a) => a?.set.includes(hold.path)).length;
  record.observed = setHeld === 2 && spurious.length === 0 && deletion?.outcome === 'deleted' && lost?.reason === 'node-deleted' && Boolean(moving);
  record.evidence =
    `set on ${first?.set.length ?? 0} then ${second?.set.length ?? 0} lock node(s) (the long holder's: ${setHeld}/2 times); ` +
    `leases ended by the sets: ${spurious.length}${spurious.length ? ` (${spurious.map((e) => `${e.lock}:${e.reason}`).join(', ')})` : ''}; ` +
    `delete of the holder's node: ${deletion?.outcome ?? 'not done'}; its holder ${lost ? `told after ${record.lostMs} ms (${lost.reason})` : 'NOT told'}; ` +
    `next holder after ${record.nextHolderMs ?? '-'} ms; every process held the mutex again within ${record.queueMovedMs ?? '- (NO)'} ms`;
  record.setCount = setCount;
  return record;
}

/** Every try-once burst: {fault, slot, mode, count, maxMs, slowest, maxLoopDelayMs, reasons}. */
const tryOnceBursts = [];
/** The library's bound for a try-once (TRY_ONCE_BOUND_MS): a try-once must settle within it. */
const TRY_ONCE_BOUND_MS = 2000;
/**
 * Plus this much for timers firing late on a busy machine. Fixed: the worker's worst event-loop
 * delay is reported next to it, but not added, since the library can cause it itself (a
 * synchronous native call blocks the loop, e.g. closing a session on a link that answers nothing).
 */
const TRY_ONCE_SLACK_MS = 250;
const tryOnceLimit = () => TRY_ONCE_BOUND_MS + TRY_ONCE_SLACK_MS;
/** A burst passes when every call settled within the limit, for want of a connection. */
const burstOk = (b) => b.count > 0 && b.maxMs <= tryOnceLimit(b) && Object.keys(b.reasons).every((r) => r.endsWith(': connection'));

/** Asks the slots for try-once bursts of `burstMs` at once; resolves with their reports. */
async function tryOnceBurst(slotList, burstMs, fault, mode) {
  for (const slot of slotList) {
    slot.burst = undefined;
    slot.child.send({ cmd: 'try-once-burst', ms: burstMs });
  }
  const reports = await until('the try-once bursts', () => slotList.every((s) => s.burst || s.exited) || undefined, burstMs + 20_000);
  const bursts = slotList.filter((s) => s.burst).map((s) => ({ fault, mode, slot: s.slot, ...s.burst, at: undefined }));
  tryOnceBursts.push(...bursts);
  if (!reports) log(`try-once bursts (${mode}): ${bursts.length}/${slotList.length} reported`);
  return bursts;
}
const describeBurst = (b) =>
  `${b.mode}: ${b.count} try-once, slowest ${b.maxMs} ms${b.maxMs > tryOnceLimit(b) ? ' (OVER the limit)' : ''} (${b.slowest}; worst event-loop delay ${b.maxLoopDelayMs} ms), ` +
  `${Object.entries(b.reasons).map(([k, n]) => `${k} ×${n}`).join(', ')}`;

/** Try-once traffic while a worker is cut off, then while it is silenced: each settles fast with reason connection. */
async function tryOnceOutage(slot) {
  const record = { fault: 'try-once acquires while cut off, then while silenced', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const at = now();
  record.at = at;
  const bursts = [];
  for (const mode of ['cut', 'blackhole']) {
    for (const proxy of slot.proxies.values()) (mode === 'cut' ? proxy.cut() : proxy.blackhole({ holdCloses: true }));
    if (mode === 'cut') await until(`slot ${slot.slot} to notice the cut`, () => (slot.state !== 'connected') || undefined, 20_000);
    bursts.push(...(await tryOnceBurst([slot], opts.tryOnceBurstMs, record.fault, mode === 'cut' ? 'cut off' : 'silenced')));
    for (const proxy of slot.proxies.values()) proxy.restore();
    await until(`slot ${slot.slot} to reconnect`, () => (slot.state === 'connected') || undefined, opts.sessionTimeoutMs + 20_000);
  }
  record.tryOnce = bursts.map(({ mode, count, maxMs, maxLoopDelayMs, reasons }) => ({ mode, count, maxMs, maxLoopDelayMs, reasons }));
  await settle('after the try-once outage');
  record.observed = bursts.length === 2 && bursts.every(burstOk);
  record.evidence = bursts.map(describeBurst).join('; ') || 'no burst reported';
  return record;
}

async function restartEnsemble() {
  const record = { fault: 'whole ensemble killed and restarted', target: 'servers 1,2,3' };
  const at = now();
  record.at = at;
  await Promise.all(SERVER_IDS.map((id) => zk(['stop', '--dir', ZK_DIR, '--id', String(id), '--signal', 'KILL'])));
  const downAt = now();
  // Try-once traffic from every worker while nothing answers.
  const bursts = await tryOnceBurst(liveSlots(), Math.max(500, opts.downMs - 300), record.fault, 'ensemble down');
  await sleep(Math.max(0, downAt + opts.downMs - now()));
  await Promise.all(SERVER_IDS.map((id) => zk(['restart', '--dir', ZK_DIR, '--id', String(id)])));
  record.restartedMs = ms(downAt, now());
  const leader = await waitForLeader(60_000);
  const next = await until('a mutex holder after the ensemble restart', () => firstAcquisition(downAt), opts.sessionTimeoutMs * 2 + 60_000);
  record.nextHolderMs = ms(downAt, next?.acquiredAt);
  const lost = firstLost(at);
  record.lostMs = ms(downAt, lost?.at);
  record.lostReason = lost?.reason;
  await settle('after the ensemble restart');
  const suspended = suspendedSince(at);
  record.tryOnce = bursts.map(({ slot, count, maxMs, maxLoopDelayMs, reasons }) => ({ slot, count, maxMs, maxLoopDelayMs, reasons }));
  record.observed = leader !== undefined && liveSlots().every((s) => suspended.has(`${s.slot}`)) && Boolean(next) && bursts.length > 0 && bursts.every(burstOk);
  record.evidence =
    `back (leader server ${leader ?? 'none'}) after ${record.restartedMs} ms; ${suspended.size}/${liveSlots().length} workers suspended; next holder after ${record.nextHolderMs ?? '-'} ms; ` +
    `while down: ${bursts.map((b) => `slot ${b.slot} ${describeBurst(b).replace(/^ensemble down: /, '')}`).join('; ') || 'no try-once burst reported'}`;
  return record;
}

/** Shared checks of the faults that take a holder away: signal, session expiry, next holder. */
function holderChecks(at, hold, watch, next) {
  return {
    holdToken: hold.token,
    sessionGoneMs: ms(at, watch.goneAt),
    nextHolderMs: ms(at, next?.acquiredAt),
    nextToken: next?.token,
    // Sound: the old session's nodes existed when the last poll that showed them was sent.
    nextAfterSessionGone: next !== undefined && watch.lastSeenAt !== undefined ? next.acquiredAt >= watch.lastSeenAt : next !== undefined ? null : false,
  };
}

// ---------------------------------------------------------------------------------------------
// analysis

// A holder cannot be blamed for holding on while its process was stopped past its session
// timeout (it finds out only after SIGCONT): that is what fencing tokens are for.
const pausedThrough = (h) => pauses.some((p) => p.pid === h.pid && h.acquiredAt < p.to && (h.endAt ?? Infinity) > p.from);
const excused = (h) => h.end === 'lost' || h.end === 'killed' || h.end === 'open' || pausedThrough(h);

function overlaps() {
  const closed = [...holds.values()].map((h) => ({ ...h, endAt: h.endAt ?? Infinity }));
  const byStart = (list) => [...list].sort((a, b) => a.acquiredAt - b.acquiredAt);
  const result = { mutex: { explained: 0, unexplained: 0, examples: [] }, rw: { explained: 0, unexplained: 0, examples: [] }, sem: { explained: 0, unexplained: 0, maxConcurrent: 0, maxConcurrentHealthy: 0, examples: [] } };
  const note = (kind, a, b) => {
    const bucket = result[kind];
    if (excused(a) || excused(b)) bucket.explained++;
    else {
      bucket.unexplained++;
      if (bucket.examples.length < 5) bucket.examples.push({ a: pick(a), b: pick(b) });
    }
  };
  const pick = (h) => ({ holdId: h.holdId, lock: h.lock, token: h.token, acquiredAt: rel(h.acquiredAt), endAt: rel(h.endAt), end: h.end });
  // mutex: no two intervals overlap
  const mutex = byStart(closed.filter((h) => h.lock === 'mutex'));
  for (let i = 0; i < mutex.length; i++) {
    for (let j = i + 1; j < mutex.length && mutex[j].acquiredAt < mutex[i].endAt; j++) note('mutex', mutex[i], mutex[j]);
  }
  // rw: a writer overlaps nothing
  const rw = byStart(closed.filter((h) => h.lock === 'rw-read' || h.lock === 'rw-write'));
  for (let i = 0; i < rw.length; i++) {
    for (let j = i + 1; j < rw.length && rw[j].acquiredAt < rw[i].endAt; j++) {
      if (rw[i].lock === 'rw-write' || rw[j].lock === 'rw-write') note('rw', rw[i], rw[j]);
    }
  }
  // semaphore: at most `permits` at once
  const sem = byStart(closed.filter((h) => h.lock === 'sem'));
  const active = [];
  for (const h of sem) {
    for (let k = active.length - 1; k >= 0; k--) if (active[k].endAt <= h.acquiredAt) active.splice(k, 1);
    if (active.length >= opts.permits) note('sem', active.find(excused) ?? active[0], h);
    active.push(h);
    result.sem.maxConcurrent = Math.max(result.sem.maxConcurrent, active.length);
    result.sem.maxConcurrentHealthy = Math.max(result.sem.maxConcurrentHealthy, active.filter((a) => !excused(a)).length);
  }
  return result;
}

/** Holders that exclude each other pairwise (the semaphore is counted by permits instead). */
function conflicting(a, b) {
  if (a.lock === 'mutex' || a.lock === 'notify') return b.lock === a.lock;
  if (a.lock === 'rw-write') return b.lock === 'rw-write' || b.lock === 'rw-read';
  if (a.lock === 'rw-read') return b.lock === 'rw-write';
  return false;
}
/**
 * Excused from the promise: a holder SIGSTOPped through its hold (it cannot hear anything until
 * SIGCONT; fencing is what protects the data then), and the holder whose node the foreign client
 * deleted (the deletion is the server's word: it reaches that holder and the next one at once).
 */
const exemptFromPromise = (h) => (pausedThrough(h) ? 'SIGSTOPped' : h.foreignDeleted ? 'node deleted by the foreign client' : undefined);

/**
 * The promise itself, from each holder's own view: the time two holders overlapped while neither
 * had been told (each one's interval is [acquire() resolved, its signal aborted | it stopped using
 * the lock | its process died]), and for the semaphore the time more than `permits` such holders
 * held at once. Excused holders (above) are left out. Must be 0.
 */
function unawareOverlap() {
  const intervals = [...holds.values()].filter((h) => !exemptFromPromise(h)).map((h) => ({ ...h, endAt: h.endAt ?? Infinity }));
  const byLock = { mutex: { pairs: 0, ms: 0 }, rw: { pairs: 0, ms: 0 }, sem: { pairs: 0, ms: 0 } };
  const examples = [];
  const pick = (h) => ({ holdId: h.holdId, lock: h.lock, acquiredAt: rel(h.acquiredAt), endAt: rel(h.endAt), end: h.end, lostAt: rel(h.lostAt) });
  const sorted = intervals.filter((h) => h.lock !== 'sem').sort((a, b) => a.acquiredAt - b.acquiredAt);
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length && sorted[j].acquiredAt < sorted[i].endAt; j++) {
      const [a, b] = [sorted[i], sorted[j]];
      if (!conflicting(a, b)) continue;
      const overlap = Math.min(a.endAt, b.endAt) - b.acquiredAt;
      if (overlap <= 0) continue;
      const bucket = byLock[a.lock === 'mutex' || a.lock === 'notify' ? 'mutex' : 'rw'];
      bucket.pairs++;
      bucket.ms += overlap;
      if (examples.length < 5) examples.push({ a: pick(a), b: pick(b), ms: round1(overlap) });
    }
  }
  // Semaphore: sweep over starts and ends (an end before a start at the same instant).
  const edges = intervals.filter((h) => h.lock === 'sem').flatMap((h) => [[h.acquiredAt, 1, h], [h.endAt, -1, h]]).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let active = 0;
  let overSince;
  for (const [at, delta, h] of edges) {
    active += delta;
    if (active > opts.permits && overSince === undefined) {
      overSince = at;
      byLock.sem.pairs++;
      if (examples.length < 5) examples.push({ sem: `${active} holders at once`, from: rel(at), joined: pick(h) });
    } else if (active <= opts.permits && overSince !== undefined) {
      byLock.sem.ms += at - overSince;
      overSince = undefined;
    }
  }
  const pairs = byLock.mutex.pairs + byLock.rw.pairs + byLock.sem.pairs;
  const totalMs = round1(byLock.mutex.ms + byLock.rw.ms + byLock.sem.ms);
  return { pairs, totalMs, byLock: Object.fromEntries(Object.entries(byLock).map(([k, v]) => [k, { pairs: v.pairs, ms: round1(v.ms) }])), examples };
}

/**
 * For each lost signal: by how much it beat the server's end of that hold, i.e. the first of
 * - the moment the holder's lock node disappeared as the observer saw it (`goneAt`: the first poll
 *   of the leader's dump without it; `lastSeenAt`: the last poll that still listed it),
 * - the moment another holder of a conflicting lock acquired (same clock, exact).
 * `marginMs` = (first of node gone, other holder) − signal: < 0 means the holder was told after
 * the server had certainly let the lock go (a failure unless excused). `atLeastMs` = (first of
 * node last seen, other holder) − signal: a sure lower bound (≤ marginMs, by the poll interval).
 */
const round1 = (x) => Math.round(x * 10) / 10;
function lostSignalMargins() {
  const list = [];
  for (const e of lostEvents) {
    const h = holds.get(e.holdId);
    if (!h) continue;
    const node = nodeLog.get(h.path);
    let other;
    for (const b of holds.values()) {
      if (b.holdId === h.holdId || b.acquiredAt <= h.acquiredAt || !conflicting(h, b)) continue;
      if (!other || b.acquiredAt < other.acquiredAt) other = b;
    }
    const ends = [[node?.goneAt, 'node gone'], [other?.acquiredAt, 'another holder']].filter(([t]) => t !== undefined);
    const [serverEnd, by] = ends.sort((x, y) => x[0] - y[0])[0] ?? [];
    const sure = [node?.lastSeenAt, other?.acquiredAt].filter((t) => t !== undefined);
    const fault = [...faults].reverse().find((f) => f.at <= e.at);
    list.push({
      at: rel(e.at),
      slot: e.slot,
      lock: e.lock,
      reason: e.reason,
      fault: fault?.fault ?? (e.at < (faults[0]?.at ?? Infinity) ? 'before the first fault' : '-'),
      // To 0.1 ms: a signal a fraction of a millisecond after another holder acquired is late too.
      marginMs: serverEnd === undefined ? undefined : round1(serverEnd - e.at),
      by,
      atLeastMs: sure.length ? round1(Math.min(...sure) - e.at) : undefined,
      excused: exemptFromPromise(h),
      late: serverEnd !== undefined && serverEnd < e.at,
    });
  }
  return list.sort((a, b) => a.at - b.at);
}

/** Successive holders (by acquisition time) whose fencing token does not increase. */
function tokenInversions(lock) {
  const list = [...holds.values()].filter((h) => h.lock === lock).sort((a, b) => a.acquiredAt - b.acquiredAt);
  const examples = [];
  let count = 0;
  for (let i = 1; i < list.length; i++) {
    if (BigInt(list[i].token) <= BigInt(list[i - 1].token)) {
      count++;
      if (examples.length < 5) examples.push({ before: list[i - 1].token, after: list[i].token, at: rel(list[i].acquiredAt) });
    }
  }
  return { count, examples };
}

// ---------------------------------------------------------------------------------------------
// main

let cleanedUp = false;
async function cleanup() {
  if (cleanedUp) return;
  cleanedUp = true;
  stopping = true;
  observer.stopped = true;
  for (const slot of slots) {
    if (slot.child && !slot.exited) {
      slot.child.expectedExit = true;
      try {
        process.kill(slot.child.pid, 'SIGCONT');
        process.kill(slot.child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  for (const slot of slots) for (const proxy of slot.proxies?.values() ?? []) await proxy.close().catch(() => undefined);
  if (existsSync(ZK_DIR)) await zk(['stop', '--dir', ZK_DIR]).catch((e) => log(`stopping the ensemble failed: ${e.message}`));
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    log(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}
const hardLimit = setTimeout(() => {
  log(`hard time limit (${HARD_LIMIT_MS / 1000} s) reached: cleaning up`);
  void cleanup().finally(() => process.exit(2));
}, HARD_LIMIT_MS);
hardLimit.unref();

async function runCheck(connectString) {
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify({ mode: 'check', connectString, base: BASE }) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  const result = await new Promise((resolve) => {
    let nodes;
    child.on('message', (m) => m.t === 'check' && (nodes = m.nodes));
    child.on('exit', (code) => resolve(nodes ?? { error: `check exited with ${code}: ${stderr.slice(-500)}` }));
    setTimeout(() => child.kill('SIGKILL'), 90_000).unref();
  });
  return result;
}

async function main() {
  log(`ensemble in ${ZK_DIR}`);
  const connectString = await zk(['ensemble', '--dir', ZK_DIR, '--owner-pid', String(process.pid)]);
  log(`ensemble up: ${connectString}, leader server ${await waitForLeader(60_000)}`);
  startObserver();

  for (let i = 0; i < opts.processes; i++) {
    const slot = { slot: i, proxies: new Map() };
    for (const id of SERVER_IDS) {
      slot.proxies.set(id, await TcpProxy.start(`127.0.0.1:${serverPort(id)}`));
    }
    slots.push(slot);
    spawnWorker(slot);
  }
  const ready = await until('the workers to connect', () => slots.every((s) => s.ready), 90_000);
  if (!ready) throw new Error('the workers did not connect');
  log(`${opts.processes} workers × (${opts.mutexWorkers} mutex + ${opts.semWorkers} semaphore + ${opts.rwWorkers} rw) running on ${BASE}`);
  await sleep(short ? 2000 : 5000);

  const FAULTS = {
    leader: () => killLeader(),
    follower: () => killFollower(),
    partition: () => partitionHolder(slots[0]),
    'silent-partition': () => partitionHolder(slots[0], true),
    pause: () => pauseHolder(slots[1]),
    'kill-holder': () => killHolder(slots[2]),
    'kill-waiter': () => killWaiter(),
    'notify-partition': () => notifyPartition(),
    'rolling-restart': () => rollingRestart(slots[2]),
    'foreign-set': () => foreignSet(slots[1]),
    'try-once-outage': () => tryOnceOutage(slots[0]),
    ensemble: () => restartEnsemble(),
  };
  const pass = (args.faults ?? Object.keys(FAULTS).join(',')).split(',').map((name) => FAULTS[name.trim()]);
  const deadline = T0 + opts.seconds * 1000;
  // A fault plus its recovery takes at most about this long; do not start one that cannot finish.
  const faultBudget = opts.sessionTimeoutMs * 2 + 15_000;
  for (let round = 0; ; round++) {
    for (let i = 0; i < pass.length; i++) {
      if (round > 0 && now() + faultBudget > deadline) break;
      const startedAt = now();
      let record;
      try {
        record = await pass[(i + round) % pass.length]();
      } catch (error) {
        record = { fault: `fault #${i}`, at: startedAt, observed: false, evidence: `failed: ${error.message}` };
      }
      faults.push(record);
      log(`${record.fault} → ${record.observed ? 'observed' : 'NOT OBSERVED'}: ${record.evidence}`);
    }
    if (now() + faultBudget > deadline) break;
  }
  if (now() < deadline) await sleep(deadline - now());

  // Stop the workers: they finish their holds, close their sessions and exit.
  log('stopping the workers');
  stopping = true;
  for (const slot of liveSlots()) {
    slot.child.expectedExit = true;
    slot.child.send({ cmd: 'stop' });
  }
  await until('the workers to exit', () => slots.every((s) => s.exited), 30_000);
  for (const slot of liveSlots()) {
    stuckAtStop.push({ slot: slot.slot, pid: slot.pid, where: slot.stuck, stderr: slot.stderr.join('').slice(-2000) });
    log(`slot ${slot.slot} (pid ${slot.pid}) did not exit: SIGKILL`);
    process.kill(slot.pid, 'SIGKILL');
  }
  await until(undefined, () => slots.every((s) => s.exited), 10_000);
  const endedAt = now();

  // Orphans: lock nodes still there a session timeout after the last worker ended.
  await sleep(opts.sessionTimeoutMs + 2000);
  await stopObserver();
  const nodes = await runCheck(connectString);
  const orphanList = Array.isArray(nodes) ? nodes.filter((n) => n.ephemeralOwner !== '0') : [];
  let orphansLater;
  if (orphanList.length > 0) {
    await sleep(opts.sessionTimeoutMs * 2);
    const again = await runCheck(connectString);
    orphansLater = Array.isArray(again) ? again.filter((n) => n.ephemeralOwner !== '0').length : undefined;
  }
  const checkedAfterMs = ms(endedAt, now());

  for (const slot of slots) for (const proxy of slot.proxies.values()) await proxy.close();
  await zk(['stop', '--dir', ZK_DIR]);
  cleanedUp = true;

  return report({ nodes, orphanList, orphansLater, checkedAfterMs });
}

function report({ nodes, orphanList, orphansLater }) {
  const ov = overlaps();
  const inversions = { mutex: tokenInversions('mutex'), rw: tokenInversions('rw-write') };
  // A reader whose value changed under it although its signal had not aborted: a failure, unless
  // its process was SIGSTOPped meanwhile (it cannot know before the library hears of the expiry).
  const sawWrite = [...holds.values()].filter((h) => h.readerSawWrite);
  const readerSawWrite = sawWrite.filter((h) => !excused(h)).length;
  const readerSawWritePaused = sawWrite.length - readerSawWrite;
  const lostByReason = {};
  for (const e of lostEvents) lostByReason[`${e.lock}:${e.reason}`] = (lostByReason[`${e.lock}:${e.reason}`] ?? 0) + 1;
  // Lost signals per fault window (from a fault to the next one).
  for (let i = 0; i < faults.length; i++) {
    const from = faults[i].at;
    const to = faults[i + 1]?.at ?? Infinity;
    faults[i].lostSignals = lostEvents.filter((e) => e.at >= from && e.at < to).length;
  }
  const totalAcq = Object.values(acquisitions).reduce((a, b) => a + b, 0);
  const margins = lostSignalMargins();
  const s = store;
  const result = {
    options: opts,
    durationS: Math.round((now() - T0) / 1000),
    operations: storeOps,
    acquisitions: { total: totalAcq, ...acquisitions },
    store: Object.fromEntries(Object.entries(s).map(([k, v]) => [k, { ...v, maxToken: String(v.maxToken), maxAcqTouched: undefined }])),
    staleAccepted: s.mutex.staleAccepted + s.rw.staleAccepted,
    falseRejects: s.mutex.falseRejects + s.rw.falseRejects,
    fencingRejections: s.mutex.rejectedReads + s.mutex.rejectedWrites + s.rw.rejectedReads + s.rw.rejectedWrites,
    lostUpdates: s.mutex.lostUpdates + s.rw.lostUpdates,
    counterConsistent: s.mutex.value === s.mutex.accepted && s.rw.value === s.rw.accepted,
    overlaps: ov,
    unaware: unawareOverlap(),
    lostSignalMargins: margins,
    /** Lost signals that came after the server had certainly let the lock go (not excused). */
    lateSignals: margins.filter((m) => !m.excused && m.late).length,
    /** Lost signals with nothing to judge them by (the node never seen gone, nobody acquired after). */
    unjudgedSignals: margins.filter((m) => !m.excused && m.marginMs === undefined).length,
    tryOnce: {
      bursts: tryOnceBursts.length,
      calls: tryOnceBursts.reduce((n, b) => n + b.count, 0),
      maxMs: Math.max(0, ...tryOnceBursts.map((b) => b.maxMs)),
      limitMs: tryOnceLimit(),
      maxLoopDelayMs: Math.max(0, ...tryOnceBursts.map((b) => b.maxLoopDelayMs ?? 0)),
      outcomes: tryOnceBursts.reduce((all, b) => {
        for (const [k, n] of Object.entries(b.reasons)) all[k] = (all[k] ?? 0) + n;
        return all;
      }, {}),
      failedBursts: tryOnceBursts.filter((b) => !burstOk(b)).map((b) => ({ fault: b.fault, mode: b.mode, slot: b.slot, maxMs: b.maxMs, limitMs: tryOnceLimit(b), reasons: b.reasons })),
    },
    observer: { polls: observer.polls, errors: observer.errors, nodes: nodeLog.size },
    unexplainedOverlaps: ov.mutex.unexplained + ov.rw.unexplained + ov.sem.unexplained,
    explainedOverlaps: ov.mutex.explained + ov.rw.explained + ov.sem.explained,
    readerSawWrite,
    readerSawWritePaused,
    readerSawWriteExamples: sawWrite.slice(0, 5).map((h) => ({ holdId: h.holdId, pid: h.pid, acquiredAt: rel(h.acquiredAt), endAt: rel(h.endAt), end: h.end, pausedThrough: pausedThrough(h) })),
    tokenInversions: inversions.mutex.count + inversions.rw.count,
    tokenInversionExamples: [...inversions.mutex.examples, ...inversions.rw.examples],
    orphans: Array.isArray(nodes) ? orphanList.length : -1,
    orphanPaths: orphanList.map((n) => n.path),
    orphansLater,
    checkError: Array.isArray(nodes) ? undefined : nodes.error,
    lostSignals: lostEvents.length,
    lostByReason,
    errorsByType: Object.fromEntries(errorsByType),
    fatals,
    crashes,
    stuckAtStop,
    warnings: [...new Set(warnings)].slice(0, 10),
    faults: faults.map((f) => ({ ...f, at: rel(f.at) })),
  };
  result.allFaultsObserved = faults.length >= (args.faults ? 1 : FAULT_NAMES.length) && faults.every((f) => f.observed);
  result.passed =
    result.staleAccepted === 0 &&
    result.falseRejects === 0 &&
    result.lostUpdates === 0 &&
    result.counterConsistent &&
    result.unexplainedOverlaps === 0 &&
    result.unaware.pairs === 0 &&
    result.lateSignals === 0 &&
    result.tryOnce.failedBursts.length === 0 &&
    result.readerSawWrite === 0 &&
    result.tokenInversions === 0 &&
    result.orphans === 0 &&
    fatals.length === 0 &&
    crashes.length === 0 &&
    stuckAtStop.length === 0 &&
    result.allFaultsObserved;
  printTables(result);
  if (args.json) writeFileSync(args.json, `${JSON.stringify(result, null, 2)}\n`);
  return result;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function printTables(r) {
  const out = [];
  const row = (...cells) => out.push(`| ${cells.join(' | ')} |`);
  const v = (x) => (x === undefined || x === null ? '-' : String(x));
  out.push('', `## Chaos run: ${r.durationS} s, ${r.options.processes} processes, session timeout ${r.options.sessionTimeoutMs} ms`, '');
  row('measure', 'value', 'expected');
  row('---', '---', '---');
  row('store operations (reads, writes, peeks)', r.operations, '');
  row('acquisitions (mutex / semaphore / read / write)', `${r.acquisitions.total} (${r.acquisitions.mutex} / ${r.acquisitions.sem} / ${r.acquisitions['rw-read']} / ${r.acquisitions['rw-write']})`, '');
  row('writes accepted (mutex / rw)', `${r.store.mutex.accepted} / ${r.store.rw.accepted}`, '');
  row('store saw an older holder after a newer one: rejected by the fencing check', r.fencingRejections, '≥ 1 (late writes)');
  row('**... accepted (writes from stale holders)**', r.staleAccepted, '0');
  row('rejections of the newest holder (token out of order)', r.falseRejects, '0');
  row('fencing token inversions between successive holders', r.tokenInversions, '0');
  row('**lost updates**', r.lostUpdates, '0');
  row('counter = accepted writes', r.counterConsistent ? 'yes' : 'NO', 'yes');
  row('overlapping holders, both still holding by their own account', r.unexplainedOverlaps, '0');
  row(
    '**time two holders overlapped while neither signal had aborted** (mutex / rw / semaphore over its permits)',
    `${r.unaware.totalMs} ms (${['mutex', 'rw', 'sem'].map((k) => `${r.unaware.byLock[k].ms} ms in ${r.unaware.byLock[k].pairs}`).join(' / ')})`,
    '0 ms',
  );
  const judged = r.lostSignalMargins.filter((m) => !m.excused && m.marginMs !== undefined);
  row(
    '**lost signals that came after the server let the lock go** (of judged; margin min / median, ms)',
    `${r.lateSignals} of ${judged.length}; ${judged.length ? `${Math.min(...judged.map((m) => m.marginMs))} / ${median(judged.map((m) => m.marginMs))}` : '-'}` +
      `${r.unjudgedSignals ? `; ${r.unjudgedSignals} unjudged` : ''}; ${r.lostSignalMargins.length - judged.length - r.unjudgedSignals} excused`,
    '0',
  );
  row(
    '**try-once during outages: slowest** (calls; worst event-loop delay; outcomes)',
    `${r.tryOnce.maxMs} ms (${r.tryOnce.calls}; ${r.tryOnce.maxLoopDelayMs} ms; ${Object.entries(r.tryOnce.outcomes).map(([k, n]) => `${k} ×${n}`).join(', ') || '-'})`,
    `≤ ${TRY_ONCE_BOUND_MS} + ${TRY_ONCE_SLACK_MS} ms, connection only`,
  );
  row('overlapping holders, one of them lost, killed or SIGSTOPped (fenced)', r.explainedOverlaps, 'any');
  row('semaphore: most holders at once (all / not lost, killed or paused)', `${r.overlaps.sem.maxConcurrent} / ${r.overlaps.sem.maxConcurrentHealthy}`, `any / ≤ ${r.options.permits}`);
  row('readers that saw a write while holding (not paused / paused through a SIGSTOP)', `${r.readerSawWrite} / ${r.readerSawWritePaused}`, '0 / any');
  row('**orphaned lock nodes after the session timeout**', `${r.orphans}${r.orphansLater !== undefined ? ` (${r.orphansLater} after another 2× timeout)` : ''}`, '0');
  row(
    'partition: lease signal minus next holder\'s acquisition, ms (> 0: told after another process held the lock)',
    r.faults.filter((f) => f.signalAfterNextHolderMs !== undefined).map((f) => `${f.signalAfterNextHolderMs}${f.fault.startsWith('silent') ? ' (silent)' : ''}`).join(', ') || '-',
    '< 0 (fenced either way)',
  );
  row('lost signals (lock:reason)', `${r.lostSignals} ${JSON.stringify(r.lostByReason)}`, '');
  row('errors surfaced to callers', Object.entries(r.errorsByType).map(([k, n]) => `${k}: ${n}`).join('; ') || 'none', '');
  row('worker crashes / unhandled errors / stuck at stop', `${r.crashes.length} / ${r.fatals.length} / ${r.stuckAtStop.length}`, '0 / 0 / 0');
  out.push('');
  row('fault', 'at s', 'observed', 'lost signals', 'fault → lost signal ms', 'fault → old session gone ms', 'fault → next holder ms', 'next holder after old session gone', 'late write');
  row('---', '---', '---', '---', '---', '---', '---', '---', '---');
  for (const f of r.faults) {
    row(
      `${f.fault} [${f.target ?? ''}]`,
      v(f.at?.toFixed(1)),
      f.observed ? 'yes' : '**NO**',
      v(f.lostSignals),
      `${v(f.lostMs)}${f.lostReason ? ` (${f.lostReason})` : ''}`,
      v(f.sessionGoneMs),
      v(f.nextHolderMs),
      f.nextAfterSessionGone === undefined ? '-' : f.nextAfterSessionGone ? 'yes' : '**NO**',
      v(f.lateWrite),
    );
  }
  out.push('');
  for (const f of r.faults) out.push(`- ${f.fault}: ${f.evidence}`);
  if (r.lostSignalMargins.length) {
    out.push('', 'Lost signals (margin: the server\'s end of the hold − the signal, ms; > 0: told first; "at least": against the last poll that still saw the node)', '');
    row('at s', 'slot', 'lock', 'reason', 'during', 'margin ms (against)', 'at least ms', 'verdict');
    row('---', '---', '---', '---', '---', '---', '---', '---');
    for (const m of r.lostSignalMargins) {
      const verdict = m.excused ? `excused (${m.excused})` : m.marginMs === undefined ? 'unjudged' : m.late ? '**LATE**' : 'ok';
      row(m.at.toFixed(1), m.slot, m.lock, m.reason, m.fault, m.marginMs === undefined ? '-' : `${m.marginMs} (${m.by})`, v(m.atLeastMs), verdict);
    }
  }
  for (const b of r.tryOnce.failedBursts) out.push('', `try-once burst over its limit or not for want of a connection: ${JSON.stringify(b)}`);
  if (r.unaware.pairs > 0) out.push('', `overlaps while neither was told: ${JSON.stringify(r.unaware.examples)}`);
  if (r.unexplainedOverlaps > 0) out.push('', `overlap examples: ${JSON.stringify([...r.overlaps.mutex.examples, ...r.overlaps.rw.examples, ...r.overlaps.sem.examples])}`);
  if (r.readerSawWrite > 0) out.push('', `readers that saw a write: ${JSON.stringify(r.readerSawWriteExamples)}`);
  if (r.tokenInversions > 0) out.push('', `token inversions: ${JSON.stringify(r.tokenInversionExamples)}`);
  if (r.orphans > 0) out.push('', `orphans: ${r.orphanPaths.join(', ')}`);
  if (r.checkError) out.push('', `orphan check failed: ${r.checkError}`);
  for (const st of r.stuckAtStop) out.push('', `did not stop within 30 s: slot ${st.slot} pid ${st.pid}: ${JSON.stringify(st.where)}`);
  for (const c of r.crashes) out.push('', `crash: slot ${c.slot} pid ${c.pid} code ${c.code} signal ${c.signal}\n${c.stderr}`);
  for (const f of r.fatals) out.push('', `unhandled: slot ${f.slot} ${f.event}: ${f.stack}`);
  if (r.warnings.length) out.push('', `warnings: ${r.warnings.join(' | ')}`);
  out.push('', r.passed ? 'RESULT: PASS' : 'RESULT: FAIL', '');
  process.stdout.write(out.join('\n'));
}

try {
  const result = await main();
  process.exitCode = result.passed ? 0 : 1;
} catch (error) {
  log(`run failed: ${error.stack ?? error}`);
  process.exitCode = 2;
} finally {
  await cleanup();
  clearTimeout(hardLimit);
}
// Timers of helpers (until, watchers) are unref'd or finished; leave promptly anyway.
setTimeout(() => process.exit(), 500).unref();
