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
//   (permits 2) and a read-write lock. This process never holds a ZooKeeper connection (children
//   would inherit the native client's sockets, see README "Known limitations"): it talks to
//   ZooKeeper only with four-letter words, and the final check runs in a child process;
// - is the workers' data store, over the IPC channel: a fenced counter per lock. A read or write
//   carrying a token lower than one the store has seen is rejected and counted;
// - injects each fault at least once: kill -9 of the leader (restarted later), kill -9 of a
//   follower a client is connected to (restarted), a holder partitioned past its session timeout
//   with its connections closed and silently (nothing passes, nothing closes; its late write must
//   be rejected), SIGSTOP of a holder past the session timeout then SIGCONT,
//   the whole ensemble killed and restarted, a worker SIGKILLed while holding and while waiting,
//   a waiter silenced right after a watch event reached it, a rolling restart (SIGTERM: shutdown
//   with holds in flight), a foreign client's `set` on every lock node (then a delete of the
//   holder's), try-once traffic while a worker is cut off and while it is silenced;
// - stops the workers, waits for the dead sessions to expire, counts the lock nodes left behind
//   from a fresh client, stops the ensemble and prints the tables (exit code 1 if a check failed).
//
// --short: one pass over the faults with a 4 s session timeout (the Jest variant, about 60–90 s).
// Default: 150 s (--seconds), 6 s session timeout; faults repeat until the time is up (one full
// pass always runs). --json FILE writes the result; exit code 0 = every check passed, 1 = a check
// failed, 2 = the run itself failed.
//
// Fault table: "fault → ..." times are measured from the fault: for server kills from the moment
// the killed server(s) are certainly gone, for holder faults from the cut / SIGSTOP / SIGKILL.
// "old session gone" is when the leader's `dump` no longer lists the victim session's ephemeral
// nodes (polled every 50 ms); "next holder after old session gone" compares the next holder's
// acquisition with the last poll that still listed them (sound, no false alarm). Overlaps: two
// holders whose own intervals [acquired, released-or-lost] overlap; those involving a holder that
// was lost, SIGKILLed or SIGSTOPped are expected (fencing is what protects the data then), any
// other is a failure. Stricter, the promise itself: the time two holders overlapped while neither
// signal had aborted (each holder's interval ends at its own lost signal), excusing only SIGSTOPped
// holders and the holder whose node the foreign client deleted, must be 0; and each partition
// reports by how much its lost signal beat the server's expiry (the last poll that still saw the
// session's nodes). Stale writes are judged by acquisition order, independently of the tokens.
import { execFile, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { TcpProxy } from '../support/tcp-proxy.mjs';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const ZK_SCRIPT = join(REPO, 'scripts', 'zookeeper.sh');
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

function zk(cmdArgs) {
  return new Promise((resolve, reject) => {
    execFile('bash', [ZK_SCRIPT, ...cmdArgs], { cwd: REPO, timeout: 180_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (args.verbose && stderr) process.stderr.write(stderr);
      if (error) reject(new Error(`zookeeper.sh ${cmdArgs.join(' ')}: ${error.message}\n${stderr}`));
      else resolve(stdout.trim().split('\n').pop() ?? '');
    });
  });
}

function fourLetter(port, cmd, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const socket = net.createConnection({ host: '127.0.0.1', port }, () => socket.end(cmd));
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`${cmd} to ${port} timed out`)));
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', (hadError) => !hadError && resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

const ZK_DIR = join(tmpdir(), `nestjs-zk-lock-chaos.${randomBytes(6).toString('hex')}`);
const SERVER_IDS = [1, 2, 3];
const serverPort = (id) => Number(readFileSync(join(ZK_DIR, `server.${id}.port`), 'utf8').trim());

async function modeOf(id) {
  try {
    return /^Mode: (\w+)$/m.exec(await fourLetter(serverPort(id), 'srvr', 1000))?.[1] ?? 'down';
  } catch {
    return 'down';
  }
}
async function leaders() {
  const modes = await Promise.all(SERVER_IDS.map(async (id) => [id, await modeOf(id)]));
  return modes.filter(([, m]) => m === 'leader').map(([id]) => id);
}
async function waitForLeader(timeoutMs = 60_000, exclude = []) {
  const deadline = now() + timeoutMs;
  while (now() < deadline) {
    const l = await leaders();
    if (l.length === 1 && !exclude.includes(l[0])) return l[0];
    await sleep(100);
  }
  return undefined;
}

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
      acquisitions[m.lock]++;
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
    case 'error': {
      const key = `${m.name}${m.reason ? `(${m.reason})` : ''} on ${m.op}`;
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
  for (const proxy of slot.proxies.values()) silent ? proxy.blackhole() : proxy.cut();
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
 * A waiter is silenced (nothing passes, nothing closes) right after a watch event reaches it, e.g.
 * the deletion that makes it the holder with nothing sent: the server last heard from it earlier.
 * Its lost signal must still come before the server expires its session.
 */
async function notifyPartition(slot) {
  const record = { fault: 'silent partition right after a watch event reached a waiter', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const waiting = () => {
    const workers = [...slot.workers.values()];
    return workers.some((w) => w.status === 'waiting' && w.lock === 'mutex') && !workers.some((w) => w.status === 'holding' && w.lock === 'mutex');
  };
  await until(`slot ${slot.slot} to wait for the mutex`, () => waiting() || undefined, 30_000);
  const at = now();
  record.at = at;
  const sessionId = slot.sessionId;
  const proxies = [...slot.proxies.values()];
  const silenced = await Promise.race([...proxies.map((p) => p.blackholeAfterNotification()), sleep(30_000).then(() => undefined)]);
  for (const proxy of proxies) proxy.blackhole(); // whichever server it reaches next: silence too
  const silentAt = now();
  const watch = watchSession(sessionId);
  const lostState = await until('the silenced worker to declare its session lost', () =>
    stateEvents.find((e) => e.slot === slot.slot && e.at > at && e.state === 'lost'), opts.sessionTimeoutMs + 20_000);
  await until('the silenced session to be gone', () => watch.goneAt, opts.sessionTimeoutMs + 20_000);
  await watch.stop();
  for (const proxy of proxies) proxy.restore();
  const held = [...holds.values()].filter((h) => h.slot === slot.slot && h.acquiredAt >= at && h.acquiredAt <= silentAt);
  record.lostMs = ms(silentAt, lostState?.at);
  record.lostReason = 'session';
  record.sessionGoneMs = ms(silentAt, watch.goneAt);
  record.marginMs = lostState && watch.lastSeenAt !== undefined ? Math.round(watch.lastSeenAt - lostState.at) : undefined;
  await settle('after the notification partition');
  record.observed = silenced !== undefined && Boolean(lostState) && watch.goneAt !== undefined && lostState.at <= watch.goneAt;
  record.evidence =
    `${silenced === undefined ? 'no watch event came' : 'silenced after a watch event'}; ${held.length} mutex hold(s) began then; ` +
    `session declared lost ${record.lostMs ?? '-'} ms after the silence, the server's nodes gone after ${record.sessionGoneMs ?? '-'} ms ` +
    `(lost signal ${record.marginMs === undefined ? '-' : `at least ${record.marginMs} ms`} before the expiry)`;
  return record;
}

/** SIGTERM with critical sections in flight (a rolling deploy): holders finish or are told, then a new worker starts. */
async function rollingRestart(slot) {
  const record = { fault: 'rolling restart: SIGTERM (shutdown hooks) with holds in flight, then a new worker', target: `slot ${slot.slot} (pid ${slot.pid})` };
  await until(`slot ${slot.slot} to hold something`, () => [...slot.workers.values()].some((w) => w.status === 'holding') || undefined, 30_000);
  const at = now();
  record.at = at;
  const child = slot.child;
  const pid = child.pid;
  child.expectedExit = true;
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  process.kill(pid, 'SIGTERM');
  const how = await Promise.race([exited, sleep(opts.shutdownGraceMs + 20_000).then(() => 'still running')]);
  record.exitMs = ms(at, now());
  const shutdownLosses = lostEvents.filter((e) => e.slot === slot.slot && e.at >= at && e.reason === 'shutdown').length;
  const ended = [...holds.values()].filter((h) => h.pid === pid && (h.endAt ?? 0) >= at).length;
  spawnWorker(slot);
  await settle('after the rolling restart');
  record.observed = how === 0;
  record.evidence = `exit ${how} after ${record.exitMs} ms; ${ended} hold(s) ended during shutdown, ${shutdownLosses} of them told by signal (reason shutdown)`;
  return record;
}

/** A foreign client writes data to every node of the mutex queue, then deletes the holder's node. */
async function foreignSet() {
  const record = { fault: 'foreign client: set on every mutex node, then delete the holder\'s node' };
  const at = now();
  record.at = at;
  const connectString = SERVER_IDS.map((id) => `127.0.0.1:${serverPort(id)}`).join(',');
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify({ mode: 'foreign', connectString, base: BASE, deleteHead: true, deleteAfterMs: 500 }) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let deleting;
  const result = await new Promise((resolve) => {
    let answer;
    child.on('message', (m) => {
      if (m.t === 'foreign-deleting') deleting = m;
      if (m.t === 'foreign') answer = m;
    });
    child.on('exit', () => resolve(answer));
    setTimeout(() => child.kill('SIGKILL'), 60_000).unref();
  });
  // Its holder at that moment (coalesced holders of one process share a node, and hand it on
  // until the deletion reaches them) must be told: a lost signal for a hold on that node.
  const onNode = (e) => e.at >= deleting.at && holds.get(e.holdId)?.path === deleting.path;
  const lost = deleting ? await until('the holder of the deleted node to be told', () => lostEvents.find(onNode), 10_000) : undefined;
  const victim = lost ? holds.get(lost.holdId) : undefined;
  if (victim) victim.foreignDeleted = true;
  record.lostMs = lost && deleting ? ms(deleting.at, lost.at) : undefined;
  record.lostReason = lost?.reason;
  await settle('after the foreign writes');
  record.observed = Boolean(result && result.set > 0 && (!result.deleted || (victim && lost?.reason === 'node-deleted')));
  record.evidence = `set data on ${result?.set ?? 0} node(s); deleted ${result?.deleted ? 'the holder\'s node' : 'nothing (no holder then)'}; ` +
    `its holder ${victim ? (lost ? `told after ${record.lostMs} ms (${lost.reason})` : 'NOT told') : 'unknown'}`;
  return record;
}

/** Try-once traffic while a worker is cut off, then while it is silenced: each settles fast with reason connection. */
async function tryOnceOutage(slot) {
  const record = { fault: 'try-once acquires while cut off, then while silenced', target: `slot ${slot.slot} (pid ${slot.pid})` };
  const at = now();
  record.at = at;
  const bursts = [];
  for (const mode of ['cut', 'blackhole']) {
    for (const proxy of slot.proxies.values()) proxy[mode]();
    if (mode === 'cut') await until(`slot ${slot.slot} to notice the cut`, () => (slot.state !== 'connected') || undefined, 20_000);
    slot.burst = undefined;
    slot.child.send({ cmd: 'try-once-burst', ms: opts.tryOnceBurstMs });
    bursts.push({ mode, ...(await until('the try-once burst', () => slot.burst, opts.tryOnceBurstMs + 20_000)) });
    for (const proxy of slot.proxies.values()) proxy.restore();
    await until(`slot ${slot.slot} to reconnect`, () => (slot.state === 'connected') || undefined, opts.sessionTimeoutMs + 20_000);
  }
  record.tryOnce = bursts.map(({ mode, count, maxMs, reasons }) => ({ mode, count, maxMs, reasons }));
  await settle('after the try-once outage');
  record.observed = bursts.every((b) => b.count > 0 && b.maxMs <= TRY_ONCE_LIMIT_MS && Object.keys(b.reasons ?? {}).every((r) => r === 'connection'));
  record.evidence = bursts.map((b) => `${b.mode}: ${b.count ?? 0} try-once, slowest ${b.maxMs ?? '-'} ms, ${JSON.stringify(b.reasons ?? {})}`).join('; ');
  return record;
}
/** A try-once must settle within its 2 s bound (plus timer lag on a busy machine). */
const TRY_ONCE_LIMIT_MS = 3000;

async function restartEnsemble() {
  const record = { fault: 'whole ensemble killed and restarted', target: 'servers 1,2,3' };
  const at = now();
  record.at = at;
  await Promise.all(SERVER_IDS.map((id) => zk(['stop', '--dir', ZK_DIR, '--id', String(id), '--signal', 'KILL'])));
  const downAt = now();
  await sleep(opts.downMs);
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
  record.observed = leader !== undefined && liveSlots().every((s) => suspended.has(`${s.slot}`)) && Boolean(next);
  record.evidence = `back (leader server ${leader ?? 'none'}) after ${record.restartedMs} ms; ${suspended.size}/${liveSlots().length} workers suspended; next holder after ${record.nextHolderMs ?? '-'} ms`;
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

/**
 * The promise itself, from each holder's own view: the time two holders overlapped while neither
 * had been told (its interval ends at its lost signal, its release or its death). Only a holder
 * that was SIGSTOPped through it (it cannot hear anything) or whose node a foreign client deleted
 * (the deletion reaches it and the next holder at once) is excused.
 */
function unawareOverlap() {
  const exempt = (h) => pausedThrough(h) || h.foreignDeleted;
  const intervals = [...holds.values()].filter((h) => !exempt(h)).map((h) => ({ ...h, endAt: h.endAt ?? Infinity }));
  let totalMs = 0;
  let pairs = 0;
  const examples = [];
  const conflict = (a, b) => a.lock === 'mutex' ? b.lock === 'mutex' : a.lock.startsWith('rw-') && b.lock.startsWith('rw-') && (a.lock === 'rw-write' || b.lock === 'rw-write');
  const sorted = intervals.sort((a, b) => a.acquiredAt - b.acquiredAt);
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length && sorted[j].acquiredAt < sorted[i].endAt; j++) {
      const [a, b] = [sorted[i], sorted[j]];
      if (!conflict(a, b)) continue;
      const overlap = Math.min(a.endAt, b.endAt) - b.acquiredAt;
      if (overlap <= 0) continue;
      pairs++;
      totalMs += overlap;
      if (examples.length < 5) examples.push({ a: { holdId: a.holdId, end: a.end, endAt: rel(a.endAt) }, b: { holdId: b.holdId, acquiredAt: rel(b.acquiredAt) }, ms: Math.round(overlap) });
    }
  }
  return { pairs, totalMs: Math.round(totalMs), examples };
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
    'notify-partition': () => notifyPartition(slots[1]),
    'rolling-restart': () => rollingRestart(slots[2]),
    'foreign-set': () => foreignSet(),
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
    lostSignalMargins: faults.filter((f) => f.marginMs !== undefined).map((f) => ({ fault: f.fault, marginMs: f.marginMs })),
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
  row('**time two holders overlapped while neither signal had aborted** (pairs)', `${r.unaware.totalMs} ms (${r.unaware.pairs})`, '0 ms');
  row(
    'lost signal before the server expired the session, at least (ms)',
    r.lostSignalMargins.map((m) => `${m.marginMs}`).join(', ') || '-',
    '≥ 0',
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
