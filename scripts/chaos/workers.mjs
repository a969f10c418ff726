// The worker processes (worker.mjs): forking them behind their proxies, their reports, and the
// foreign client and the final check (worker.mjs in other modes).
import { fork } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { REPO_ROOT as REPO } from '../support/zookeeper.mjs';
import { log, now } from './clock.mjs';
import { SERVER_IDS, serverPort } from './ensemble.mjs';
import { args, opts } from './options.mjs';
import {
  acquisitions, BASE, crashes, errorsByType, fatals, firstAcquisition, holds, lateWrites, liveSlots, lostEvents, poke, run,
  stateEvents, until, warnings,
} from './state.mjs';
import { storeOp } from './store.mjs';

const WORKER = fileURLToPath(new URL('./worker.mjs', import.meta.url));

/** @typedef {import('node:child_process').ChildProcess & { expectedExit?: boolean }} WorkerProcess set when we end it on purpose */

export function onMessage(slot, child, m) {
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
      if (hold) Object.assign(hold, { lostAt: m.at, lostReason: m.reason });
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

export function spawnWorker(slot) {
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
  /** @type {WorkerProcess} */
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify(cfg) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    serialization: 'json',
  });
  Object.assign(slot, { child, pid: child.pid, ready: false, state: 'connecting', sessionId: undefined, workers: new Map(), faultHold: undefined, done: undefined, exited: false });
  slot.generation = (slot.generation ?? 0) + 1;
  slot.stderr = [];
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk) => {
    slot.stderr.push(chunk);
    if (slot.stderr.length > 50) slot.stderr.shift();
    if (args.verbose) process.stderr.write(chunk.replace(/^/gm, `[slot ${slot.slot}] `));
  });
  child.on('message', (/** @type {any} */ m) => onMessage(slot, child, m));
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
      if (!run.stopping && slot.child === child) {
        setTimeout(() => {
          if (!run.stopping && !run.cleanedUp && slot.child === child) {
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

export async function settle(label) {
  const since = now();
  const healthy = await until(`${label}: every worker connected`, () => liveSlots().every((s) => s.state === 'connected' && s.ready), 90_000);
  const flowing = await until(`${label}: a mutex acquisition`, () => firstAcquisition(since), opts.sessionTimeoutMs * 2 + 30_000);
  await sleep(opts.gapMs);
  return Boolean(healthy && flowing);
}

/** Asks `slot` to misbehave with its next mutex holder; resolves with that hold, or undefined. */
export async function holderFor(slot, kind) {
  slot.faultHold = undefined;
  slot.child.send({ cmd: 'hold-next', kind });
  const held = await until(`slot ${slot.slot} to hold the mutex for the ${kind} fault`, () => slot.faultHold, 30_000);
  if (!held) slot.child.send({ cmd: 'hold-next', kind: undefined });
  return held;
}

/** Forks a foreign client (worker.mjs mode "foreign"); `ask(cmd)` resolves with its answer. */
export async function startForeign() {
  const connectString = SERVER_IDS.map((id) => `127.0.0.1:${serverPort(id)}`).join(',');
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify({ mode: 'foreign', connectString, base: BASE }) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  child.stderr?.resume();
  const answers = [];
  child.on('message', (/** @type {any} */ m) => {
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

/** Forks worker.mjs in mode "check": the lock nodes left under BASE, read by a fresh client. */
export async function runCheck(connectString) {
  const child = fork(WORKER, [], {
    cwd: REPO,
    env: { ...process.env, CHAOS_WORKER: JSON.stringify({ mode: 'check', connectString, base: BASE }) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr?.on('data', (c) => (stderr += c));
  const result = await new Promise((resolve) => {
    let nodes;
    child.on('message', (/** @type {any} */ m) => m.t === 'check' && (nodes = m.nodes));
    child.on('exit', (code) => resolve(nodes ?? { error: `check exited with ${code}: ${stderr.slice(-500)}` }));
    setTimeout(() => child.kill('SIGKILL'), 90_000).unref();
  });
  return result;
}
