// One worker process of the chaos run (scripts/chaos/run.mjs forks it with an IPC channel).
// Uses the BUILT package, as an application would (`npm run build` first).
//
// CHAOS_WORKER (JSON) configures it. Three modes:
//
// mode "work": connects to ZooKeeper through the runner's loopback proxies (one per ensemble member)
//   and runs async loops on one connection: `mutexWorkers` on a mutex, `semWorkers` on a semaphore
//   (`permits`), `rwWorkers` on a read-write lock. Every holder reports [acquired, end, token] to the
//   runner, and the mutex holders and the rw writers do a read → await → write increment on the
//   runner's fenced store (a write carrying a token lower than one the store has seen is rejected).
//   The process also joins one leader election (`Leadership`, lock name 'leader'): each term is
//   reported like a hold (acquired = 'gained', lost = its signal aborted), and while it lasts the
//   leader loops on the same increment, with the term's fencing token, on the store's 'leader' counter.
//   Readers read the value at the start and the end of their hold (it must not change).
//   Commands from the runner: {cmd:'hold-next', kind:'partition'|'pause'|'kill'|'long'} (the next
//   mutex holder of this process misbehaves on purpose, see faultHold), {cmd:'go'} (the partitioned
//   holder may now do its late write; a 'long' holder lets go), {cmd:'quiet', on} (every loop
//   pauses before its next acquire, reported once all do, or they go on again), {cmd:'notify-hold',
//   again} / {cmd:'notify-release'} / {cmd:'notify-wait'} (a separate mutex for the notification
//   fault: hold it until released, then with `again` take it once more; wait for it and hold it
//   until its signal aborts), {cmd:'stop'} (finish, close the
//   connection, exit), {cmd:'try-once-burst', ms} (try-once acquires of a mutex, a semaphore and a
//   read lock nobody else uses, for `ms`: reports how long each took to settle, why it failed, and
//   the worst event-loop delay meanwhile).
//   The kept-node fault (faults/kept-node-delete.mjs), on a lock path of its own per case, every
//   hold reported as lock 'kept' with its `lockPath`, each holder doing one read → write on the
//   store's 'kept' counter at once: {cmd:'kept-prepare', mode:'kept', path} (a mutex with retainMs:
//   acquire, release (kept), acquire again (handed over), release: the node is kept) or mode
//   'coalesced' (a coalesced mutex: hold it, with a second local caller queued behind) → {t:'kept',
//   what:'ready', node (the kept or held node), holdId (coalesced: the holder)};
//   {cmd:'kept-arm', moment:'handler'|'after'} → on the connection's next 'reconnected' (in the
//   handler, or 2 ms after it) acquire again (kept) or let the holder release to the queued caller
//   (coalesced), reported {t:'kept', what:'acted'}; {cmd:'kept-other', path} (another process:
//   take that lock, one node per caller, hold it until {cmd:'kept-other-release'}) → {t:'kept',
//   what:'other-held'} once its write was answered.
//   SIGTERM is a rolling restart's stop, as Nest's shutdown hooks do it: no new acquires (the loops
//   end; waiting acquires are refused by the engine), engine.shutdown() (holders get
//   `shutdownGraceMs`, then their signals abort with reason 'shutdown' before their nodes are
//   deleted), connection.close(), exit 0.
//   Every hold is reported as 'acquired' (acquiredAt: when acquire() resolved), 'lost' (when its
//   signal aborted, and why), 'released' (endAt: the end of the hold from the holder's own view,
//   i.e. its lost signal or the moment it stopped using the lock) and 'release-done' (release()
//   resolved).
//
// mode "foreign": a foreign client, connected directly, driven by the runner: setData on every
//   lock node under `base`, delete a given node; reports what it did and when.
//
// mode "check": connects directly (no proxy) and reports every node under `base` with its stat;
//   the runner counts the ephemeral ones left behind (orphaned lock nodes).
//
// Times are process.hrtime (CLOCK_MONOTONIC: one clock for every process of the machine), in ms.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Leadership, LockEngine, Mutex, ReadWriteLock, Semaphore, ZkConnection } from 'nestjs-zk-lock/core';
import { TICK_TIME_MS } from '../support/zookeeper.mjs';

const cfg = JSON.parse(process.env.CHAOS_WORKER ?? '{}');
const now = () => Number(process.hrtime.bigint()) / 1e6;

/**
 * The session of a connection that connect() has resolved for.
 * @param {ZkConnection} connection
 */
function connectedSession(connection) {
  const { session } = connection;
  if (!session) throw new Error('connected, but no session');
  return session;
}

function send(message) {
  if (process.connected) process.send?.(message);
}

// The runner is our store and our control: without it there is nothing to do.
process.on('disconnect', () => process.exit(3));

// Mirror Node's default (a crash) but tell the runner first: an unhandled rejection out of the
// library is a bug worth a line in the report.
for (const event of ['unhandledRejection', 'uncaughtException']) {
  process.on(event, (error) => {
    const e = /** @type {any} */ (error);
    send({ t: 'fatal', event, name: e?.name, message: String(e?.message ?? e), stack: String(e?.stack ?? ''), at: now() });
    process.stderr.write(`${event}: ${e?.stack ?? e}\n`);
    setTimeout(() => process.exit(70), 100);
  });
}

/** Resolves once `signal` has aborted (at once if it already has). */
function whenAborted(signal) {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
}

/** Sends the last message and exits once it is written. */
async function finish(message) {
  if (process.connected) await new Promise((resolve) => process.send?.(message, resolve));
  process.exit(0);
}

let nextCallId = 0;
const pending = new Map();
/** A request to the runner's store; resolves with its answer. */
function call(message) {
  const id = ++nextCallId;
  return new Promise((resolve) => {
    pending.set(id, resolve);
    send({ ...message, id });
  });
}

if (cfg.mode === 'check') await check();
else if (cfg.mode === 'foreign') await foreign();
else await work();

/**
 * A foreign client (not the library): answers the runner's commands {cmd:'set-all'} (setData on
 * every ephemeral node under `base`, i.e. every lock node, queued or held), {cmd:'delete', path}
 * and {cmd:'exit'}, each with a message {t:'foreign', ...} saying what it did and when.
 */
async function foreign() {
  const connection = new ZkConnection({ connectString: cfg.connectString, sessionTimeoutMs: 10_000, connectTimeoutMs: 60_000 });
  await connection.connect();
  const session = connectedSession(connection);
  async function lockNodes(path) {
    let listing;
    try {
      listing = await session.getChildren(path);
    } catch (error) {
      if (error?.codeName === 'NONODE') return [];
      throw error;
    }
    const nodes = listing.stat.ephemeralOwner !== '0' ? [path] : [];
    for (const child of listing.children) nodes.push(...(await lockNodes(`${path}/${child}`)));
    return nodes;
  }
  process.on('message', async (/** @type {any} */ message) => {
    try {
      if (message.cmd === 'set-all') {
        const at = now();
        const nodes = await lockNodes(cfg.base);
        const results = await Promise.allSettled(nodes.map((path) => session.setData(path, Buffer.from('__REVOKE__'))));
        const set = nodes.filter((_, i) => results[i].status === 'fulfilled');
        send({ t: 'foreign', cmd: 'set-all', at, doneAt: now(), set, gone: nodes.length - set.length });
      } else if (message.cmd === 'delete') {
        const at = now();
        const outcome = await session.delete(message.path).then(() => 'deleted', (error) => error?.codeName ?? String(error));
        send({ t: 'foreign', cmd: 'delete', path: message.path, outcome, at, doneAt: now() });
      } else if (message.cmd === 'exit') {
        await connection.close();
        await finish({ t: 'foreign', cmd: 'exit', at: now() });
      }
    } catch (error) {
      send({ t: 'foreign', cmd: message.cmd, error: String(error?.message ?? error), at: now() });
    }
  });
  send({ t: 'foreign', cmd: 'ready', at: now() });
}

async function check() {
  const connection = new ZkConnection({ connectString: cfg.connectString, sessionTimeoutMs: 10_000, connectTimeoutMs: 60_000 });
  await connection.connect();
  const session = connectedSession(connection);
  await session.sync('/');
  const nodes = [];
  async function walk(path) {
    let listing;
    try {
      listing = await session.getChildren(path);
    } catch (error) {
      if (error?.codeName === 'NONODE') return;
      throw error;
    }
    nodes.push({ path, ephemeralOwner: listing.stat.ephemeralOwner, numChildren: listing.stat.numChildren });
    for (const child of listing.children) await walk(`${path}/${child}`);
  }
  await walk(cfg.base);
  await connection.close();
  await finish({ t: 'check', nodes });
}

async function work() {
  const connection = new ZkConnection({
    connectString: cfg.connectString,
    sessionTimeoutMs: cfg.sessionTimeoutMs,
    connectTimeoutMs: 60_000,
    serverTickTimeMs: TICK_TIME_MS,
  });
  connection.on('state', (state, previous) =>
    send({ t: 'state', state, previous, sessionId: connection.session?.id, at: now() }),
  );
  await connection.connect();
  const engine = new LockEngine(connection, { app: 'chaos', instance: `slot${cfg.slot}`, shutdownGraceMs: cfg.shutdownGraceMs });
  engine.onWarning((message) => send({ t: 'warning', message, at: now() }));
  const mutex = new Mutex(engine, 'mutex', `${cfg.base}/mutex`);
  const semaphore = new Semaphore(engine, 'sem', `${cfg.base}/sem`, { permits: cfg.permits });
  const rw = new ReadWriteLock(engine, 'rw', `${cfg.base}/rw`);

  const stopping = new AbortController();
  /** Set on SIGTERM: the loops take nothing new (the engine refuses acquires that are waiting). */
  let terminating = false;
  const running = () => !stopping.signal.aborted && !terminating;
  // Locks nobody else uses: a try-once on them fails only for want of ZooKeeper.
  /** @type {[string, (lock: any) => Promise<any>, Mutex | Semaphore | ReadWriteLock][]} */
  const tryOnceLocks = [
    ['mutex', (lock) => lock.acquire({ waitMs: 0 }), new Mutex(engine, 'try-once', `${cfg.base}/try-once`, { coalesce: false })],
    ['semaphore', (lock) => lock.tryAcquire(), new Semaphore(engine, 'try-once-sem', `${cfg.base}/try-once-sem`, { permits: cfg.permits })],
    ['read lock', (lock) => lock.read.tryAcquire(), new ReadWriteLock(engine, 'try-once-rw', `${cfg.base}/try-once-rw`)],
  ];
  /**
   * Try-once acquires for `ms`, one after the other, round the three locks: how long each took to
   * settle and how it ended ('connection', 'timeout', ... or 'acquired', 'held' for tryAcquire()'s
   * null), and the worst event-loop delay meanwhile (a timer fires that much late).
   */
  async function tryOnceBurst(ms) {
    const until = now() + ms;
    const reasons = {};
    let maxMs = 0;
    let slowest;
    let count = 0;
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    while (now() < until) {
      const [kind, tryOnce, lock] = tryOnceLocks[count % tryOnceLocks.length];
      const started = now();
      const outcome = await tryOnce(lock).then(
        (lease) => (lease ? lease.release().then(() => 'acquired') : 'held'),
        (error) => error?.reason ?? error?.name ?? 'error',
      );
      const took = now() - started;
      if (took > maxMs) {
        maxMs = took;
        slowest = `${kind}: ${outcome}`;
      }
      const key = `${kind}: ${outcome}`;
      reasons[key] = (reasons[key] ?? 0) + 1;
      count++;
      await sleep(25);
    }
    delay.disable();
    send({ t: 'try-once-burst', count, maxMs: Math.round(maxMs), slowest, maxLoopDelayMs: Math.round(delay.max / 1e6), reasons, at: now() });
  }
  // A rolling restart: what Nest's shutdown hooks do on SIGTERM (the HTTP server is closed first,
  // so no new work comes in; work in flight goes on under its locks).
  process.once('SIGTERM', () => {
    terminating = true;
    for (const resume of quietWaiters.splice(0)) resume();
    mainPhase = 'SIGTERM: engine.shutdown()';
    void engine
      .shutdown()
      .then(() => {
        mainPhase = 'SIGTERM: connection.close()';
        return connection.close();
      })
      .then(() => finish({ t: 'done', stats, shutdown: true, at: now() }));
  });
  let quiet = false;
  const quietWaiters = [];
  const loopCount = cfg.mutexWorkers + cfg.semWorkers + cfg.rwWorkers;
  /** Between two holds: waits while the runner wants this process quiet (tells it once all loops wait). */
  const unlessQuiet = () => {
    if (!quiet) return undefined;
    const paused = new Promise((resolve) => quietWaiters.push(resolve));
    if (quietWaiters.length === loopCount) send({ t: 'quiet', idle: true, at: now() });
    return paused;
  };
  // A separate mutex for the notification fault, nobody else's.
  const notifyLock = new Mutex(engine, 'notify', `${cfg.base}/notify`, { coalesce: false });
  let notifyLetGo;
  /** Holds the notify mutex until {cmd:'notify-release'}; with `again`, then takes it once more, briefly. */
  async function notifyHold(again) {
    const letGo = new Promise((resolve) => (notifyLetGo = resolve));
    await holdOnce('notify-hold', 'notify', notifyLock, async (hold) => {
      send({ t: 'notify-held', ...hold, at: now() });
      await Promise.race([letGo, sleep(60_000)]);
    }, 60_000);
    if (again) await holdOnce('notify-hold', 'notify', notifyLock, () => sleep(100), 60_000);
  }
  /** Waits for the notify mutex, then holds it until its signal aborts (or {cmd:'notify-release'}, or a minute passed). */
  async function notifyWait() {
    const letGo = new Promise((resolve) => (notifyLetGo = resolve));
    await holdOnce('notify-wait', 'notify', notifyLock, (hold, signal) => Promise.race([whenAborted(signal), letGo, sleep(60_000)]), 60_000);
  }
  // The kept-node fault: its mutexes (one path per case) and what the runner armed.
  /** @type {Map<string, { mode: string, lock: Mutex, letGo?: () => void }>} */
  const kept = new Map();
  let keptOtherRelease;
  let keptHolds = 0;
  /**
   * Reports a hold of lock 'kept' on `lockPath` like holdOnce (acquired, lost, released,
   * release-done): `acquiring` settles with its lease; the holder reads and writes the store's
   * 'kept' counter at once (while its signal has not aborted), then runs `body`, then releases.
   * @param {string} w
   * @param {string} lockPath
   * @param {Promise<any>} acquiring
   * @param {(hold: any, signal: AbortSignal) => unknown} [body]
   */
  async function keptHold(w, lockPath, acquiring, body = () => undefined) {
    send({ t: 'acquiring', w, lock: 'kept', at: now() });
    let lease;
    try {
      lease = await acquiring;
    } catch (error) {
      send({ t: 'error', w, lock: 'kept', op: 'acquire', name: error?.name, reason: error?.reason ?? error?.codeName, message: String(error?.message), at: now() });
      return undefined;
    }
    const hold = { holdId: `${process.pid}.${w}.k${++keptHolds}`, lock: 'kept', lockPath, token: String(lease.fencingToken), sessionId: lease.sessionId, path: lease.path, acquiredAt: now() };
    let lostAt;
    const signal = lease.signal;
    const onLost = () => {
      lostAt = now();
      send({ t: 'lost', w, ...hold, name: signal.reason?.name, reason: signal.reason?.reason, at: lostAt });
    };
    if (signal.aborted) onLost();
    else signal.addEventListener('abort', onLost, { once: true });
    send({ t: 'acquired', w, ...hold, at: hold.acquiredAt });
    const extra = {};
    try {
      const read = await call({ t: 'read', store: 'kept', holdId: hold.holdId, token: hold.token, acquiredAt: hold.acquiredAt });
      if (read.ok && !signal.aborted) {
        await call({ t: 'write', store: 'kept', holdId: hold.holdId, token: hold.token, acquiredAt: hold.acquiredAt, expect: read.value, value: read.value + 1 });
      } else if (read.ok) extra.skippedWrite = true;
      await body(hold, signal);
    } catch (error) {
      send({ t: 'error', w, lock: 'kept', op: 'hold', name: error?.name, message: String(error?.message), at: now() });
    }
    send({ t: 'released', w, ...hold, endAt: lostAt ?? now(), lost: lostAt !== undefined, ...extra, at: now() });
    try {
      await lease.release();
      send({ t: 'release-done', w, holdId: hold.holdId, at: now() });
    } catch (error) {
      send({ t: 'error', w, lock: 'kept', op: 'release', name: error?.name, reason: error?.reason ?? error?.codeName, message: String(error?.message), at: now() });
    }
    return hold;
  }
  async function keptPrepare(mode, path) {
    if (mode === 'kept') {
      const lock = new Mutex(engine, 'kept', path, { retainMs: 15_000 });
      kept.set(path, { mode, lock });
      const first = await keptHold('kept-a', path, lock.acquire({ waitMs: cfg.waitMs }));
      const again = first && (await keptHold('kept-a', path, lock.acquire({ waitMs: 0 }))); // handed over: the node's watches are set
      await connectedSession(connection).exists('/'); // every answer to what was sent so far has come
      send({ t: 'kept', what: 'ready', mode, path, node: again?.path, reused: Boolean(again && again.path === first.path), at: now() });
      return;
    }
    const lock = new Mutex(engine, 'kept-co', path, { coalesce: true });
    const entry = { mode, lock };
    kept.set(path, entry);
    const letGo = new Promise((resolve) => (entry.letGo = resolve));
    let ready;
    const held = new Promise((resolve) => (ready = resolve));
    void keptHold('kept-a', path, lock.acquire({ waitMs: cfg.waitMs }), async (hold) => {
      ready(hold);
      await Promise.race([letGo, sleep(60_000)]);
    }).then((hold) => hold || ready(undefined));
    const holder = await held;
    if (holder) void keptHold('kept-b', path, lock.acquire({ waitMs: 60_000 }), () => sleep(200)); // queued locally behind the holder
    await sleep(50);
    await connectedSession(connection).exists('/');
    send({ t: 'kept', what: 'ready', mode, path, node: holder?.path, holdId: holder?.holdId, at: now() });
  }
  function keptArm(path, moment) {
    const entry = kept.get(path);
    const act = () => {
      send({ t: 'kept', what: 'acted', path, at: now() });
      if (entry?.mode === 'kept') void keptHold('kept-a', path, entry.lock.acquire({ waitMs: 60_000 }), () => sleep(200));
      else entry?.letGo?.();
    };
    connection.once('reconnected', () => (moment === 'handler' ? act() : setTimeout(act, 2)));
    send({ t: 'kept', what: 'armed', path, at: now() });
  }
  async function keptOther(path) {
    const release = new Promise((resolve) => (keptOtherRelease = resolve));
    const lock = new Mutex(engine, 'kept-other', path, { coalesce: false });
    await keptHold('kept-other', path, lock.acquire({ waitMs: 20_000 }), async (hold, signal) => {
      send({ t: 'kept', what: 'other-held', path, holdId: hold.holdId, at: now() });
      await Promise.race([release, whenAborted(signal), sleep(60_000)]);
    });
  }
  let faultKind;
  let go;
  let goReceived = false;
  process.on('message', (/** @type {any} */ message) => {
    if (message.id !== undefined && pending.has(message.id)) {
      const resolve = pending.get(message.id);
      pending.delete(message.id);
      resolve(message);
    } else if (message.cmd === 'hold-next') {
      faultKind = message.kind;
    } else if (message.cmd === 'quiet') {
      // Every loop pauses before its next acquire (those waiting or holding go on until done), so
      // the session carries nothing but what the runner asks for and the library's heartbeats.
      quiet = message.on;
      if (!quiet) for (const resume of quietWaiters.splice(0)) resume();
      else if (quietWaiters.length === loopCount) send({ t: 'quiet', idle: true, at: now() });
    } else if (message.cmd === 'notify-hold') {
      void notifyHold(message.again);
    } else if (message.cmd === 'notify-release') {
      notifyLetGo?.();
    } else if (message.cmd === 'notify-wait') {
      void notifyWait();
    } else if (message.cmd === 'try-once-burst') {
      void tryOnceBurst(message.ms);
    } else if (message.cmd === 'kept-prepare') {
      void keptPrepare(message.mode, message.path);
    } else if (message.cmd === 'kept-arm') {
      keptArm(message.path, message.moment);
    } else if (message.cmd === 'kept-other') {
      void keptOther(message.path);
    } else if (message.cmd === 'kept-other-release') {
      keptOtherRelease?.();
    } else if (message.cmd === 'go') {
      goReceived = true;
      go?.();
    } else if (message.cmd === 'stop') {
      stopping.abort();
      for (const resume of quietWaiters.splice(0)) resume();
      // Still here after a while: say where we hang.
      setTimeout(() => {
        send({
          t: 'stuck',
          main: mainPhase,
          loops: Object.fromEntries([...phases].filter(([, phase]) => phase !== 'done')),
          connection: connection.state,
          sessionId: connection.session?.id,
          nativeConnected: connection.session?.isConnectedNatively,
          liveLeases: engine.liveCount,
          isLeader: election.isLeader,
          pendingStoreCalls: pending.size,
          at: now(),
        });
      }, 20_000).unref();
    }
  });

  const stats = { acquisitions: 0, errors: 0 };
  /** What each loop is doing (for the runner's report when a worker does not stop). */
  const phases = new Map();
  let mainPhase = 'running';
  let holds = 0;
  const pause = () => sleep(cfg.holdMs[0] + Math.random() * (cfg.holdMs[1] - cfg.holdMs[0]));

  /** Takes `lock` once, runs `body` as the holder, reports the interval; errors are reported, not thrown. */
  async function holdOnce(w, lockName, lock, body, waitMs = cfg.waitMs) {
    send({ t: 'acquiring', w, lock: lockName, at: now() });
    let lease;
    try {
      phases.set(w, `${lockName}: acquire`);
      lease = await lock.acquire({ waitMs, signal: stopping.signal });
    } catch (error) {
      if (!stopping.signal.aborted) {
        stats.errors++;
        send({ t: 'error', w, lock: lockName, op: 'acquire', name: error?.name, reason: error?.reason ?? error?.codeName, message: String(error?.message), shutdown: terminating, at: now() });
        if (!terminating) await sleep(50 + Math.random() * 100);
      }
      return;
    }
    const acquiredAt = now();
    stats.acquisitions++;
    const hold = {
      holdId: `${process.pid}.${w}.${++holds}`,
      lock: lockName,
      token: String(lease.fencingToken),
      sessionId: lease.sessionId,
      path: lease.path,
      acquiredAt,
    };
    let lostAt;
    const signal = lease.signal;
    const onLost = () => {
      lostAt = now();
      send({ t: 'lost', w, ...hold, name: signal.reason?.name, reason: signal.reason?.reason, at: lostAt });
    };
    if (signal.aborted) onLost();
    else signal.addEventListener('abort', onLost, { once: true });
    send({ t: 'acquired', w, ...hold, at: acquiredAt });
    const extra = {};
    try {
      phases.set(w, `${lockName}: hold`);
      await body(hold, signal, extra);
    } catch (error) {
      stats.errors++;
      send({ t: 'error', w, lock: lockName, op: 'hold', name: error?.name, reason: error?.reason ?? error?.codeName, message: String(error?.message), at: now() });
    }
    const endAt = lostAt ?? now();
    send({ t: 'released', w, ...hold, endAt, lost: lostAt !== undefined, ...extra, at: now() });
    try {
      phases.set(w, `${lockName}: release (lost: ${lostAt !== undefined}, isHeld: ${lease.isHeld})`);
      await lease.release();
      send({ t: 'release-done', w, holdId: hold.holdId, at: now() });
    } catch (error) {
      stats.errors++;
      send({ t: 'error', w, lock: lockName, op: 'release', name: error?.name, reason: error?.reason ?? error?.codeName, message: String(error?.message), at: now() });
    }
  }

  /** A well-behaved increment: read, work, and write only while the lease is still held. */
  async function increment(hold, signal, extra) {
    const read = await call({ t: 'read', store: hold.lock, holdId: hold.holdId, token: hold.token, acquiredAt: hold.acquiredAt });
    if (!read.ok) return;
    await pause();
    if (signal.aborted) {
      extra.skippedWrite = true;
      return;
    }
    await call({ t: 'write', store: hold.lock, holdId: hold.holdId, token: hold.token, acquiredAt: hold.acquiredAt, expect: read.value, value: read.value + 1 });
  }

  /**
   * A holder that misbehaves on purpose, for the runner's faults:
   * - partition: reads, tells the runner (which cuts this process off ZooKeeper), waits for its
   *   lease's signal, then for the runner's "go" (a newer holder has used the store), then writes
   *   with its old token and value: the store must reject it.
   * - pause: reads, tells the runner (which SIGSTOPs this process), and when the clock jumps
   *   (SIGCONT) writes at once, before the library can tell it the lock is gone.
   * - kill: reads, tells the runner (which SIGKILLs this process), waits.
   * - long: reads, tells the runner, and holds on until its signal aborts (or the runner says go);
   *   it writes nothing (a well-behaved holder that was told).
   */
  async function faultHold(kind, hold, signal) {
    const read = await call({ t: 'read', store: hold.lock, holdId: hold.holdId, token: hold.token, acquiredAt: hold.acquiredAt });
    goReceived = false;
    // Taken before the runner hears from us, so a SIGSTOP always falls after it.
    let last = now();
    send({ t: 'holding-for-fault', kind, ...hold, readOk: read.ok, at: last });
    const lateWrite = async () => {
      const answer = await call({
        t: 'write', store: hold.lock, holdId: hold.holdId, token: hold.token, acquiredAt: hold.acquiredAt,
        expect: read.value, value: read.value + 1, late: true,
      });
      send({ t: 'late-write', kind, holdId: hold.holdId, ok: answer.ok, signalAborted: signal.aborted, at: now() });
    };
    if (kind === 'kill') {
      await sleep(120_000);
      return;
    }
    if (kind === 'long') {
      // A long critical section: it goes on until its signal aborts or the runner lets go.
      await Promise.race([whenAborted(signal), new Promise((resolve) => (go = resolve)), sleep(90_000)]);
      go = undefined;
      return;
    }
    if (kind === 'partition') {
      await Promise.race([whenAborted(signal), sleep(90_000)]);
      if (!goReceived) await Promise.race([new Promise((resolve) => (go = resolve)), sleep(60_000)]);
      go = undefined;
      await lateWrite();
      return;
    }
    // pause: a 20 ms tick that suddenly took much longer means we were stopped.
    for (let i = 0; i < 6000; i++) {
      await sleep(20);
      if (now() - last > 1000) break;
      last = now();
    }
    await lateWrite();
    await Promise.race([whenAborted(signal), sleep(60_000)]);
  }

  async function mutexLoop(w) {
    while (running()) {
      await unlessQuiet();
      await holdOnce(w, 'mutex', mutex, (hold, signal, extra) => {
        const kind = faultKind;
        faultKind = undefined;
        return kind ? faultHold(kind, hold, signal) : increment(hold, signal, extra);
      });
    }
  }

  async function semLoop(w) {
    while (running()) {
      await unlessQuiet();
      await holdOnce(w, 'sem', semaphore, () => pause());
    }
  }

  async function rwLoop(w) {
    while (running()) {
      await unlessQuiet();
      if (Math.random() < cfg.writeRatio) {
        await holdOnce(w, 'rw-write', rw.write, (hold, signal, extra) => increment({ ...hold, lock: 'rw' }, signal, extra));
      } else {
        await holdOnce(w, 'rw-read', rw.read, async (hold, signal, extra) => {
          const first = await call({ t: 'peek', store: 'rw' });
          await pause();
          const last = await call({ t: 'peek', store: 'rw' });
          if (first.value !== last.value && !signal.aborted) extra.readerSawWrite = true;
        });
      }
    }
  }

  /**
   * One leadership term, reported like a hold (the runner's checks treat it as one: its interval,
   * its lost signal, its token order): from 'gained' until the term's signal aborts, the leader
   * increments the store's 'leader' counter with the term's fencing token. No ZooKeeper traffic
   * of its own, so it need not pause for the runner's quiet phases.
   */
  async function leadTerm(term) {
    const hold = {
      holdId: `${process.pid}.leader.${++holds}`,
      lock: 'leader',
      token: String(term.fencingToken),
      sessionId: term.sessionId,
      path: term.path,
      acquiredAt: now(),
    };
    let lostAt;
    const onLost = () => {
      lostAt = now();
      send({ t: 'lost', w: 'leader', ...hold, name: term.signal.reason?.name, reason: term.signal.reason?.reason, at: lostAt });
    };
    if (term.signal.aborted) onLost();
    else term.signal.addEventListener('abort', onLost, { once: true });
    send({ t: 'acquired', w: 'leader', ...hold, at: hold.acquiredAt });
    phases.set('leader', 'leading');
    while (!term.signal.aborted) {
      try {
        await increment(hold, term.signal, {});
      } catch (error) {
        stats.errors++;
        send({ t: 'error', w: 'leader', lock: 'leader', op: 'lead', name: error?.name, message: String(error?.message), at: now() });
      }
      await pause();
    }
    send({ t: 'released', w: 'leader', ...hold, endAt: lostAt ?? now(), lost: true, at: now() });
    phases.set('leader', 'following');
  }
  const election = new Leadership(engine, 'leader', `${cfg.base}/leader`, { participantId: `slot${cfg.slot}:${process.pid}` });
  /** The running term's loop, awaited before the connection closes. */
  let leading = Promise.resolve();
  election.on('gained', (term) => (leading = leadTerm(term)));

  send({ t: 'ready', sessionId: connection.sessionId, at: now() });
  election.start();
  const loops = [];
  let w = 0;
  for (let i = 0; i < cfg.mutexWorkers; i++) loops.push(mutexLoop(w++));
  for (let i = 0; i < cfg.semWorkers; i++) loops.push(semLoop(w++));
  for (let i = 0; i < cfg.rwWorkers; i++) loops.push(rwLoop(w++));
  await Promise.all(loops.map((loop, i) => loop.finally(() => phases.set(i, 'done'))));
  // Leave the election before the session closes: the term's signal aborts first, its node goes.
  mainPhase = 'election.close()';
  await election.close();
  await leading;
  mainPhase = 'engine.drain()';
  await engine.drain();
  mainPhase = 'connection.close()';
  await connection.close();
  mainPhase = 'exiting';
  await finish({ t: 'done', stats, at: now() });
}
