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
 */
/** @typedef {{ 201: number, 409: number, 410: number, other: number }} Counts */
/** @typedef {{ done: number, total: number, counts: Counts }} Progress */
/**
 * One contender of GET /locks (a ContenderInfo of LockService.inspect(), as JSON).
 * @typedef {object} LockContender
 * @property {string} node
 * @property {string} path
 * @property {'lock' | 'read' | 'write' | 'lease' | 'other'} mode
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
 * @property {'mutex' | 'read-write' | 'semaphore' | 'idle'} kind
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
export async function startInstances({ count, names, zkConnect, databaseFile, logDir, locks = true, lockWaitMs, basePath, env = {}, readyTimeoutMs = 90_000 }) {
  mkdirSync(logDir, { recursive: true });
  const starts = [];
  for (const name of names ?? Array.from({ length: count ?? 0 }, (_, i) => `instance-${i + 1}`)) {
    const logFile = join(logDir, `${name}.log`);
    const log = createWriteStream(logFile, { flags: 'a' });
    const child = spawn(process.execPath, [MAIN], {
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
      logDir: dir,
      totalMs: Date.now() - started,
    };
  } finally {
    await stopInstances(instances);
  }
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
