// A benchmark agent: one Node process with one ZooKeeper connection (and, if asked, one ioredis
// client) that runs workloads on command from bench/run.mjs. Commands and replies are JSON lines
// on stdin/stdout, one command at a time, replies in order; nothing else goes to stdout.
//
//   node --expose-gc bench/agent.mjs '{"zk":"127.0.0.1:2181","redisPort":6379,"name":"main"}'
//
// Every lock workload checks itself with a non-atomic counter: inside the lock a worker reads the
// counter, yields two event-loop turns, and writes it + 1. Two holders at once lose an
// update, so the final value must equal the number of acquisitions. The counter is a variable of
// this process ("mem") or an 8-byte file in /dev/shm shared with other processes.
// The leader-election commands (one participant per agent) are in agent-election.mjs.
import { closeSync, openSync, readFileSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { Session as InspectorSession } from 'node:inspector';
import { createInterface } from 'node:readline';
import { setImmediate as immediate, setTimeout as sleep } from 'node:timers/promises';
import { CreateMode, LockEngine, Mutex, ReadWriteLock, SECURE_PARENT_ACL, Semaphore, ZkConnection } from '../dist/index.js';
import { electionCommands } from './agent-election.mjs';
import { keyCommands } from './agent-keys.mjs';
import { bigQueueCommands } from './agent-bigqueue.mjs';
import { TcpProxy } from '../scripts/support/tcp-proxy.mjs';
import { mntr, notificationsIn } from './support.mjs';

/** `client`: ZkConnection's option (undefined: its default, the TypeScript client; 'addon': the C client). */
const config = JSON.parse(process.argv[2] ?? '{}');
const ZK = config.zk;
const SESSION_TIMEOUT_MS = 10_000;

// ---------------------------------------------------------------------------------------------
// Connections

/**
 * Every connection of this agent uses the agent's client (`config.client`).
 * @param {import('../dist/index.js').ZkAuth} [auth]
 */
async function openConnection(sessionTimeoutMs = SESSION_TIMEOUT_MS, auth = undefined, connectString = ZK) {
  const connection = new ZkConnection({ connectString, sessionTimeoutMs, auth, client: config.client });
  await connection.connect();
  return connection;
}

const connection = await openConnection();
const engine = new LockEngine(connection, { app: 'bench' });
engine.onWarning((message) => process.stderr.write(`warning: ${message}\n`));

/**
 * The `ours-auth` peer's own session, set up as ZkLockModule does when `auth` is given: digest
 * credentials on the session, and SECURE_PARENT_ACL (the module's default with `auth`) on what
 * the engine creates. Opened on first use.
 * @type {{ connection: ZkConnection, engine: LockEngine } | undefined}
 */
let authed;
async function authedEngine() {
  if (!authed) {
    const c = await openConnection(SESSION_TIMEOUT_MS, { scheme: 'digest', credentials: 'bench:secret' });
    authed = { connection: c, engine: new LockEngine(c, { app: 'bench', parentAcl: SECURE_PARENT_ACL }) };
  }
  return authed;
}

/** @type {import('ioredis').Redis | undefined} */
let redis;
async function redisClient() {
  if (!config.redisPort) throw new Error('no redis-server in this run');
  if (!redis) {
    const { Redis } = await import('ioredis');
    redis = new Redis({ host: '127.0.0.1', port: config.redisPort, lazyConnect: true, enableAutoPipelining: false });
    await redis.connect();
  }
  return redis;
}

/** A pool of extra connections (one session per W4 waiter), opened on demand. */
const pool = [];
async function poolOf(size) {
  while (pool.length < size) {
    const batch = await Promise.all(Array.from({ length: Math.min(16, size - pool.length) }, () => openConnection(30_000)));
    for (const c of batch) pool.push({ connection: c, engine: new LockEngine(c, { app: 'bench' }) });
  }
  return pool.slice(0, size);
}
async function closePool() {
  for (const { connection: c, engine: e } of pool.splice(0)) {
    await e.drain();
    await c.close();
  }
}

// ---------------------------------------------------------------------------------------------
// The non-atomic counter

function openCounter(spec) {
  if (spec === 'mem') {
    const values = new Map();
    return {
      read: (slot = 0) => values.get(slot) ?? 0,
      write: (v, slot = 0) => values.set(slot, v),
      total: () => [...values.values()].reduce((a, b) => a + b, 0),
      close: () => undefined,
    };
  }
  const fd = openSync(spec, 'r+');
  const buf = Buffer.alloc(8);
  return {
    read: (slot = 0) => {
      readSync(fd, buf, 0, 8, slot * 8);
      return Number(buf.readBigInt64LE(0));
    },
    write: (v, slot = 0) => {
      buf.writeBigInt64LE(BigInt(v), 0);
      writeSync(fd, buf, 0, 8, slot * 8);
    },
    total: () => {
      const all = readFileSync(spec);
      let sum = 0;
      for (let i = 0; i + 8 <= all.length; i += 8) sum += Number(all.readBigInt64LE(i));
      return sum;
    },
    close: () => closeSync(fd),
  };
}

/**
 * Two event-loop turns between the read and the write: replies are read in the poll phase, so
 * with a single setImmediate the read (poll phase) and the write (check phase) could fall in the
 * same loop iteration and an unlocked run pass (checked with the `none` peer, when the addon
 * delivered one reply per poll phase; since fix version 8 it delivers every reply the socket
 * holds, each continuation still running in turn). The second turn lets a poll phase run between.
 */
function yieldTurns() {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}

/** Read, yield, write: without exclusion between two bumps of one slot, an update is lost. */
async function bump(counter, slot = 0) {
  const v = counter.read(slot);
  await yieldTurns();
  counter.write(v + 1, slot);
}

// ---------------------------------------------------------------------------------------------
// The peers: each makes one worker's lock with acquire() → handle and release(handle)

const EMPTY = Buffer.alloc(0);

/** Makes `path` and its ancestors as persistent nodes (for the peers that do not use containers). */
async function ensurePath(session, path) {
  let at = '';
  for (const part of path.split('/').filter(Boolean)) {
    at += `/${part}`;
    try {
      await session.create(at, EMPTY, CreateMode.PERSISTENT);
    } catch (error) {
      if (error?.codeName !== 'NODEEXISTS' && error?.code !== -110) throw error;
    }
  }
}

/**
 * The "herd" lock of blog posts: a sequential ephemeral node, then getChildren with a watch on
 * the parent; the lowest sequence holds, everyone else waits for any change of the children and
 * looks again. Every waiter wakes on every change.
 */
function herdLock(session, path) {
  return {
    async acquire() {
      const me = await session.create(`${path}/herd-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL);
      const name = me.slice(path.length + 1);
      for (;;) {
        let wake;
        const changed = new Promise((resolve) => (wake = resolve));
        const { children } = await session.getChildren(path, () => wake());
        children.sort();
        if (children[0] === name) return me;
        await changed;
      }
    },
    release: (me) => session.delete(me),
  };
}

/** W5's keys: distinct lock paths, picked uniformly at random. */
const KEYS = 10_000;
/**
 * W5's key paths: 10 000 for our one-process peer (W5), 10 000 for four processes (W5x4) and
 * 10 000 for the raw-keys peer. Not shared with the raw-keys peer: its nodes in our paths would be
 * another process using our keys between our rounds (each costs our next acquire there its
 * listing). ZooKeeper's reaper takes from all of them alike.
 */
const keysBase = (path) => path.replace(/\/(W5(x4)?)-([^/]+)$/, (_, workload, _x4, peer) => `/${workload}-${peer === 'raw-keys' ? 'rawkeys' : 'keys'}`);
/** The raw-keys peer's base paths whose 10 000 key paths are made. */
const rawKeyPaths = new Set();
const unlessExists = (error) => (error?.codeName === 'NODEEXISTS' ? undefined : Promise.reject(error));

/** The `ours-retain` peer's retainMs: longer than any pause between two cycles of one worker. */
const RETAIN_MS = 1000;

/**
 * The `ours-traced` peer: `ours` with the OpenTelemetry SDK registered (NodeTracerProvider, a
 * BatchSpanProcessor, an exporter that counts the spans and drops them: the library's cost and the
 * SDK's, not an exporter's I/O), for its rounds only. Every other peer runs with no tracer provider
 * (tracing off: the API is installed here, as a devDependency).
 * @type {{ provider: any, api: any, exporter: { spans: number } } | undefined}
 */
let tracing;
async function withTracing(run) {
  if (!tracing) {
    const [api, { NodeTracerProvider }, { BatchSpanProcessor }] = await Promise.all([
      import('@opentelemetry/api'),
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/sdk-trace-base'),
    ]);
    const exporter = { spans: 0, export(spans, done) { this.spans += spans.length; done({ code: 0 }); }, shutdown: async () => {} };
    tracing = { api, exporter, provider: new NodeTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter)] }) };
  }
  tracing.provider.register();
  try {
    return await run();
  } finally {
    await tracing.provider.forceFlush();
    tracing.api.trace.disable();
    tracing.api.context.disable();
    tracing.api.propagation.disable();
  }
}

async function makePeer(peer, path, on = { connection, engine }) {
  const session = on.connection.session;
  if (!session) throw new Error('not connected');
  switch (peer) {
    case 'ours':
    case 'ours-traced':
    case 'ours-fifo':
    case 'ours-retain':
    case 'ours-bg':
    case 'ours-auth': {
      const options = {
        coalesce: peer !== 'ours-fifo',
        retainMs: peer === 'ours-retain' ? RETAIN_MS : 0,
        releaseInBackground: peer === 'ours-bg',
      };
      let lockEngine = on.engine;
      if (peer === 'ours-auth') {
        // Ancestors made open here, so that only this lock's own nodes carry the ACL (the other
        // workloads' sessions, without credentials, keep creating under the same base path).
        await ensurePath(session, path.slice(0, path.lastIndexOf('/')));
        lockEngine = (await authedEngine()).engine;
      }
      return () => {
        const mutex = new Mutex(lockEngine, path, path, options);
        return { acquire: () => mutex.acquire(), release: (lease) => lease.release() };
      };
    }
    case 'ours-keys': {
      path = keysBase(path);
      // W5: every acquisition picks one of KEYS locks at random (uniform), each its own lock path.
      const mutexes = new Map();
      const mutexOf = (key) => {
        let mutex = mutexes.get(key);
        if (!mutex) mutexes.set(key, (mutex = new Mutex(on.engine, `${path}/k${key}`, `${path}/k${key}`)));
        return mutex;
      };
      // One counter slot per key (COUNTER_SLOTS ≥ KEYS): exclusion is checked per key.
      const acquireKey = async (key) => ({ key, lease: await mutexOf(key).acquire() });
      return () => ({
        acquire: () => acquireKey(Math.floor(Math.random() * KEYS)),
        acquireKey,
        release: (handle) => handle.lease.release(),
        slot: (handle) => handle.key,
      });
    }
    case 'herd':
      await ensurePath(session, path);
      return () => herdLock(session, path);
    case 'redis': {
      const { Mutex: RedisMutex } = await import('redis-semaphore');
      const client = await redisClient();
      // Library defaults (SET NX PX, poll every 10 ms) except a longer acquire timeout, so
      // that a starved worker waits instead of failing the run.
      return () => {
        const mutex = new RedisMutex(client, `bench:${path}`, { acquireTimeout: 300_000 });
        return { acquire: () => mutex.acquire(), release: () => mutex.release() };
      };
    }
    case 'raw-keys': {
      // W5's requests without the library: over the same 10 000 container paths (made before the
      // rounds, and again when ZooKeeper's reaper took one), a protected-name sequential node with
      // the same holder data and its listing in one round trip, then its delete. No waiting and
      // no exclusion (not a lock: a floor for the three requests every lock of this layout makes).
      path = keysBase(path);
      await ensurePath(session, path);
      if (!rawKeyPaths.has(path)) {
        for (let i = 0; i < KEYS; i += 500) {
          await Promise.all(Array.from({ length: 500 }, (_, j) => session.create(`${path}/k${i + j}`, EMPTY, CreateMode.CONTAINER).catch(unlessExists)));
        }
        rawKeyPaths.add(path);
      }
      return () => ({
        acquire: async () => {
          const key = `${path}/k${Math.floor(Math.random() * KEYS)}`;
          for (;;) {
            const created = session.create(`${key}/_c_${randomUUID()}-lock-`, on.engine.nodeData(), CreateMode.EPHEMERAL_SEQUENTIAL);
            const listed = session.getChildren(key);
            listed.catch(() => undefined);
            try {
              const node = await created;
              await listed;
              return node;
            } catch (error) {
              if (error?.codeName !== 'NONODE') throw error;
              await session.create(key, EMPTY, CreateMode.CONTAINER).catch(unlessExists);
            }
          }
        },
        release: (node) => session.delete(node),
        noLock: true,
      });
    }
    case 'raw':
      await ensurePath(session, path);
      return () => ({
        acquire: () => session.create(`${path}/raw-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL).then((p) => session.delete(p)),
        release: () => undefined,
        noLock: true,
      });
    case 'none':
      // Negative control for the counter check: no lock at all (must fail the check).
      return () => ({ acquire: () => session.exists(path), release: () => undefined });
    case 'exists':
      await ensurePath(session, path);
      return () => ({ acquire: () => session.exists(path), release: () => undefined, noLock: true });
    default:
      throw new Error(`unknown peer ${peer}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Workloads

/** V8's sampling profiler over one measured window only (not start-up), 100 µs interval. */
async function startProfiler() {
  const session = new InspectorSession();
  session.connect();
  const post = (method, params) => new Promise((resolve, reject) => session.post(method, params, (e, r) => (e ? reject(e) : resolve(r))));
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 100 });
  await post('Profiler.start');
  return {
    async stop() {
      const { profile } = await post('Profiler.stop');
      session.disconnect();
      return profile;
    },
  };
}

async function untilEpoch(t) {
  const wait = t - Date.now();
  if (wait > 0) await sleep(wait);
}

function cpuMsSince(start) {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1000;
}

/**
 * W1/W2/W3 and the raw peers: `workers` loops from t0 until t1 (epoch ms), each acquiring,
 * bumping the counter and releasing. Reports acquisitions (all, and those returned before t1),
 * acquire latencies (ms) of the in-window ones, per-worker counts and this process's CPU time.
 */
async function timedRun({ peer, workers, path, t0, t1, counter: counterSpec = 'mem', maxSamples = 50_000, profile }) {
  const factory = await makePeer(peer, path);
  const locks = Array.from({ length: workers }, () => factory());
  const counter = locks[0].noLock ? undefined : openCounter(counterSpec);
  const perWorker = new Array(workers).fill(0);
  const lat = [];
  const errors = [];
  let inWindow = 0;
  const profiler = profile ? await startProfiler() : undefined;
  await untilEpoch(t0);
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    locks.map(async (lock, w) => {
      try {
        while (Date.now() < t1) {
          const s = performance.now();
          const handle = await lock.acquire();
          const e = performance.now();
          perWorker[w]++;
          if (Date.now() < t1) {
            inWindow++;
            if (lat.length < maxSamples) lat.push(Math.round((e - s) * 1000) / 1000);
          }
          if (counter) await bump(counter, lock.slot?.(handle) ?? 0);
          await lock.release(handle);
        }
      } catch (error) {
        errors.push(String(error?.stack ?? error));
      }
    }),
  );
  const elapsedMs = performance.now() - started;
  const cpuMs = cpuMsSince(cpu);
  if (profiler) writeFileSync(profile, JSON.stringify(await profiler.stop()));
  const value = counter && counterSpec === 'mem' ? counter.total() : -1;
  counter?.close();
  await engine.drain();
  await authed?.engine.drain();
  return { acquired: perWorker.reduce((a, b) => a + b, 0), inWindow, perWorker, lat, counter: value, cpuMs, elapsedMs, errors };
}

/**
 * W4: `waiters` workers, each on its own session, cycle through one lock holding it `holdMs`.
 * After `warmup` releases the server's counters are read, then `releases` more releases are
 * measured: handoff = the next holder's acquire() returning − the release() call; notifications
 * and requests are the server's counters over those releases. A releasing worker queues again
 * only once the next holder has the lock, so that in this one process its own re-acquire (create
 * and listing) never runs on the measured path (separate processes would not share a CPU).
 */
async function queueRun({ peer, waiters, holdMs, releases, warmup, path }) {
  const members = await poolOf(waiters);
  const locks = [];
  for (const m of members) locks.push((await makePeer(peer, path, m))());
  const counter = openCounter('mem');
  const handoffs = [];
  const errors = [];
  let releaseCount = 0;
  let lastReleaseAt;
  let measuring = false;
  let stop = false;
  let acquired = 0;
  /** @type {Record<string, number> | undefined} */
  let before;
  /** @type {Record<string, number> | undefined} */
  let after;
  let measuredReleases = 0;
  let cpuStart;
  let cpuMs;
  /** @type {(value?: unknown) => void} */
  let handedOff = () => undefined;
  await Promise.all(
    locks.map(async (lock, w) => {
      // Stagger the first arrivals a little so the queue forms in a defined order.
      await sleep(w % 4);
      try {
        for (;;) {
          const handle = await lock.acquire();
          const at = performance.now();
          handedOff();
          acquired++;
          if (measuring && lastReleaseAt !== undefined) handoffs.push(Math.round((at - lastReleaseAt) * 1000) / 1000);
          await bump(counter);
          if (!stop) {
            await sleep(holdMs);
            releaseCount++;
            if (releaseCount === warmup) {
              before = await mntr(ZK);
              cpuStart = process.cpuUsage();
              measuring = true;
            } else if (releaseCount === warmup + releases) {
              after = await mntr(ZK);
              cpuMs = cpuMsSince(cpuStart);
              measuredReleases = releases;
              measuring = false;
              stop = true;
            }
          }
          const next = new Promise((resolve) => (handedOff = resolve));
          lastReleaseAt = performance.now();
          await lock.release(handle);
          if (stop) return;
          if (waiters > 1) await next;
        }
      } catch (error) {
        errors.push(String(error?.stack ?? error));
        stop = true;
        handedOff();
      }
    }),
  );
  for (const m of members) await m.engine.drain();
  const notifications = before && after ? notificationsIn(before, after) : NaN;
  const requests = before && after ? after.zk_packets_received - before.zk_packets_received : NaN;
  return { acquired, counter: counter.read(), handoffs, releases: measuredReleases, notifications, requests, cpuMs, errors };
}

/**
 * ZooKeeper's own floor for a handoff: one session deletes a node, another session in this process
 * hears of it through an exists watch; the time from the delete call to the watch event. Also an
 * `exists` round trip of the watching session. Both after a pause of `idleMs`, as a handoff comes
 * after a hold: how long the process and the server sat idle changes both (here 2 ms of idle gave
 * a 0.52 ms floor, 5 ms 0.80 ms and 10 ms 0.98 ms).
 */
async function notifyFloor({ samples, path, idleMs }) {
  const [a, b] = await poolOf(2);
  const sa = a.connection.session;
  const sb = b.connection.session;
  await ensurePath(sa, path);
  const times = [];
  const exists = [];
  for (let i = 0; i < samples; i++) {
    const node = await sa.create(`${path}/n`, EMPTY, CreateMode.EPHEMERAL);
    let fired;
    const event = new Promise((resolve) => (fired = resolve));
    await sb.exists(node, () => fired(performance.now()));
    await sleep(idleMs);
    const at = performance.now();
    void sa.delete(node);
    times.push(Math.round(((await event) - at) * 1000) / 1000);
    await sleep(idleMs);
    const sent = performance.now();
    await sb.exists(path);
    exists.push(Math.round((performance.now() - sent) * 1000) / 1000);
  }
  return { times, exists };
}

/**
 * The longest the event loop was held between the turns of a 1 ms interval timer (its lateness),
 * from now until stop().
 */
function stallMonitor(everyMs = 1) {
  let last = performance.now();
  let max = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    max = Math.max(max, now - last - everyMs);
    last = now;
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(max, performance.now() - last - everyMs);
    },
  };
}

/**
 * Closing a lost session on a silent link, `samples` times: a connection of this agent's client
 * through a loopback proxy (scripts/support/tcp-proxy.mjs) holds a lock; the proxy goes silent
 * (nothing passes either way, nothing closes); the connection declares the session lost before its
 * deadline and then closes the old handle. Measured: how long that close() call held the event
 * loop (its synchronous part: the C client waits in it for the server's answer to the close), the
 * longest event-loop stall from the silence until `afterMs` after the loss, the same over an
 * equal window of the healthy idle link before, and when the loss came after the silence.
 */
async function closeBlock({ samples, sessionTimeoutMs, path, afterMs = 2000 }) {
  const runs = [];
  for (let i = 0; i < samples; i++) {
    const proxy = await TcpProxy.start(ZK);
    const c = await openConnection(sessionTimeoutMs, undefined, proxy.connectString);
    const e = new LockEngine(c, { app: 'bench' });
    try {
      const lease = await new Mutex(e, `${path}/s${i}`, `${path}/s${i}`).acquire();
      const session = /** @type {NonNullable<typeof c.session>} */ (c.session);
      /** @type {number | undefined} */
      let closeMs;
      const close = session.close.bind(session);
      session.close = () => {
        const started = performance.now();
        try {
          return close();
        } finally {
          closeMs = performance.now() - started;
        }
      };
      const lost = new Promise((resolve) => c.once('lost', () => resolve(performance.now())));
      const idle = stallMonitor();
      await sleep(sessionTimeoutMs);
      const baselineStallMs = idle.stop();
      const silentAt = performance.now();
      const stalls = stallMonitor();
      proxy.blackhole({ holdCloses: true });
      const lostAt = /** @type {number} */ (await lost);
      await sleep(afterMs);
      const maxStallMs = stalls.stop();
      runs.push({ closeMs, maxStallMs, baselineStallMs, lostAfterMs: lostAt - silentAt, leaseAborted: lease.signal.aborted });
    } finally {
      proxy.restore();
      await e.drain().catch(() => undefined);
      await c.close().catch(() => undefined);
      await proxy.close();
    }
  }
  return { runs, client: config.client ?? 'typescript' };
}

/** Holds the lock for `ms` (a timer), or for one event-loop turn when 0. */
function hold(ms) {
  return ms > 0 ? sleep(ms) : immediate();
}

/**
 * Semaphore with `permits`, `workers` loops each holding a lease `holdMs`; checks that never more
 * than `permits` hold at once.
 */
async function semaphoreRun({ permits, workers, path, t0, t1, holdMs = 0 }) {
  const semaphore = new Semaphore(engine, path, path, { permits });
  let inside = 0;
  let maxInside = 0;
  let inWindow = 0;
  let acquired = 0;
  let released = 0;
  const lat = [];
  const errors = [];
  await untilEpoch(t0);
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      try {
        while (Date.now() < t1) {
          const s = performance.now();
          const lease = await semaphore.acquire();
          const e = performance.now();
          acquired++;
          if (Date.now() < t1) {
            inWindow++;
            if (lat.length < 50_000) lat.push(Math.round((e - s) * 1000) / 1000);
          }
          inside++;
          maxInside = Math.max(maxInside, inside);
          await hold(holdMs);
          inside--;
          released++;
          await lease.release();
        }
      } catch (error) {
        errors.push(String(error?.stack ?? error));
      }
    }),
  );
  const cpuMs = cpuMsSince(cpu);
  await engine.drain();
  return { acquired, released, inWindow, maxInside, lat, cpuMs, errors };
}

/**
 * Read-write lock, `readShare` of acquisitions are reads. Writers bump the non-atomic counter
 * (it must equal the write count); readers check that no writer is inside and that the counter
 * does not move while they read.
 */
async function rwRun({ workers, readShare, path, t0, t1, holdMs = 0 }) {
  const rw = new ReadWriteLock(engine, path, path);
  const counter = openCounter('mem');
  let writers = 0;
  let readers = 0;
  let maxReaders = 0;
  let writes = 0;
  let reads = 0;
  let inWindow = 0;
  let violations = 0;
  const lat = { read: [], write: [] };
  const errors = [];
  await untilEpoch(t0);
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      try {
        while (Date.now() < t1) {
          const read = Math.random() < readShare;
          const s = performance.now();
          const lease = await (read ? rw.read : rw.write).acquire();
          const e = performance.now();
          if (Date.now() < t1) {
            inWindow++;
            const l = lat[read ? 'read' : 'write'];
            if (l.length < 50_000) l.push(Math.round((e - s) * 1000) / 1000);
          }
          if (read) {
            reads++;
            readers++;
            maxReaders = Math.max(maxReaders, readers);
            const v = counter.read();
            if (writers > 0) violations++;
            await hold(holdMs);
            if (writers > 0 || counter.read() !== v) violations++;
            readers--;
          } else {
            writes++;
            writers++;
            if (writers > 1 || readers > 0) violations++;
            const v = counter.read();
            await hold(holdMs);
            counter.write(v + 1);
            writers--;
          }
          await lease.release();
        }
      } catch (error) {
        errors.push(String(error?.stack ?? error));
      }
    }),
  );
  const cpuMs = cpuMsSince(cpu);
  await engine.drain();
  return { reads, writes, inWindow, counter: counter.read(), violations, maxReaders, lat, cpuMs, errors };
}

function memory() {
  globalThis.gc?.();
  globalThis.gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external };
}

async function settle() {
  for (let i = 0; i < 5; i++) await immediate();
  await sleep(50);
}

/**
 * The raw peer of scaleLocks: `count` ephemeral nodes, each in its own container path (made in the
 * same round trip), all created at once and held; then all deleted.
 */
async function scaleRaw({ count, base }) {
  const session = connection.session;
  if (!session) throw new Error('not connected');
  await ensurePath(session, base);
  await settle();
  const m0 = memory();
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const nodes = await Promise.all(
    Array.from({ length: count }, (_, i) => {
      const path = `${base}/k${i}`;
      session.create(path, EMPTY, CreateMode.CONTAINER).catch(() => undefined);
      return session.create(`${path}/lock-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL);
    }),
  );
  const acquireMs = performance.now() - t0;
  await settle();
  const m1 = memory();
  const t1 = performance.now();
  await Promise.all(nodes.map((node) => session.delete(node)));
  const releaseMs = performance.now() - t1;
  const cpuMs = cpuMsSince(cpu);
  nodes.length = 0;
  await settle();
  const m2 = memory();
  return { count, acquireMs, releaseMs, m0, m1, m2, cpuMs };
}

/** `count` distinct locks, all held at once by this process; then all released. */
async function scaleLocks({ count, base }) {
  await settle();
  const m0 = memory();
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const counters = new Array(count).fill(0);
  const leases = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const lease = await new Mutex(engine, `${base}/k${i}`, `${base}/k${i}`).acquire();
      const v = counters[i];
      await immediate();
      counters[i] = v + 1;
      return lease;
    }),
  );
  const acquireMs = performance.now() - t0;
  const held = leases.filter((l) => l.isHeld).length;
  const tokens = new Set(leases.map((l) => `${l.path}`)).size;
  await settle();
  const m1 = memory();
  const t1 = performance.now();
  await Promise.all(leases.map((l) => l.release()));
  const releaseMs = performance.now() - t1;
  const cpuMs = cpuMsSince(cpu);
  leases.length = 0;
  await engine.drain();
  await settle();
  const m2 = memory();
  return { count, acquireMs, releaseMs, held, distinctPaths: tokens, counter: counters.reduce((a, b) => a + b, 0), m0, m1, m2, cpuMs };
}

/** `count` acquirers on one lock: one holds while the rest queue; then the queue drains. */
async function scaleWaiters({ count, path }) {
  // One ZooKeeper node per waiter (a queue of `count` nodes), not one per process.
  const mutex = new Mutex(engine, path, path, { coalesce: false });
  const counter = openCounter('mem');
  await settle();
  const m0 = memory();
  const first = await mutex.acquire();
  const t0 = performance.now();
  let done = 0;
  const errors = [];
  const all = Array.from({ length: count - 1 }, async () => {
    try {
      const lease = await mutex.acquire();
      await bump(counter);
      await lease.release();
      done++;
    } catch (error) {
      errors.push(String(error?.stack ?? error));
    }
  });
  // Queued = every node exists (read on the same session, after the creates).
  for (;;) {
    const { children } = await /** @type {NonNullable<typeof connection.session>} */ (connection.session).getChildren(path);
    if (children.length >= count) break;
    await sleep(20);
  }
  const enqueueMs = performance.now() - t0;
  const m1 = memory();
  const cpu = process.cpuUsage();
  const t1 = performance.now();
  await bump(counter);
  await first.release();
  await Promise.all(all);
  const drainMs = performance.now() - t1;
  const cpuMs = cpuMsSince(cpu);
  await engine.drain();
  await settle();
  const m2 = memory();
  return { count, enqueueMs, drainMs, acquired: done + 1, counter: counter.read(), m0, m1, m2, cpuMs, errors };
}

/**
 * Churn: workers mix contended acquires on one hot lock, locks of many names (new Mutex objects,
 * containers made and reaped), tries that fail, waits that time out and semaphore leases. Heap
 * after GC is compared with the heap after a warm-up of the same mix.
 */
async function churn({ seconds, base, workers = 8, sampleEverySeconds = 5 }) {
  const hot = new Mutex(engine, `${base}/hot`, `${base}/hot`);
  const semaphore = new Semaphore(engine, `${base}/sem`, `${base}/sem`, { permits: 2 });
  const counter = openCounter('mem');
  let cycles = 0;
  let hotAcquired = 0;
  let timeouts = 0;
  const errors = [];
  const loop = async (until) => {
    while (performance.now() < until) {
      const r = Math.random();
      try {
        if (r < 0.55) {
          const lease = await hot.acquire();
          hotAcquired++;
          await bump(counter);
          await lease.release();
        } else if (r < 0.75) {
          const name = `${base}/n${Math.floor(Math.random() * 256)}`;
          await new Mutex(engine, name, name).withLock(() => immediate());
        } else if (r < 0.85) {
          const lease = await hot.tryAcquire();
          if (lease) {
            hotAcquired++;
            await bump(counter);
            await lease.release();
          }
        } else if (r < 0.92) {
          try {
            const lease = await hot.acquire({ waitMs: 1 });
            hotAcquired++;
            await bump(counter);
            await lease.release();
          } catch (error) {
            if (error?.name !== 'LockNotAcquiredError') throw error;
            timeouts++;
          }
        } else {
          const lease = await semaphore.acquire();
          await immediate();
          await lease.release();
        }
        cycles++;
      } catch (error) {
        errors.push(String(error?.stack ?? error));
        if (errors.length > 20) return;
      }
    }
  };
  const run = (ms) => Promise.all(Array.from({ length: workers }, () => loop(performance.now() + ms)));
  const listeners = () => ({
    state: connection.listenerCount('state'),
    closed: connection.listenerCount('closed'),
    lost: connection.listenerCount('lost'),
    live: engine.liveCount,
  });
  await run(Math.min(5000, seconds * 200));
  await engine.drain();
  await settle();
  const before = memory();
  const listenersBefore = listeners();
  const cyclesBefore = cycles;
  const samples = [];
  const started = performance.now();
  const end = started + seconds * 1000;
  const running = run(seconds * 1000);
  while (performance.now() < end - sampleEverySeconds * 1000) {
    await sleep(sampleEverySeconds * 1000);
    samples.push({ s: (performance.now() - started) / 1000, ...memory() });
  }
  await running;
  await engine.drain();
  await settle();
  const after = memory();
  return {
    seconds,
    cycles: cycles - cyclesBefore,
    hotAcquired,
    counter: counter.read(),
    timeouts,
    before,
    after,
    samples,
    listenersBefore,
    listenersAfter: listeners(),
    errors,
  };
}

/**
 * W5's warm-up: every one of the KEYS locks under `path` acquired and released `passes` times by
 * this process (each pass in a new random order, `workers` at a time), so that the timed rounds
 * measure keys in use, not their first uses: the first pass makes each lock path (as the raw
 * peer's one path is made before its rounds), the second finds our node alone again and sets the
 * path's watch that lets later acquisitions skip the listing (see SequenceShortcut). Reports the
 * time and CPU of each pass.
 */
async function warmKeys({ path, workers = 16, passes = 2 }) {
  const factory = await makePeer('ours-keys', path);
  const locks = Array.from({ length: workers }, () => factory());
  const results = [];
  for (let pass = 0; pass < passes; pass++) {
    const order = Array.from({ length: KEYS }, (_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    let next = 0;
    const cpu = process.cpuUsage();
    const started = performance.now();
    await Promise.all(
      locks.map(async (lock) => {
        while (next < order.length) {
          const key = order[next++];
          const handle = await lock.acquireKey(key);
          await lock.release(handle);
        }
      }),
    );
    results.push({ keys: order.length, ms: performance.now() - started, cpuMs: cpuMsSince(cpu) });
  }
  return { passes: results };
}

// ---------------------------------------------------------------------------------------------

const election = electionCommands({ engine, ensurePath });

const handlers = {
  ...election,
  ...keyCommands({ engine, ensurePath }),
  ...bigQueueCommands({ openConnection, ensurePath }),
  run: (message) => (message.peer.endsWith('-traced') ? withTracing(() => timedRun(message)) : timedRun(message)),
  warmKeys,
  queue: queueRun,
  notifyFloor,
  closePool: async () => (await closePool(), {}),
  closeBlock,
  semaphore: semaphoreRun,
  rw: rwRun,
  scaleLocks,
  scaleRaw,
  scaleWaiters,
  churn,
  ping: async () => ({ pid: process.pid }),
};

process.stdout.write(JSON.stringify({ ready: true, pid: process.pid, sessionId: connection.sessionId, client: connection.usesAddon ? 'addon' : 'typescript' }) + '\n');

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    process.stdout.write(JSON.stringify({ ok: false, error: `not JSON: ${line}` }) + '\n');
    continue;
  }
  if (message.cmd === 'quit') break;
  const handler = handlers[message.cmd];
  try {
    if (!handler) throw new Error(`unknown command ${message.cmd}`);
    const result = await handler(message);
    process.stdout.write(JSON.stringify({ ok: true, ...result }) + '\n');
  } catch (error) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(error?.stack ?? error) }) + '\n');
  }
}

await election.electLeave();
await closePool();
await engine.drain();
await connection.close();
if (authed) {
  await authed.engine.drain();
  await authed.connection.close();
}
if (redis) await redis.quit().catch(() => undefined);
process.exit(0);
