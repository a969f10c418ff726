// Runs one fault schedule (generate.mjs) against a ZooKeeper: every client is a session of its own
// in this process (its own ZkConnection and LockEngine behind its own TcpProxy, so that a cut hits
// that client alone), its callers loop on the drawn recipe, the faults come at their moments, and
// the history (history.mjs) is checked at the end, with the orphan check: once every client has
// closed, no ephemeral node may remain under the schedule's path within a session timeout.
// The library comes as an argument (`lib`: lib/core from the Jest test, dist/core from
// `npm run chaos`), so the same runner serves both.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { TcpProxy } from '../../support/tcp-proxy.mjs';
import { describe as describeHold, History } from './history.mjs';
import { prng, UNTARGETED } from './generate.mjs';

/** @typedef {import('./generate.mjs').Schedule} Schedule */
/** @typedef {import('./generate.mjs').Fault} Fault */
/** @typedef {import('./history.mjs').Hold} Hold */

/**
 * @typedef {{
 *   seed: number, ok: boolean, violations: string[], stats: Record<string, number>, orphans: string[],
 *   warnings: string[], faultsRun: Record<string, number>, elapsedMs: number, events: string[],
 * }} ScheduleResult
 */

/**
 * One client's proxies, one per server, cut and restored together.
 */
class ProxyGroup {
  /** @param {string[]} targets */
  static async start(targets) {
    return new ProxyGroup(await Promise.all(targets.map((t) => TcpProxy.start(t))));
  }
  /** @param {TcpProxy[]} proxies */
  constructor(proxies) {
    this.proxies = proxies;
  }
  get connectString() {
    return this.proxies.map((p) => p.connectString).join(',');
  }
  cut() {
    for (const p of this.proxies) p.cut();
  }
  blackhole() {
    for (const p of this.proxies) p.blackhole();
  }
  /** @param {number} bytesPerSecond */
  slowReplies(bytesPerSecond) {
    for (const p of this.proxies) p.slowReplies(bytesPerSecond);
  }
  restore() {
    for (const p of this.proxies) p.restore();
  }
  async close() {
    await Promise.all(this.proxies.map((p) => p.close()));
  }
}

/**
 * `servers` (an ensemble): the servers' addresses (each client gets a proxy per server) and how
 * to run a server fault (leader-kill, follower-kill, follower-isolate) for `ms`.
 * @param {{
 *   lib: any, connectString: string, schedule: Schedule, log?: (line: string) => void,
 *   servers?: { targets: string[], fault: (kind: string, ms: number, note: (text: string) => void) => Promise<void> },
 * }} params
 * @returns {Promise<ScheduleResult>}
 */
export async function runSchedule({ lib, connectString, schedule, log = () => undefined, servers }) {
  const started = performance.now();
  const s = schedule;
  const history = new History();
  const random = prng(s.seed ^ 0x5eed);
  const between = (/** @type {number} */ lo, /** @type {number} */ hi) => Math.round(lo + random() * (hi - lo));
  const base = `/fault-schedule/s${s.seed}-${randomBytes(3).toString('hex')}`;
  const paths = { a: `${base}/mutex-a`, b: `${base}/mutex-b`, rw: `${base}/rw`, sem: `${base}/sem`, leader: `${base}/leader` };
  /** @type {string[]} */
  const warnings = [];
  /** @type {Record<string, number>} */
  const faultsRun = {};

  const observer = new lib.ZkConnection({ connectString, sessionTimeoutMs: 10_000 });
  await observer.connect();
  const obs = observer.session;
  for (const p of ['/fault-schedule', base]) await obs.create(p, Buffer.alloc(0), lib.CreateMode.PERSISTENT).catch(() => undefined);

  const o = s.options;
  if (s.recipe === 'semaphore') history.permits.set(paths.sem, /** @type {number} */ (o.permits));
  if (s.recipe === 'multi-lock' && o.members?.includes('semaphore')) history.permits.set(paths.sem, 1);

  /** The recipe's lock objects on one engine. @param {any} engine */
  function makeLocks(engine) {
    if (s.recipe === 'mutex') {
      const options = { coalesce: o.coalesce, releaseInBackground: o.releaseInBackground, leaseMs: o.leaseMs, ...(o.retainMs ? { retainMs: o.retainMs } : {}) };
      return { main: new lib.Mutex(engine, 'mutex', paths.a, options) };
    }
    if (s.recipe === 'semaphore') return { main: new lib.Semaphore(engine, 'sem', paths.sem, { permits: o.permits, leaseMs: o.leaseMs }) };
    if (s.recipe === 'read-write') return { rw: new lib.ReadWriteLock(engine, 'rw', paths.rw, { leaseMs: o.leaseMs }) };
    if (s.recipe === 'multi-lock') {
      const rw = new lib.ReadWriteLock(engine, 'rw', paths.rw);
      /** @type {Record<string, any>} */
      const all = {
        'mutex-a': new lib.Mutex(engine, 'mutex-a', paths.a, { coalesce: o.coalesce }),
        'mutex-b': new lib.Mutex(engine, 'mutex-b', paths.b, { coalesce: o.coalesce }),
        write: rw.write,
        read: rw.read,
        semaphore: new lib.Semaphore(engine, 'sem', paths.sem, { permits: 1 }),
      };
      const members = (o.members ?? []).map((m) => all[m]);
      return { multi: new lib.MultiLock(members), members };
    }
    return {};
  }

  /** Where the recipe's lock nodes live (for the foreign client's sets and deletes). */
  const nodeParents =
    s.recipe === 'mutex' ? [paths.a]
    : s.recipe === 'semaphore' ? [`${paths.sem}/leases`, `${paths.sem}/locks`]
    : s.recipe === 'read-write' ? [paths.rw]
    : s.recipe === 'leadership' ? [paths.leader]
    : [paths.a, paths.b, paths.rw, `${paths.sem}/leases`];

  /**
   * The member leases of `lease` (taken from `lockable`) with the lock and kind each counts for.
   * @param {any} lockable @param {any} lease @returns {{ lock: string, kind: import('./history.mjs').HoldKind, lease: any }[]}
   */
  function members(lockable, lease) {
    if (lockable.kind === 'multi') return lockable.members.flatMap((/** @type {any} */ m, /** @type {number} */ i) => members(m, lease.leases[i]));
    if (lockable.kind === 'semaphore') return lease.leases.map((/** @type {any} */ l) => ({ lock: lockable.path, kind: 'slot', lease: l }));
    const kind = lockable.kind === 'read' ? 'read' : lockable.kind === 'write' ? 'write' : 'exclusive';
    return [{ lock: lockable.path, kind, lease }];
  }

  class Client {
    /** @param {number} index @param {ProxyGroup} proxy */
    constructor(index, proxy) {
      this.index = index;
      this.proxy = proxy;
      this.gen = 0;
      this.ready = false;
      this.faulted = false;
      /** @type {any} */ this.connection = undefined;
      /** @type {any} */ this.engine = undefined;
      /** @type {any} */ this.locks = {};
      /** @type {any} */ this.leadership = undefined;
      /** @type {Promise<void>} */ this.up = Promise.resolve();
      /** @type {() => void} */ this.markUp = () => undefined;
    }

    get name() {
      return `c${this.index}.${this.gen}`;
    }

    async open() {
      this.gen++;
      this.connection = new lib.ZkConnection({ connectString: this.proxy.connectString, sessionTimeoutMs: s.sessionTimeoutMs });
      await this.connection.connect();
      this.engine = new lib.LockEngine(this.connection, { app: 'fault-schedule', instance: this.name, shutdownGraceMs: s.shutdownGraceMs });
      this.engine.onWarning((/** @type {string} */ m) => {
        warnings.push(`${this.name}: ${m}`);
        history.note(`warning ${this.name}: ${m}`);
      });
      this.locks = makeLocks(this.engine);
      if (s.recipe === 'leadership') this.elect();
      this.ready = true;
      this.markUp();
      history.note(`${this.name} open, session ${this.connection.sessionId}`);
    }

    elect() {
      const owner = this.name;
      const leadership = new lib.Leadership(this.engine, 'leader', paths.leader, { participantId: owner });
      leadership.on('gained', (/** @type {any} */ term) => {
        history.grant({ owner, client: this.index, session: term.sessionId, lock: paths.leader, kind: 'exclusive', node: term.path, token: term.fencingToken }, term.signal);
      });
      this.leadership = leadership.start();
    }

    down() {
      this.ready = false;
      this.up = new Promise((resolve) => (this.markUp = () => resolve(undefined)));
    }

    async close() {
      this.ready = false;
      await this.leadership?.close().catch(() => undefined);
      await this.engine?.shutdown();
      await this.connection?.close();
    }
  }

  const targets = servers?.targets ?? [connectString.split(',')[0]];
  const proxies = await Promise.all(Array.from({ length: s.clients }, () => ProxyGroup.start(targets)));
  const clients = proxies.map((p, i) => new Client(i, p));
  await Promise.all(clients.map((c) => c.open()));

  let running = true;
  const stop = new AbortController();
  const slackMs = s.sessionTimeoutMs + 5000;

  /** A caller: acquire (the drawn waitMs), hold, maybe downgrade, release; until the end. @param {Client} client @param {number} k */
  async function caller(client, k) {
    const owner = `c${client.index}w${k}`;
    const rnd = prng(s.seed * 31 + client.index * 7 + k);
    const pickFrom = (/** @type {any[]} */ items) => items[Math.floor(rnd() * items.length)];
    const hold = () => sleep(s.holdMs[0] + rnd() * (s.holdMs[1] - s.holdMs[0]));
    while (running) {
      if (!client.ready) {
        await Promise.race([client.up, sleep(200, undefined, { ref: false })]);
        continue;
      }
      const locks = client.locks;
      /** @type {any} */ let lockable;
      /** @type {Record<string, unknown>} */ const extra = {};
      let downgrade = false;
      if (s.recipe === 'mutex') lockable = locks.main;
      else if (s.recipe === 'semaphore') {
        lockable = locks.main;
        if (o.multiPermits) extra.permits = 1 + Math.floor(rnd() * /** @type {number} */ (o.permits));
      } else if (s.recipe === 'read-write') {
        const write = rnd() < /** @type {number} */ (o.writeRatio);
        lockable = write ? locks.rw.write : locks.rw.read;
        downgrade = write && rnd() < /** @type {number} */ (o.downgradeRatio);
      } else if (s.recipe === 'multi-lock') {
        lockable = rnd() < /** @type {number} */ (o.singleRatio) ? pickFrom(locks.members) : locks.multi;
      } else {
        // Leadership: the election runs by itself; now and then the leader steps down.
        await hold();
        await sleep(50);
        if (client.ready && client.leadership?.isLeader && rnd() < /** @type {number} */ (o.stepDownRatio)) {
          history.note(`${client.name} steps down`);
          await client.leadership.stepDown().catch((/** @type {Error} */ e) => history.errors.push(`stepDown: ${e}`));
        }
        continue;
      }
      const waitMs = pickFrom(s.waitMs);
      const attempt = history.acquiring(owner, client.index, lockable.path, waitMs);
      /** @type {any} */ let lease;
      try {
        lease = await lockable.acquire({ ...(waitMs === null ? {} : { waitMs }), signal: stop.signal, ...extra });
        history.settled(attempt, 'granted');
      } catch (error) {
        history.settled(attempt, `${error.name}${error.reason ? ` ${error.reason}` : ''}`);
        if (!expectedAcquireError(lib, error)) history.errors.push(`${owner} acquire ${lockable.kind}: ${error.stack ?? error}`);
        await sleep(5 + rnd() * 20);
        continue;
      }
      const holds = members(lockable, lease).map((m) =>
        history.grant({ owner, client: client.index, session: m.lease.sessionId, lock: m.lock, kind: m.kind, node: m.lease.path, token: m.lease.fencingToken }, m.lease.signal),
      );
      await hold();
      if (downgrade) {
        // Read lock taken inside the write hold (same call chain), then the write lock released.
        const rwLock = locks.rw;
        const down = history.acquiring(owner, client.index, rwLock.read.path, 2000);
        /** @type {any} */ let read;
        try {
          read = await lockable.runHolding(lease, () => rwLock.read.acquire({ waitMs: 2000, signal: stop.signal }));
          history.settled(down, 'granted');
        } catch (error) {
          history.settled(down, `${error.name}${error.reason ? ` ${error.reason}` : ''}`);
          if (!expectedAcquireError(lib, error)) history.errors.push(`${owner} downgrade: ${error.stack ?? error}`);
        }
        const readHold = read && history.grant({ owner, client: client.index, session: read.sessionId, lock: rwLock.read.path, kind: 'read', node: read.path, token: read.fencingToken }, read.signal);
        for (const h of holds) history.released(h);
        await release(owner, lease);
        if (read) {
          await hold();
          history.released(readHold);
          await release(owner, read);
        }
      } else {
        for (const h of holds) history.released(h);
        await release(owner, lease);
      }
    }
  }

  /** @param {string} owner @param {any} lease */
  async function release(owner, lease) {
    try {
      await lease.release();
    } catch (error) {
      history.errors.push(`${owner} release: ${error.stack ?? error}`);
    }
  }

  /** @returns {Promise<string | undefined>} a lock node to set or delete, or undefined if none. @param {boolean} lowest */
  async function pickNode(lowest) {
    const parent = nodeParents[Math.floor(random() * nodeParents.length)];
    const children = await obs.getChildren(parent).then((/** @type {any} */ r) => r.children, () => /** @type {string[]} */ ([]));
    if (children.length === 0) return undefined;
    const sorted = [...children].sort((x, y) => x.slice(-10).localeCompare(y.slice(-10)));
    return `${parent}/${lowest ? sorted[0] : sorted[Math.floor(random() * sorted.length)]}`;
  }

  let serverFaulted = false;
  /** @param {Fault} f */
  async function runFault(f) {
    const clientFault = !UNTARGETED.includes(f.kind);
    /** @type {Client | undefined} */
    let client = clients[f.client];
    if (clientFault) {
      const free = clients.filter((c) => !c.faulted);
      const live = (/** @type {Client} */ c) =>
        f.target === 'holder' ? history.holds.some((h) => h.client === c.index && h.releasedAt === undefined && h.abortedAt === undefined)
        : f.target === 'waiter' ? history.acquires.some((a) => a.client === c.index && a.settledAt === undefined)
        : false;
      client = free.find((c) => c.index === f.client && (f.target === 'drawn' || live(c))) ?? free.find(live) ?? free.find((c) => c.index === f.client);
      if (!client) return void history.note(`fault ${f.kind}: every client is under a fault, skipped`);
      client.faulted = true;
    }
    try {
      await runFaultOn(f, /** @type {Client} */ (client));
    } finally {
      if (clientFault && client) client.faulted = false;
    }
  }

  /** @param {Fault} f @param {Client} client */
  async function runFaultOn(f, client) {
    const label = `${f.kind}${UNTARGETED.includes(f.kind) ? '' : ` ${client.name}`}`;
    faultsRun[f.kind] = (faultsRun[f.kind] ?? 0) + 1;
    switch (f.kind) {
      case 'reset-cut':
      case 'silent-cut':
      case 'slow-replies': {
        history.note(`fault ${label} for ${f.ms} ms`);
        if (f.kind === 'reset-cut') client.proxy.cut();
        else if (f.kind === 'silent-cut') client.proxy.blackhole();
        else client.proxy.slowReplies(400);
        await sleep(f.ms);
        client.proxy.restore();
        history.note(`fault ${label} over`);
        return;
      }
      case 'session-kill': {
        const session = client.connection?.session;
        if (!client.ready || !session || client.connection.state !== 'connected') return void (faultsRun[f.kind]--);
        client.proxy.cut();
        const kill = { session: session.id, client: client.index, from: history.now(), restored: /** @type {number | undefined} */ (undefined) };
        history.kills.push(kill);
        history.note(`fault ${label}: session ${session.id} killed`);
        await killSession(lib, connectString, session.id, session.password).catch((e) => history.note(`killSession failed: ${e}`));
        await sleep(f.ms);
        client.proxy.restore();
        kill.restored = history.now();
        history.note(`fault ${label}: link back`);
        return;
      }
      case 'shutdown': {
        if (!client.ready) return void (faultsRun[f.kind]--);
        history.note(`fault ${label}: engine shutdown`);
        client.down();
        await client.engine.shutdown();
        await client.leadership?.close().catch(() => undefined);
        await client.connection.close();
        await sleep(f.ms);
        await client.open().catch((e) => history.errors.push(`reopen ${client.name}: ${e}`));
        return;
      }
      case 'foreign-delete':
      case 'foreign-set': {
        const node = await pickNode(f.pickLowest);
        if (!node) return void (faultsRun[f.kind]--);
        if (f.kind === 'foreign-set') {
          const data = random() < 0.3 ? lib.REVOKE_MARKER : `foreign-${f.at}`;
          history.note(`fault foreign-set ${node} = ${data}`);
          await obs.setData(node, Buffer.from(data)).catch(() => undefined);
          return;
        }
        /** @type {import('./history.mjs').Deletion} */
        const d = { node, sentAt: history.now() };
        history.deletions.push(d);
        try {
          await obs.delete(node);
          d.ok = true;
        } catch {
          d.ok = false;
        }
        d.repliedAt = history.now();
        history.note(`fault foreign-delete ${node}: ${d.ok ? 'deleted' : 'gone already'}`);
        return;
      }
      case 'leader-kill':
      case 'follower-kill':
      case 'follower-isolate': {
        if (!servers || serverFaulted) return void (faultsRun[f.kind]--, history.note(`fault ${f.kind}: skipped (${servers ? 'another server fault is on' : 'no ensemble'})`));
        serverFaulted = true;
        try {
          await servers.fault(f.kind, f.ms, (text) => history.note(`fault ${f.kind}: ${text}`));
        } finally {
          serverFaulted = false;
        }
        return;
      }
      case 'stall': {
        history.note(`fault stall ${f.ms} ms`);
        const until = performance.now() + f.ms;
        while (performance.now() < until);
        history.note('stall over');
        return;
      }
    }
  }

  const callers = clients.flatMap((c) => Array.from({ length: s.callers[c.index] }, (_, k) => caller(c, k)));
  /** @type {Promise<void>[]} */
  const faultRuns = [];
  const t0 = performance.now();
  for (const f of s.faults) {
    const wait = t0 + f.at - performance.now();
    if (wait > 0) await sleep(wait);
    faultRuns.push(runFault(f).catch((e) => void history.errors.push(`fault ${f.kind}: ${e.stack ?? e}`)));
  }
  const rest = t0 + s.durationMs - performance.now();
  if (rest > 0) await sleep(rest);
  await Promise.all(faultRuns);
  for (const p of proxies) p.restore();

  /** @type {string[]} */
  const extraViolations = [];
  if (s.recipe === 'leadership') {
    // Liveness: with every link back, someone leads within a session timeout and a bit.
    const bound = performance.now() + s.sessionTimeoutMs + 10_000;
    while (!clients.some((c) => c.leadership?.isLeader) && performance.now() < bound) await sleep(50);
    if (!clients.some((c) => c.leadership?.isLeader)) extraViolations.push(`nobody leads ${s.sessionTimeoutMs + 10_000} ms after the faults ended`);
  }
  running = false;
  stop.abort(new Error('schedule over'));
  const endAt = history.now();
  const finished = await Promise.race([Promise.all(callers).then(() => true), sleep(slackMs + s.holdMs[1] * 3, false, { ref: false })]);
  if (!finished) extraViolations.push(`callers still running ${slackMs + s.holdMs[1] * 3} ms after the end (an acquire or release hangs)`);
  history.note('schedule over');
  await Promise.all(clients.map((c) => c.close().catch((e) => history.errors.push(`close ${c.name}: ${e}`))));
  for (const p of proxies) await p.close();

  // Orphans: once every client closed, no ephemeral node may stay (a killed or expired session's
  // go with it; the others' at close). Bounded by a session timeout and some.
  let orphans = await ephemeralsUnder(obs, base);
  const orphanBound = performance.now() + s.sessionTimeoutMs + 5000;
  while (orphans.length > 0 && performance.now() < orphanBound) {
    await sleep(200);
    orphans = await ephemeralsUnder(obs, base);
  }
  await deleteTree(obs, base);
  await observer.close();

  const { violations, stats } = history.check({ slackMs, endAt });
  violations.push(...extraViolations, ...orphans.map((n) => `orphan: ${n} still there ${s.sessionTimeoutMs + 5000} ms after every client closed`));
  const elapsedMs = Math.round(performance.now() - started);
  log(`schedule ${s.seed}: ${violations.length === 0 ? 'ok' : `${violations.length} VIOLATION(S)`} in ${elapsedMs} ms; ${JSON.stringify({ ...stats, faults: faultsRun, warnings: warnings.length })}`);
  return { seed: s.seed, ok: violations.length === 0, violations, stats, orphans, warnings, faultsRun, elapsedMs, events: history.events };
}

/** LockNotAcquiredError (timeout, aborted, connection) and ConnectionClosedError (shut down) are the caller's lot. @param {any} lib @param {any} error */
function expectedAcquireError(lib, error) {
  return error instanceof lib.LockNotAcquiredError || error instanceof lib.ConnectionClosedError;
}

/**
 * Closes `sessionId` on the server from a client that attaches to it (test/support/helpers.ts's
 * killSession, on the given library).
 * @param {any} lib @param {string} connectString @param {string} sessionId @param {string} password
 */
export function killSession(lib, connectString, sessionId, password) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('killSession: could not attach to the session')), 20_000);
    /** @type {any} */
    const session = new lib.NativeZkSession(
      { connectString, sessionTimeoutMs: 4000, sessionId, sessionPassword: password },
      {
        onConnected: () => {
          clearTimeout(timer);
          setImmediate(() => {
            session.close();
            resolve(undefined);
          });
        },
        onConnecting: () => undefined,
        onClosed: () => {
          clearTimeout(timer);
          resolve(undefined);
        },
      },
    );
  });
}

/** Ephemeral nodes under `path` (recursively). @param {any} session @param {string} path @returns {Promise<string[]>} */
async function ephemeralsUnder(session, path) {
  const children = await session.getChildren(path).then((/** @type {any} */ r) => r.children, () => /** @type {string[]} */ ([]));
  const found = [];
  for (const child of children) {
    const full = `${path}/${child}`;
    const stat = await session.exists(full).catch(() => null);
    if (stat && BigInt(`0x${String(stat.ephemeralOwner).replace(/^0x/i, '') || '0'}`) !== 0n) found.push(`${full} (session 0x${String(stat.ephemeralOwner).replace(/^0x/i, '')})`);
    found.push(...(await ephemeralsUnder(session, full)));
  }
  return found;
}

/** @param {any} session @param {string} path */
async function deleteTree(session, path) {
  const children = await session.getChildren(path).then((/** @type {any} */ r) => r.children, () => /** @type {string[]} */ ([]));
  await Promise.all(children.map((c) => deleteTree(session, `${path}/${c}`)));
  await session.delete(path).catch(() => undefined);
}

export { describeHold };
