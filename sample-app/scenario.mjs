// The ticket-sale scenario, shared by `npm run demo` (scripts/demo.mjs) and the e2e test
// (test/e2e/sample-app.e2e.spec.ts): build the sample app, start N instances on one fresh SQLite
// file, let many buyers purchase one seat each of one event concurrently (round-robin over the
// instances), then collect what the instances say (over HTTP only: this process never connects
// to ZooKeeper, so the instances it spawns inherit no ZooKeeper socket).
import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const MAIN = join(ROOT, 'sample-app', 'dist', 'main.js');

// Types (JSDoc, checked by tsconfig.tooling.json; the TypeScript e2e tests import them from here).
/**
 * @typedef {object} Instance
 * @property {string} name
 * @property {number} pid
 * @property {number} port
 * @property {string} url
 * @property {string} logFile
 * @property {import('node:child_process').ChildProcess} child
 * @property {Promise<number | string | null>} exited
 */
/**
 * @typedef {object} StartOptions
 * @property {number} [count]
 * @property {string[]} [names] instead of `count`: the instances' names (INSTANCE), e.g. to restart one under its name
 * @property {string} zkConnect
 * @property {string} databaseFile
 * @property {string} logDir
 * @property {boolean} [locks]
 * @property {number} [lockWaitMs]
 * @property {string} [basePath]
 * @property {Record<string, string>} [env]
 * @property {number} [readyTimeoutMs]
 * @property {string[]} [nodeArgs] Node options before the app's script (e.g. `--import` of a profiler)
 */
/** @typedef {{ 201: number, 409: number, 410: number, other: number }} Counts */
/** @typedef {{ done: number, total: number, counts: Counts }} Progress */
/**
 * One contender of GET /locks (a ContenderInfo of LockService.inspect(), as JSON).
 * @typedef {object} LockContender
 * @property {string} node
 * @property {string} path
 * @property {'lock' | 'read' | 'write' | 'lease' | 'latch' | 'other'} mode
 * @property {number} [sequence]
 * @property {boolean} holds
 * @property {{ host?: string, pid?: number, app?: string, instance?: string, createdAt?: string }} holder
 * @property {string} sessionId
 * @property {string} createdAt
 * @property {number} ageMs
 */
/**
 * One lock of GET /locks (a LockInfo of LockService.inspect(), as JSON, plus its name).
 * @typedef {object} LockView
 * @property {string} name
 * @property {string} path
 * @property {'mutex' | 'read-write' | 'semaphore' | 'leadership' | 'idle'} kind
 * @property {LockContender[]} holders
 * @property {LockContender[]} waiting
 * @property {number} [leases]
 * @property {number} [permits]
 */
/** @typedef {{ from: string, error?: string, basePath?: string, locks?: LockView[] }} LockSnapshot */
/**
 * @typedef {object} ScenarioResult
 * @property {string} label
 * @property {boolean} locks
 * @property {{ name: string, pid: number, port: number }[]} instances
 * @property {number} buyers
 * @property {number} concurrency
 * @property {number} seats
 * @property {number} sold
 * @property {number} oversold
 * @property {number} ok
 * @property {number} conflict
 * @property {number} soldOut
 * @property {number} other
 * @property {string[]} otherSamples
 * @property {number} p50
 * @property {number} p99
 * @property {number} saleMs
 * @property {{ ticksInWindow: number, ticksObserved: number, maxRunsPerTick: number, ticks: { tick: number, runs: number, instances: string[] }[] }} cron
 * @property {number} reportRebuilds
 * @property {LockSnapshot} [lockSnapshot]
 * @property {TakeoverResult} [takeover] with the `takeover` option and locks: the leader of 'jobs:housekeeping' stopped and its successor timed
 * @property {string} [takeoverError] why that failed
 * @property {string} logDir
 * @property {number} totalMs
 */
/**
 * @typedef {object} ScenarioOptions
 * @property {string} zkConnect
 * @property {string} workDir
 * @property {boolean} [locks]
 * @property {number} [instances]
 * @property {number} [buyers]
 * @property {number} [seats]
 * @property {number} [concurrency]
 * @property {number} [lockWaitMs]
 * @property {string} [basePath]
 * @property {number} [minTicks]
 * @property {Record<string, string>} [env]
 * @property {AbortSignal} [signal]
 * @property {string} [label]
 * @property {(progress: Progress) => void} [onProgress]
 * @property {(instances: Instance[]) => void} [onInstances]
 * @property {boolean} [takeover] with locks and 2 instances or more: after the sale and its cron ticks, stop the leader of 'jobs:housekeeping' and time its successor (leaderTakeover)
 * @property {(leader: Instance) => void} [onTakeover] called just before that leader gets its SIGTERM
 */
/** @typedef {{ tick: number, runs: number, instances: string[] }} TickRuns */
/**
 * What leaderTakeover() saw: the leader of an election (as GET /locks names it), its graceful
 * stop, the first instance that GET /locks named leader after it, and the leader-only job's runs
 * per tick before and after (from GET /jobs/cron-runs; the instances share the database).
 * @typedef {object} TakeoverResult
 * @property {string} election
 * @property {string} job
 * @property {{ name: string, pid: number }} leader
 * @property {string} seenBy the instance whose GET /locks named the leader
 * @property {number} participants contenders in the election then (the leader included)
 * @property {number} stopTick the tick during which the SIGTERM went out (the leader had run it)
 * @property {number} stopPhaseMs how far into its second the SIGTERM went out
 * @property {number | string | null} exit the stopped leader's exit code (or signal)
 * @property {number} exitMs SIGTERM → that process's exit
 * @property {{ name: string, pid: number } | undefined} successor undefined: no other leader within `timeoutMs`
 * @property {number} timeoutMs
 * @property {number | undefined} takeoverMs SIGTERM → the first GET /locks answer naming the successor: the takeover happened before this
 * @property {number} lastOldMs SIGTERM → the sending of the last GET /locks that still named the old leader: the takeover happened after this
 * @property {number} survivors how many instances were asked
 * @property {number} everyMs how often each survivor was asked
 * @property {number} polls GET /locks answers from the survivors after the SIGTERM
 * @property {number} answerMs their median time to answer
 * @property {TickRuns[]} ticks the job's runs per tick from `sinceTick` to the last whole tick, ticks nobody ran included (runs 0)
 * @property {number} leaderTicks ticks up to `stopTick` run by the leader alone
 * @property {number[]} missed ticks nobody ran
 * @property {TickRuns[]} doubled ticks run more than once
 * @property {number | undefined} firstSuccessorTick
 */
/**
 * @typedef {object} TakeoverOptions
 * @property {string} [election] default 'jobs:housekeeping'
 * @property {string} [job] the leader-only job in GET /jobs/cron-runs: default 'housekeeping'
 * @property {number} [sinceTick] first tick to count (default: 5 ticks ago); every instance should be up by then
 * @property {number} [ticksAfter] whole ticks to watch after the stop (default 3)
 * @property {number} [phaseMs] send the SIGTERM this far into a second, after the leader's run of that tick (default 300)
 * @property {number} [everyMs] send a GET /locks to each survivor this often (default 10)
 * @property {number} [inFlight] with at most this many unanswered per survivor (default 2)
 * @property {number} [timeoutMs] give up waiting for a leader (or a successor) after this long (default 30 000)
 * @property {AbortSignal} [signal]
 * @property {(leader: Instance) => void} [onStop] called just before the SIGTERM
 */
/** @typedef {{ status: number, headers: import('node:http').IncomingHttpHeaders, body: any }} HttpAnswer */

/**
 * Compiles the library (dist/) and/or the sample app (sample-app/dist/) with tsc.
 * @param {{ library?: boolean, sampleApp?: boolean }} [options]
 */
export function build({ library = true, sampleApp = true } = {}) {
  const run = (project) => execFileSync(process.execPath, [TSC, '-p', project], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  if (library) run('tsconfig.build.json');
  if (sampleApp) run(join('sample-app', 'tsconfig.json'));
}

/** Children still running, so that a process exit (or Ctrl-C) can end them. */
/** @type {Set<import('node:child_process').ChildProcess>} */
const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/**
 * Stops every instance still running (SIGTERM, then SIGKILL after `graceMs`): for Ctrl-C handlers.
 * @param {{ graceMs?: number }} [options]
 */
export async function stopAllInstances(options) {
  await stopInstances([...live].map((child) => ({ child, exited: new Promise((resolve) => child.once('exit', resolve)) })), options);
}

/**
 * Starts `count` instances (named instance-1..., or `names`) on free ports, all on `databaseFile`;
 * resolves once each has printed its ready line. Their output is appended to `<logDir>/<name>.log`.
 * @param {StartOptions} options
 * @returns {Promise<Instance[]>}
 */
export async function startInstances({ count, names, zkConnect, databaseFile, logDir, locks = true, lockWaitMs, basePath, env = {}, readyTimeoutMs = 90_000, nodeArgs = [] }) {
  mkdirSync(logDir, { recursive: true });
  const starts = [];
  for (const name of names ?? Array.from({ length: count ?? 0 }, (_, i) => `instance-${i + 1}`)) {
    const logFile = join(logDir, `${name}.log`);
    const log = createWriteStream(logFile, { flags: 'a' });
    const child = spawn(process.execPath, [...nodeArgs, MAIN], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        ...env,
        ZK_CONNECT: zkConnect,
        DATABASE_FILE: databaseFile,
        PORT: '0',
        INSTANCE: name,
        LOCKS: locks ? 'on' : 'off',
        ...(lockWaitMs === undefined ? {} : { LOCK_WAIT_MS: String(lockWaitMs) }),
        ...(basePath === undefined ? {} : { LOCK_BASE_PATH: basePath }),
        NO_COLOR: '1',
      },
    });
    live.add(child);
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(signal ?? code);
    }));
    child.stderr.pipe(log, { end: false });
    child.once('close', () => log.end()); // both output streams are done
    /** @type {Instance} */
    const instance = { name, pid: /** @type {number} */ (child.pid), child, exited, logFile, port: 0, url: '' };
    starts.push(
      /** @type {Promise<Instance>} */ (new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${name} not ready after ${readyTimeoutMs} ms (log: ${logFile})`)), readyTimeoutMs);
        const lines = createInterface({ input: child.stdout });
        lines.on('line', (line) => {
          log.write(`${line}\n`);
          if (!line.startsWith('{"ready":true')) return;
          const ready = JSON.parse(line);
          instance.port = ready.port;
          instance.url = `http://127.0.0.1:${ready.port}`;
          clearTimeout(timer);
          resolve(instance);
        });
        child.once('error', reject);
        void exited.then((how) => {
          clearTimeout(timer);
          reject(new Error(`${name} exited during start-up (${how}):\n${tail(logFile)}`));
        });
      })),
    );
  }
  const results = await Promise.allSettled(starts);
  const failed = results.find((r) => r.status === 'rejected');
  const started = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  if (failed) {
    await stopInstances(started);
    for (const child of live) child.kill('SIGKILL');
    throw failed.reason;
  }
  return started;
}

function tail(file, lines = 30) {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/**
 * SIGTERM by PID (a graceful Nest shutdown: locks released, session closed), SIGKILL after `graceMs`.
 * @param {Pick<Instance, 'child' | 'exited'>[]} instances
 * @param {{ graceMs?: number }} [options]
 * @returns {Promise<void>}
 */
export async function stopInstances(instances, { graceMs = 10_000 } = {}) {
  await Promise.all(
    instances.map(async ({ child, exited }) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    }),
  );
}

// node:http with keep-alive: about half the CPU of fetch per request, which matters on 2 cores
// shared by the buyers and the instances.
const agent = new Agent({ keepAlive: true, maxSockets: 256 });

/**
 * One HTTP request; resolves with the status, the headers and the parsed JSON body (or the text).
 * @param {string} method
 * @param {string} url
 * @param {unknown} [body]
 * @param {number} [timeoutMs]
 * @returns {Promise<HttpAnswer>}
 */
export function http(method, url, body, timeoutMs = 60_000) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      url,
      {
        method,
        agent,
        timeout: timeoutMs,
        headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => (text += chunk));
        res.on('error', reject);
        res.on('end', () => {
          let json;
          try {
            json = JSON.parse(text);
          } catch {
            json = text;
          }
          resolve({ status: /** @type {number} */ (res.statusCode), headers: res.headers, body: json });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

/**
 * @param {string} url
 * @returns {Promise<any>}
 */
export async function getJson(url) {
  const { status, body } = await http('GET', url);
  if (status !== 200) throw new Error(`GET ${url}: ${status} ${JSON.stringify(body)}`);
  return body;
}

const tickOf = (time = Date.now()) => Math.floor((time + 250) / 1000); // as the sample app's cron job counts

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/**
 * One run: `instances` instances, an event with `seats` seats, `buyers` purchases of one seat
 * with at most `concurrency` in flight (buyer i goes to instance i mod N). Keeps the instances up
 * for at least `minTicks` whole cron ticks. Returns the figures; stops the instances in any case.
 * `onProgress({ done, total, counts })` is called after each answer; `onInstances(list)` once
 * they are up; `signal` stops the buyers (the run then rejects with its reason).
 * @param {ScenarioOptions} options
 * @returns {Promise<ScenarioResult>}
 */
export async function runScenario({
  zkConnect,
  workDir,
  locks = true,
  instances: count = 3,
  buyers = 600,
  seats = 100,
  concurrency = 50,
  lockWaitMs,
  basePath,
  minTicks = 5,
  env = {},
  signal,
  label = locks ? 'locks-on' : 'locks-off',
  onProgress = (_progress) => undefined,
  onInstances = (_instances) => undefined,
  takeover = false,
  onTakeover = (_leader) => undefined,
}) {
  const dir = join(workDir, label);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const databaseFile = join(dir, 'tickets.db');
  const started = Date.now();
  const instances = await startInstances({ count, zkConnect, databaseFile, logDir: dir, locks, lockWaitMs, basePath, env });
  try {
    onInstances(instances);
    const firstTick = tickOf() + 1; // every instance is up for all of this tick
    const created = await http('POST', `${instances[0].url}/events`, { name: 'The Sold-Out Show', seats });
    if (created.status !== 201) throw new Error(`could not create the event: ${created.status} ${JSON.stringify(created.body)}`);
    const eventId = created.body.id;

    const counts = { 201: 0, 409: 0, 410: 0, other: 0 };
    const latencies = [];
    const otherSamples = [];
    let next = 0;
    let done = 0;
    let lockSnapshot;
    let snapshotting;
    const saleStarted = performance.now();
    const worker = async () => {
      while (next < buyers && !signal?.aborted) {
        const i = next++;
        const instance = instances[i % instances.length];
        const t0 = performance.now();
        let status;
        try {
          const answer = await http('POST', `${instance.url}/events/${eventId}/purchase`, { quantity: 1, buyer: `buyer-${i + 1}` });
          status = answer.status;
          if (!(status in counts) && otherSamples.length < 5) otherSamples.push(`${status} ${JSON.stringify(answer.body)}`);
        } catch (error) {
          status = 'error';
          if (otherSamples.length < 5) otherSamples.push(String(error));
        }
        latencies.push(performance.now() - t0);
        counts[status in counts ? status : 'other']++;
        done++;
        // Once, early in the sale: who holds and who waits, as an instance reads it from ZooKeeper.
        if (!snapshotting && done >= Math.max(1, Math.floor(Math.min(buyers, seats) / 5))) {
          const from = instances[1 % instances.length];
          snapshotting = getJson(`${from.url}/locks`).then(
            (body) => (lockSnapshot = { from: from.name, ...body }),
            (error) => (lockSnapshot = { from: from.name, error: String(error) }),
          );
        }
        onProgress({ done, total: buyers, counts });
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, buyers) }, worker));
    const saleMs = performance.now() - saleStarted;
    await snapshotting;
    signal?.throwIfAborted();

    // Enough whole ticks with every instance up, then what the cron job did in them.
    while (tickOf() < firstTick + minTicks) await sleep(100, undefined, { signal });
    const lastTick = tickOf() - 1;
    const event = await getJson(`${instances[0].url}/events/${eventId}`);
    const { ticks } = await getJson(`${instances[0].url}/jobs/cron-runs?since=${firstTick}`);
    const window = ticks.filter((t) => t.tick <= lastTick);
    const report = await getJson(`${instances[0].url}/jobs/sales-report`);
    // The leader-only job exists with locks only (LOCKS=off registers neither it nor its election).
    let takeoverResult;
    let takeoverError;
    if (takeover && locks && instances.length > 1) {
      try {
        takeoverResult = await leaderTakeover(instances, { sinceTick: firstTick, signal, onStop: onTakeover });
      } catch (error) {
        if (signal?.aborted) throw error;
        takeoverError = String(error); // the sale's figures stand on their own
      }
    }
    latencies.sort((a, b) => a - b);
    return {
      label,
      locks,
      instances: instances.map(({ name, pid, port }) => ({ name, pid, port })),
      buyers,
      concurrency,
      seats: event.seats,
      sold: event.sold,
      oversold: event.oversold,
      ok: counts[201],
      conflict: counts[409],
      soldOut: counts[410],
      other: counts.other,
      otherSamples,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      saleMs,
      cron: {
        ticksInWindow: lastTick - firstTick + 1,
        ticksObserved: window.length,
        maxRunsPerTick: Math.max(0, ...window.map((t) => t.runs)),
        ticks: window,
      },
      reportRebuilds: report.rebuilds.length,
      lockSnapshot,
      ...(takeoverResult ? { takeover: takeoverResult } : {}),
      ...(takeoverError ? { takeoverError } : {}),
      logDir: dir,
      totalMs: Date.now() - started,
    };
  } finally {
    await stopInstances(instances);
  }
}

/**
 * The leader of `election` among running `instances`, stopped gracefully, and how long until
 * another instance leads. Finds the leader with GET /locks (the election's holder: its node's
 * data, the participant id, tells its pid), waits until `phaseMs` into a second (the leader has
 * run that tick), sends it SIGTERM (Nest's shutdown hooks: the instance leaves its elections
 * before its session closes), and polls GET /locks on every survivor every `everyMs` until one
 * names another leader. The takeover happened after the sending of the last poll that still named
 * the old leader and before the first answer naming the successor.
 * Then watches `ticksAfter` more whole ticks and reads the job's runs per tick from `sinceTick`
 * on. Leaves the survivors running; the stopped instance has exited when this resolves.
 * @param {Instance[]} instances
 * @param {TakeoverOptions} [options]
 * @returns {Promise<TakeoverResult>}
 */
export async function leaderTakeover(
  instances,
  {
    election = 'jobs:housekeeping',
    job = 'housekeeping',
    sinceTick = tickOf() - 5,
    ticksAfter = 3,
    phaseMs = 300,
    everyMs = 10,
    inFlight = 2,
    timeoutMs = 30_000,
    signal,
    onStop = (_leader) => undefined,
  } = {},
) {
  // A latch node's data is its participant id (Curator's layout): `<host>:<pid>` by default,
  // which inspect() reports as `{ host }`; JSON holder data or an id set to the instance's name
  // would name it directly.
  const instanceOf = (/** @type {LockContender['holder'] | undefined} */ holder) => {
    if (!holder) return undefined;
    const named = instances.find((i) => i.name === holder.instance || i.name === holder.host);
    if (named) return named;
    const pid = holder.pid ?? Number(/:(\d+)(?:#\d+)?$/.exec(holder.host ?? '')?.[1]);
    return instances.find((i) => i.pid === pid);
  };
  /** @param {any} body GET /locks */
  const leaderIn = (body) => {
    const lock = /** @type {LockView[] | undefined} */ (body?.locks)?.find((l) => l.name === election && l.kind === 'leadership');
    const instance = instanceOf(lock?.holders[0]?.holder);
    if (!lock || !instance) return undefined;
    return { name: instance.name, pid: instance.pid, participants: lock.holders.length + lock.waiting.length };
  };

  // The leader, once every instance takes part.
  const from = instances[0];
  const deadline = performance.now() + timeoutMs;
  let found;
  for (;;) {
    const body = await getJson(`${from.url}/locks`);
    const seen = leaderIn(body);
    if (seen && seen.participants >= instances.length) {
      found = seen;
      break;
    }
    if (performance.now() > deadline) throw new Error(`GET /locks on ${from.name}: no leader of ${election} among all ${instances.length} instances within ${timeoutMs} ms (last: ${JSON.stringify(body.locks?.find((l) => l.name === election))})`);
    await sleep(100, undefined, { signal });
  }
  const leader = /** @type {Instance} */ (instances.find((i) => i.name === found.name));
  const survivors = instances.filter((i) => i !== leader);

  // SIGTERM `phaseMs` into a second: the leader has run this tick, the next is a second away.
  await sleep((phaseMs - (Date.now() % 1000) + 1000) % 1000, undefined, { signal });
  onStop(leader);
  const stopTick = tickOf();
  const stopPhaseMs = Date.now() % 1000;
  const t0 = performance.now();
  const stopping = stopInstances([leader]); // SIGTERM now (SIGKILL if it has not exited in 10 s)
  /** @type {number | string | null} */
  let exit = null;
  let exitMs = NaN;
  void leader.exited.then((how) => {
    exit = how;
    exitMs = performance.now() - t0;
  });

  /** @type {{ name: string, pid: number } | undefined} */
  let successor;
  let takeoverMs;
  let lastOldMs = 0;
  /** @type {number[]} */
  const answerTimes = [];
  // One GET /locks per survivor every `everyMs` (at most `inFlight` unanswered): the takeover
  // came after the sending of any poll that still named the old leader, and before the answer of
  // any that named another. An answer takes a few round trips, so several overlap.
  const poll = async (/** @type {Instance} */ survivor) => {
    const pending = new Set();
    const ask = async () => {
      const sent = performance.now() - t0;
      let seen;
      try {
        const { status, body } = await http('GET', `${survivor.url}/locks`, undefined, 5000);
        if (status === 200) seen = leaderIn(body);
      } catch {
        // a slow or failed answer: the next poll asks again
      }
      const answered = performance.now() - t0;
      answerTimes.push(answered - sent);
      if (seen?.name === leader.name) lastOldMs = Math.max(lastOldMs, sent);
      else if (seen && (takeoverMs === undefined || answered < takeoverMs)) {
        successor = { name: seen.name, pid: seen.pid };
        takeoverMs = answered;
      }
    };
    while (!successor && performance.now() - t0 < timeoutMs) {
      signal?.throwIfAborted();
      if (pending.size < inFlight) {
        const asking = ask().finally(() => pending.delete(asking));
        pending.add(asking);
      }
      await sleep(everyMs);
    }
    await Promise.all(pending); // their answers can still narrow the interval
  };
  await Promise.all(survivors.map(poll));
  await stopping;

  // `ticksAfter` whole ticks after the stop, then the job's runs per tick (shared database).
  while (tickOf() - 1 < stopTick + ticksAfter) await sleep(100, undefined, { signal });
  const lastTick = tickOf() - 1;
  const ran = /** @type {TickRuns[]} */ ((await getJson(`${survivors[0].url}/jobs/cron-runs?job=${encodeURIComponent(job)}&since=${sinceTick}`)).ticks);
  /** @type {TickRuns[]} */
  const ticks = [];
  for (let tick = sinceTick; tick <= lastTick; tick++) ticks.push(ran.find((t) => t.tick === tick) ?? { tick, runs: 0, instances: [] });
  const alone = (/** @type {TickRuns} */ t, /** @type {string} */ name) => t.runs === 1 && t.instances[0] === name;
  return {
    election,
    job,
    leader: { name: leader.name, pid: found.pid },
    seenBy: from.name,
    participants: found.participants,
    stopTick,
    stopPhaseMs,
    exit,
    exitMs,
    successor,
    timeoutMs,
    takeoverMs,
    lastOldMs,
    survivors: survivors.length,
    everyMs,
    polls: answerTimes.length,
    answerMs: percentile(answerTimes.sort((a, b) => a - b), 50),
    ticks,
    leaderTicks: ticks.filter((t) => t.tick <= stopTick && alone(t, leader.name)).length,
    missed: ticks.filter((t) => t.runs === 0).map((t) => t.tick),
    doubled: ticks.filter((t) => t.runs > 1),
    firstSuccessorTick: successor ? ticks.find((t) => t.tick > stopTick && t.instances.includes(/** @type {{ name: string }} */ (successor).name))?.tick : undefined,
  };
}

/**
 * A one-line progress bar (for stderr).
 * @param {Progress} progress
 * @returns {string}
 */
export function progressBar({ done, total, counts }, width = 30) {
  const filled = Math.round((done / total) * width);
  const bar = '█'.repeat(filled) + '░'.repeat(width - filled);
  return `[${bar}] ${String(done).padStart(String(total).length)}/${total}  201:${counts[201]} 409:${counts[409]} 410:${counts[410]} other:${counts.other}`;
}

/**
 * Summarises a GET /locks snapshot in one line.
 * @param {LockSnapshot | undefined} snapshot
 * @returns {string}
 */
export function describeLockSnapshot(snapshot) {
  if (!snapshot) return 'no snapshot';
  if (snapshot.error) return `GET /locks on ${snapshot.from} failed: ${snapshot.error}`;
  // The shape of LockService.inspect(): holders and waiting, each with the data its owner wrote.
  const lock = /** @type {LockView[]} */ (snapshot.locks).find((l) => l.name.startsWith('event:') && l.holders.length > 0);
  if (!lock) return `GET /locks on ${snapshot.from}: no event lock held at that moment`;
  const per = {};
  for (const w of lock.waiting) per[w.holder.instance] = (per[w.holder.instance] ?? 0) + 1;
  const waiting = Object.entries(per)
    .sort()
    .map(([name, n]) => `${n} from ${name}`)
    .join(', ');
  const { holder } = lock.holders[0];
  return `GET /locks on ${snapshot.from} mid-sale: ${lock.path} held by ${holder.instance} (pid ${holder.pid}), ${lock.waiting.length} waiting${waiting ? ` (${waiting})` : ''}`;
}

const ms = (value) => (Number.isFinite(value) ? value.toFixed(value < 100 ? 1 : 0) : '-');

/**
 * The runs side by side, as a Markdown table (aligned, so it reads in a terminal too).
 * @param {ScenarioResult[]} runs
 * @returns {string}
 */
export function comparisonTable(runs) {
  const first = runs[0];
  const header = [`${first.instances.length} instances, ${first.buyers} buyers × 1 seat`, ...runs.map((r) => (r.locks ? 'with @WithLock' : 'LOCKS=off'))];
  const rows = [
    ['seats', ...runs.map((r) => r.seats)],
    ['sold', ...runs.map((r) => r.sold)],
    ['oversold', ...runs.map((r) => r.oversold)],
    ['409 lock busy (retry later)', ...runs.map((r) => r.conflict)],
    ['410 sold out', ...runs.map((r) => r.soldOut)],
    ['other errors', ...runs.map((r) => r.other)],
    ['latency p50 / p99 (ms)', ...runs.map((r) => `${ms(r.p50)} / ${ms(r.p99)}`)],
    ['cron runs per tick (max)', ...runs.map((r) => r.cron.maxRunsPerTick)],
    ['cron ticks observed', ...runs.map((r) => `${r.cron.ticksObserved} of ${r.cron.ticksInWindow}`)],
  ].map((row) => row.map(String));
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((row) => row[c].length)));
  const line = (cells) => `| ${cells.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join(' | ')} |`;
  const rule = `|${widths.map((w, c) => (c === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

/**
 * One sentence on what the runs show.
 * @param {ScenarioResult[]} runs
 * @returns {string}
 */
export function verdict(runs) {
  const on = runs.find((r) => r.locks);
  const off = runs.find((r) => !r.locks);
  const parts = [];
  if (on) {
    parts.push(
      on.oversold === 0 && on.sold <= on.seats
        ? `with locks ${on.sold} of ${on.seats} seats sold, none oversold, the cron job ran at most ${on.cron.maxRunsPerTick}× per tick`
        : `WITH LOCKS ${on.oversold} SEATS OVERSOLD (a bug)`,
    );
  }
  if (off) {
    parts.push(
      off.oversold > 0
        ? `without them ${off.sold} sold for ${off.seats} seats (${off.oversold} oversold) and the job ran up to ${off.cron.maxRunsPerTick}× per tick`
        : `without them nothing was oversold this time (the race is real but was not hit; try more buyers)`,
    );
  }
  return `Verdict: ${parts.join('; ')}.`;
}

/**
 * Runs of consecutive ticks by the same instance(s), e.g. "9 by instance-2, then 4 by instance-1".
 * @param {TickRuns[]} ticks
 * @returns {string}
 */
function tickStretches(ticks) {
  /** @type {{ label: string, n: number }[]} */
  const stretches = [];
  for (const t of ticks) {
    const label = t.runs === 0 ? 'by nobody' : `by ${t.instances.join(' + ')}`;
    const lastStretch = stretches[stretches.length - 1];
    if (lastStretch?.label === label) lastStretch.n++;
    else stretches.push({ label, n: 1 });
  }
  return stretches.map(({ label, n }, i) => `${i === 0 ? '' : i === stretches.length - 1 ? 'then ' : ''}${n} ${label}`).join(', ');
}

/**
 * What leaderTakeover() saw, in three lines: the leader, the takeover, the job's ticks.
 * @param {TakeoverResult} t
 * @returns {string}
 */
export function describeTakeover(t) {
  const before = t.ticks.filter((tick) => tick.tick <= t.stopTick);
  const elsewhere = before.filter((tick) => tick.instances.some((name) => name !== t.leader.name));
  const agree =
    elsewhere.length > 0
      ? `but per the cron runs ${elsewhere.length} of the ${before.length} ${t.job} ticks so far ran elsewhere (${tickStretches(before)})`
      : t.leaderTicks === before.length
        ? `and per the cron runs (it ran all ${before.length} ${t.job} ticks so far)`
        : `and per the cron runs (${t.leaderTicks} of the ${before.length} ${t.job} ticks so far ran on it once, none elsewhere)`;
  // Nest re-raises the signal once its shutdown hooks are done: a SIGTERM exit is the graceful one.
  const exited =
    t.exit === 'SIGTERM' || t.exit === 0
      ? `it exited ${Math.round(t.exitMs)} ms later`
      : t.exit === 'SIGKILL'
        ? `it had NOT EXITED after ${Math.round(t.exitMs / 1000)} s and was killed`
        : `it exited (${t.exit}) ${Math.round(t.exitMs)} ms later`;
  const stop = `Stopped it (SIGTERM ${t.stopPhaseMs} ms after a tick: Nest's shutdown hooks leave the election before the session closes; ${exited})`;
  // An upper bound: the first answer naming the successor; GET /locks takes a few round trips.
  const asked = `GET /locks asked of the ${t.survivors === 1 ? 'survivor' : 'survivors'} every ${t.everyMs} ms, ~${Math.round(t.answerMs)} ms per answer`;
  const stillOld = t.lastOldMs >= 1 ? `; one sent at ${Math.round(t.lastOldMs)} ms still named ${t.leader.name}` : '';
  const took = t.successor
    ? `${t.successor.name} (pid ${t.successor.pid}) took over within ${Math.round(/** @type {number} */ (t.takeoverMs))} ms of the SIGTERM (${asked}${stillOld})`
    : `NO OTHER INSTANCE LED within ${t.timeoutMs / 1000} s (${asked})`;
  const fine = t.missed.length === 0 && t.doubled.length === 0;
  const relative = (/** @type {number} */ tick) => `stop${tick - t.stopTick < 0 ? '' : '+'}${tick - t.stopTick}`;
  const problems = [
    t.missed.length === 0 ? 'none missed' : `${t.missed.length} missed (${t.missed.map((tick) => `tick ${relative(tick)}`).join(', ')})`,
    t.doubled.length === 0
      ? 'none doubled'
      : `${t.doubled.length} DOUBLED (${t.doubled.map((tick) => `tick ${relative(tick.tick)}: ${tick.instances.join(' + ')}`).join(', ')})`,
  ].join(', ');
  const Job = `${t.job[0].toUpperCase()}${t.job.slice(1)}`;
  return [
    `Leader of ${t.election}: ${t.leader.name} (pid ${t.leader.pid}), per GET /locks on ${t.seenBy} (${t.participants} participants) ${agree}.`,
    `${stop}: ${took}.`,
    `${fine ? `${Job} ran once per tick throughout` : Job}: ${t.ticks.length} ticks, ${tickStretches(t.ticks)}; ${problems}.`,
  ].join('\n');
}

/**
 * The leader part of the runs: the takeover of the run with locks, and why LOCKS=off has none.
 * @param {ScenarioResult[]} runs
 * @returns {string}
 */
export function leaderReport(runs) {
  const lines = [];
  for (const run of runs) {
    if (run.takeover) lines.push(describeTakeover(run.takeover));
    else if (run.takeoverError) lines.push(`Leader of jobs:housekeeping: NOT MEASURED: ${run.takeoverError}`);
    else if (run.locks && run.instances.length < 2) lines.push('One instance: no one to take over from the leader of jobs:housekeeping.');
    else if (!run.locks) {
      lines.push(
        'LOCKS=off: no leader to stop: that run registers neither the election nor the housekeeping job ' +
          `(a per-second job without a lock or a leader runs on every instance each tick: up to ${run.cron.maxRunsPerTick}× for the snapshot job above).`,
      );
    }
  }
  return lines.join('\n');
}
