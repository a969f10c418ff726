// Runs one fault schedule (generate.mjs) against a ZooKeeper: every client is a session of its own
// in this process (its own ZkConnection and LockEngine behind its own TcpProxy, so that a cut hits
// that client alone), its callers loop on the drawn recipe, the faults come at their moments, and
// the history (history.mjs) is checked at the end, with the orphan check: once every client has
// closed, no ephemeral node may remain under the schedule's path within a session timeout.
// The library comes as an argument (`lib`: lib/core from the Jest test, dist/core from
// `npm run chaos`), so the same runner serves both. Servers of the run's own (`servers`,
// servers.mjs) may be killed, restarted, cut off or slowed; a shared one only hosts the clients.
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { TcpProxy } from '../../support/tcp-proxy.mjs';
import { describe as describeHold, History } from './history.mjs';
import { EDGE_FAULT_KINDS, prng, UNTARGETED } from './generate.mjs';

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
 * One client's proxies, one per server (in the order of the servers' ids), cut and restored
 * together; pin(i) leaves the client only server i.
 */
class ProxyGroup {
  /** @param {string[]} targets */
  static async start(targets) {
    return new ProxyGroup(await Promise.all(targets.map((t) => TcpProxy.start(t))));
  }
  /** @param {TcpProxy[]} proxies */
  constructor(proxies) {
    this.proxies = proxies;
    /** @type {number | undefined} */
    this.pinned = undefined;
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
    this.pinned = undefined;
  }
  /** Only server `index` takes the client: the others drop it and refuse it (until restore). @param {number} index */
  pin(index) {
    // A server an earlier pin() shut out takes the client again.
    if (this.pinned !== undefined && this.pinned !== index) this.proxies[index]?.restore();
    this.pinned = index;
    this.proxies.forEach((p, i) => i !== index && p.cut());
  }
  /** Drops the client's link (it connects again), keeping a pin. */
  relink() {
    this.proxies.forEach((p, i) => (this.pinned === undefined || i === this.pinned) && p.restore());
  }
  /** The server the client is linked to now (-1: none). */
  linkedIndex() {
    return this.proxies.findIndex((p) => p.connections > 0);
  }
  /**
   * The client's next link's ConnectResponse comes `holdMs` late (TcpProxy.stallNextHandshake);
   * `onPassed(index)` runs as it is passed on by server `index`'s proxy. Resolves the index, -1
   * if called off.
   * @param {number} holdMs @param {(index: number) => void} onPassed @param {{ newSessionOnly?: boolean }} [options]
   */
  async stallNextHandshake(holdMs, onPassed, options) {
    const index = await Promise.race(this.proxies.map((p, i) => p.stallNextHandshake(holdMs, () => onPassed(i), options).then((passed) => (passed ? i : -1))));
    this.cancelHandshakeStall();
    return index;
  }
  cancelHandshakeStall() {
    for (const p of this.proxies) p.cancelHandshakeStall();
  }
  async close() {
    await Promise.all(this.proxies.map((p) => p.close()));
  }
}

/**
 * `servers`: the run's own servers (servers.mjs: each client gets a proxy per server, and server
 * faults run on them); without it the server at `connectString` is shared, and no fault touches it.
 * `serverTickTimeMs`: the servers' tickTime, as the clients under test are told (the library's
 * default assumes 2000 ms, which makes their deadline more cautious than the servers need).
 * @param {{
 *   lib: any, connectString: string, schedule: Schedule, log?: (line: string) => void,
 *   servers?: import('./servers.mjs').ServerControl, serverTickTimeMs?: number,
 * }} params
 * @returns {Promise<ScheduleResult>}
 */
export async function runSchedule({ lib, connectString, schedule, log = () => undefined, servers, serverTickTimeMs }) {
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

  // The observer: the foreign client's writes and the orphan check. On the C client, so that what
  // it sees does not depend on the client under test (a reply-flood's listing, say). Its session
  // may be lost too (a restart can lower the timeout it gets, and a stall then outlasts it):
  // always the current one.
  const observer = new lib.ZkConnection({ connectString, sessionTimeoutMs: 10_000, client: 'addon' });
  await observer.connect();
  const obs = () => observer.session;
  for (const p of ['/fault-schedule', base]) await obs().create(p, Buffer.alloc(0), lib.CreateMode.PERSISTENT).catch(() => undefined);

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
  /** The parents the recipe queues in (a reply-flood's choice). */
  const queueParents =
    s.recipe !== 'multi-lock' ? nodeParents
    : (o.members ?? []).map((m) => (m === 'mutex-a' ? paths.a : m === 'mutex-b' ? paths.b : m === 'semaphore' ? `${paths.sem}/leases` : paths.rw));
  /** What a queued node's name has before its sequence there (after Curator's protected prefix). */
  const nodeMarker = (/** @type {string} */ parent) =>
    parent === paths.rw ? '__WRIT__' : parent === paths.leader ? 'latch-' : parent.endsWith('/leases') ? 'lease-' : 'lock-';
  /** Parents under a reply-flood now: their listing is not the foreign client's to read. @type {Set<string>} */
  const flooded = new Set();

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
      /** While above 0 (an edge fault on this client), its callers keep what they hold until its signal aborts. */
      this.keepHolds = 0;
    }

    /**
     * Holds on to a lease while an edge fault wants it kept: a holder at long work that listens
     * for its signal's abort event. It reads `signal.aborted` once, before: that getter checks
     * the deadline on the clock, which would fire the event on time and hide a late timer.
     * @param {AbortSignal} signal
     */
    async keep(signal) {
      if (this.keepHolds === 0 || signal.aborted) return;
      let aborted = false;
      const onAbort = () => void (aborted = true);
      signal.addEventListener('abort', onAbort, { once: true });
      while (this.keepHolds > 0 && !aborted && running) await sleep(10);
      signal.removeEventListener('abort', onAbort);
    }

    get name() {
      return `c${this.index}.${this.gen}`;
    }

    async open() {
      this.gen++;
      this.connection = new lib.ZkConnection({ connectString: this.proxy.connectString, sessionTimeoutMs: s.sessionTimeoutMs, serverTickTimeMs });
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
      await client.keep(lease.signal);
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
    if (flooded.has(parent)) return undefined;
    const children = await obs().getChildren(parent).then((/** @type {any} */ r) => r.children, () => /** @type {string[]} */ ([]));
    if (children.length === 0) return undefined;
    const sorted = [...children].sort((x, y) => x.slice(-10).localeCompare(y.slice(-10)));
    return `${parent}/${lowest ? sorted[0] : sorted[Math.floor(random() * sorted.length)]}`;
  }

  let serverFaulted = false;
  /** What a fault found wrong by itself (beyond the history's checks). @type {string[]} */
  const faultViolations = [];
  /** @param {Fault} f */
  async function runFault(f) {
    const clientFault = !UNTARGETED.includes(f.kind);
    /** A server fault that also takes a client along, if one is free. */
    const clientOptional = f.kind === 'server-restart' || f.kind === 'follower-lag';
    /** @type {Client | undefined} */
    let client = clients[f.client];
    if (clientFault) {
      const free = clients.filter((c) => !c.faulted);
      const live = (/** @type {Client} */ c) =>
        f.target === 'holder' ? history.holds.some((h) => h.client === c.index && h.releasedAt === undefined && h.abortedAt === undefined)
        : f.target === 'waiter' ? history.acquires.some((a) => a.client === c.index && a.settledAt === undefined)
        : false;
      client = free.find((c) => c.index === f.client && (f.target === 'drawn' || live(c))) ?? free.find(live) ?? free.find((c) => c.index === f.client);
      // An edge fault takes any free client rather than none, and its holders keep what they
      // hold through it (until their signal aborts): the deadline is what it tests.
      const edge = EDGE_FAULT_KINDS.includes(/** @type {any} */ (f.kind));
      if (edge) client ??= free[0];
      if (!client && !clientOptional) return void history.note(`fault ${f.kind}: every client is under a fault, skipped`);
      if (client) client.faulted = true;
      if (client && edge) client.keepHolds++;
    }
    try {
      await runFaultOn(f, /** @type {Client} */ (client));
    } finally {
      if (clientFault && client) {
        client.faulted = false;
        if (EDGE_FAULT_KINDS.includes(/** @type {any} */ (f.kind))) client.keepHolds--;
      }
    }
  }

  /** @param {Fault} f @param {Client} client */
  async function runFaultOn(f, client) {
    const label = `${f.kind}${UNTARGETED.includes(f.kind) || !client ? '' : ` ${client.name}`}`;
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
          await obs().setData(node, Buffer.from(data)).catch(() => undefined);
          return;
        }
        /** @type {import('./history.mjs').Deletion} */
        const d = { node, sentAt: history.now() };
        history.deletions.push(d);
        try {
          await obs().delete(node);
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
        if (servers?.kind !== 'ensemble' || serverFaulted) return void (faultsRun[f.kind]--, history.note(`fault ${f.kind}: skipped (${servers ? 'another server fault is on' : 'no ensemble'})`));
        serverFaulted = true;
        try {
          await servers.fault(f.kind, f.ms, (text) => history.note(`fault ${f.kind}: ${text}`));
        } finally {
          serverFaulted = false;
        }
        return;
      }
      case 'handshake-stall':
        return handshakeStall(f, client);
      case 'follower-lag':
      case 'server-restart': {
        if (!servers || serverFaulted || (f.kind === 'follower-lag' && servers.kind !== 'ensemble')) {
          return void (faultsRun[f.kind]--, history.note(`fault ${f.kind}: skipped (${servers ? 'another server fault is on' : 'no server of our own'})`));
        }
        serverFaulted = true;
        try {
          await (f.kind === 'follower-lag' ? followerLag(f, client, servers) : serverRestart(f, client, servers));
        } finally {
          serverFaulted = false;
        }
        return;
      }
      case 'reply-flood':
        return replyFlood(f);
      case 'stall': {
        history.note(`fault stall ${f.ms} ms`);
        const until = performance.now() + f.ms;
        while (performance.now() < until);
        history.note('stall over');
        return;
      }
    }
  }

  /**
   * Kills the client's session on the server (as session-kill does; its holds are excused from
   * then on), so that the client goes on to a new one, in the same connection and engine: its
   * callers' acquires wait for it and go out as soon as it is there. Undefined if it did not
   * connect within a session timeout.
   * @param {Client} client @param {string} why
   * @returns {Promise<import('./history.mjs').Kill | undefined>}
   */
  async function killForNewSession(client, why) {
    const until = performance.now() + s.sessionTimeoutMs;
    while (!(client.ready && client.connection.state === 'connected') && running && performance.now() < until) await sleep(20);
    const session = client.connection?.session;
    if (!client.ready || !session || client.connection.state !== 'connected') return undefined;
    const kill = { session: session.id, client: client.index, from: history.now(), restored: /** @type {number | undefined} */ (undefined) };
    history.kills.push(kill);
    history.note(`fault ${why}: session ${session.id} of ${client.name} killed, the next one is new`);
    await killSession(lib, connectString, session.id, session.password).catch((e) => history.note(`killSession failed: ${e}`));
    return kill;
  }

  /**
   * From now on nothing goes from `on.follower` to the leader (its acks, the session touches it
   * reports), while the leader's commits still reach it (`inMs` late): the follower's touches of
   * a session since its last report are lost. Returns the end of it.
   * @param {import('./servers.mjs').ServerControl} control @param {{ leader: number, follower: number }} on @param {number} inMs
   */
  function cutTouches(control, on, inMs) {
    control.lag(on.follower, on.leader, { outMs: Infinity, inMs });
    history.note(`fault: nothing from server ${on.follower} reaches the leader ${on.leader} (its touches cut off)`);
    return async () => {
      control.lag(on.follower, on.leader, { outMs: 0, inMs: 0 });
      await control.rejoin(on.follower);
      history.note(`fault: server ${on.follower} heard by the leader again`);
    };
  }

  /**
   * The client's next link (a re-attach, or a new session) gets its ConnectResponse late; then
   * the cut (HandshakeStall) for `f.ms`: its link silent, or, on the ensemble, its follower's
   * touches kept from the leader (a new session's clock started on the leader before the client
   * read its answer, and the client's first requests go out right after).
   * @param {Fault} f @param {Client} client
   */
  async function handshakeStall(f, client) {
    const stall = /** @type {import('./generate.mjs').HandshakeStall} */ (f.stall);
    const label = `handshake-stall ${client.name}`;
    if (!client.ready) return void (faultsRun[f.kind]--);
    // The touches' cut is a server fault: only if none is on (else the link's).
    const control = stall.cut === 'touches' && servers?.kind === 'ensemble' && !serverFaulted ? servers : undefined;
    /** @type {{ leader: number, follower: number } | undefined} */
    let on;
    if (control) {
      serverFaulted = true;
      const { leader, followers } = await control.roles();
      on = { leader, follower: followers[Math.floor(random() * followers.length)] };
      client.proxy.pin(control.ids.indexOf(on.follower));
    }
    history.note(`fault ${label}: the next ConnectResponse ${stall.holdMs} ms late (${stall.newSession ? 'a new session' : 're-attach'}${on ? ` on follower ${on.follower}` : ''}), then ${on ? "its follower's touches" : 'its link'} cut ${stall.silenceAfterMs} ms after for ${f.ms} ms`);
    /** @type {(() => Promise<void>) | undefined} */
    let uncut;
    const cut = () => {
      if (on && control) uncut = cutTouches(control, on, 0);
      else {
        client.proxy.blackhole();
        history.note(`fault ${label}: link silent`);
      }
    };
    const passed = client.proxy.stallNextHandshake(
      stall.holdMs,
      () => {
        if (stall.silenceAfterMs > 0) setTimeout(cut, stall.silenceAfterMs);
        else cut();
      },
      { newSessionOnly: stall.newSession },
    );
    /** @type {import('./history.mjs').Kill | undefined} */
    let kill;
    try {
      if (stall.newSession) kill = await killForNewSession(client, label);
      else client.proxy.relink();
      const index = stall.newSession && !kill ? -1 : await Promise.race([passed, sleep(stall.holdMs + s.sessionTimeoutMs * 2, -1)]);
      client.proxy.cancelHandshakeStall();
      if (index < 0) history.note(`fault ${label}: no new link came`);
      else {
        history.note(`fault ${label}: ConnectResponse passed on by server #${index + 1}'s proxy`);
        await sleep(stall.silenceAfterMs + f.ms);
      }
    } finally {
      client.proxy.cancelHandshakeStall();
      await uncut?.();
      if (on) serverFaulted = false;
      client.proxy.restore();
      if (kill) kill.restored = history.now();
    }
    history.note(`fault ${label} over`);
  }

  /**
   * A follower's quorum link to the leader lags (one way or both) for `f.ms`, with the client
   * moved onto it (maybe a new session of its, whose createSession's answer lags too; none if
   * every client is under a fault); then maybe that follower cut off, or only its touches (for a
   * new session: a few ms after its ConnectResponse reached the client), for a while.
   * @param {Fault} f @param {Client | undefined} client @param {import('./servers.mjs').ServerControl} control
   */
  async function followerLag(f, client, control) {
    const lag = /** @type {import('./generate.mjs').FollowerLag} */ (f.lag);
    const { leader, followers } = await control.roles();
    const id = followers[Math.floor(random() * followers.length)];
    const on = { leader, follower: id };
    const outMs = lag.way === 'to-follower' ? 0 : lag.lagMs;
    const inMs = lag.way === 'from-follower' ? 0 : lag.lagMs;
    const with_ = client ? `, ${client.name} on it${lag.newSession ? ' with a new session' : ''}` : '';
    history.note(`fault follower-lag: server ${id}'s link to the leader ${leader} lags ${lag.lagMs} ms (${lag.way}) for ${f.ms} ms${with_}`);
    control.lag(id, leader, { outMs, inMs });
    client?.proxy.pin(control.ids.indexOf(id));
    /** @type {(() => Promise<void>) | undefined} */
    let uncut;
    const afterMs = between(5, 60);
    const newSession = client && lag.newSession;
    const passed = newSession
      ? client.proxy.stallNextHandshake(0, () => lag.cut === 'touches' && setTimeout(() => (uncut = cutTouches(control, on, inMs)), afterMs), { newSessionOnly: true })
      : undefined;
    /** @type {import('./history.mjs').Kill | undefined} */
    let kill;
    try {
      if (newSession) kill = await killForNewSession(client, 'follower-lag');
      const came = passed && kill ? (await Promise.race([passed, sleep(f.ms + s.sessionTimeoutMs, false)])) : false;
      if (newSession) history.note(`fault follower-lag: ${came ? `${client.name}'s new session answered` : 'no new session came'}`);
      if (lag.cut === 'touches' && came) await sleep(afterMs + lag.cutMs);
      else {
        await sleep(f.ms);
        if (lag.cut === 'touches') {
          uncut = cutTouches(control, on, inMs);
          await sleep(lag.cutMs);
        } else if (lag.cut === 'isolate') {
          history.note(`fault follower-lag: server ${id} cut off from the others for ${lag.cutMs} ms`);
          control.isolate(id);
          control.lag(id, leader, { outMs: 0, inMs: 0 });
          await sleep(lag.cutMs);
        }
      }
    } finally {
      client?.proxy.cancelHandshakeStall();
      await uncut?.();
      control.lag(id, leader, { outMs: 0, inMs: 0 });
      if (lag.cut === 'isolate') await control.rejoin(id);
      client?.proxy.restore();
      if (kill) kill.restored = history.now();
    }
    history.note(`fault follower-lag: server ${id} keeps up again`);
  }

  /**
   * A clean stop and start of a server (maybe with a lower maxSessionTimeout); then, once the
   * client re-attached there (and holds a lock, if it gets one soon), its link silent for a
   * while (if a client is free).
   * @param {Fault} f @param {Client | undefined} client @param {import('./servers.mjs').ServerControl} control
   */
  async function serverRestart(f, client, control) {
    const restart = /** @type {import('./generate.mjs').ServerRestart} */ (f.restart);
    const { leader, followers } = await control.roles();
    const id = restart.server === 'follower' ? followers[Math.floor(random() * followers.length)] : leader;
    const bound = restart.maxSessionTimeoutMs ? `, back with maxSessionTimeout ${restart.maxSessionTimeoutMs}` : '';
    // On the ensemble the client waits elsewhere (its session lives on as it is), and moves
    // there once it serves: a quick re-attach that negotiates the new bound.
    const elsewhere = control.ids.find((other) => other !== id && (restart.server === 'follower' ? other === leader : true));
    if (client && restart.silenceMs > 0 && elsewhere !== undefined) client.proxy.pin(control.ids.indexOf(elsewhere));
    history.note(`fault server-restart: server ${id} (${restart.server}) stopped for ${restart.downMs} ms${bound}`);
    try {
      await control.restart(id, restart.downMs, restart.maxSessionTimeoutMs);
    } catch (error) {
      client?.proxy.restore();
      throw error;
    }
    history.note(`fault server-restart: server ${id} serves again`);
    if (restart.silenceMs === 0 || !running) return void client?.proxy.restore();
    if (!client) return void history.note('fault server-restart: every client is under a fault, no link silenced');
    const index = control.ids.indexOf(id);
    client.proxy.pin(index);
    const granted = restart.maxSessionTimeoutMs ? Math.min(s.sessionTimeoutMs, restart.maxSessionTimeoutMs) : undefined;
    const until = performance.now() + s.sessionTimeoutMs * 2;
    const there = () =>
      client.ready && client.connection.state === 'connected' && client.proxy.linkedIndex() === index && (granted === undefined || client.connection.sessionTimeoutMs === granted);
    // And holding something (it keeps it; else one of its callers gets one soon), for a while.
    const holding = () => history.holds.some((h) => h.client === client.index && h.releasedAt === undefined && h.abortedAt === undefined);
    while (!(there() && holding()) && performance.now() < until) await sleep(10);
    if (there()) {
      history.note(`fault server-restart: ${client.name} on server ${id} (timeout ${client.connection.sessionTimeoutMs} ms), link silent for ${restart.silenceMs} ms`);
      client.proxy.blackhole();
      await sleep(restart.silenceMs);
    } else history.note(`fault server-restart: ${client.name} did not re-attach to server ${id}`);
    client.proxy.restore();
  }

  /**
   * The flood's own claim: the clients under test can list it (a reply over the old 1 MiB frame
   * limit, under the default one). Losing a lease or failing an acquire over it is within the
   * history's contract, so the history alone would not notice a client that can never list the
   * lock. Tried through any ready client until one listing succeeds (a cut or a restart may fail
   * a few) or `withinMs` passed.
   * @param {string} parent @param {number} queued @param {number} withinMs
   */
  async function listThroughClients(parent, queued, withinMs) {
    const until = performance.now() + withinMs;
    /** @type {unknown} */
    let lastError = 'no client was connected';
    for (let attempt = 0; running || attempt === 0; attempt++) {
      const client = clients.filter((c) => c.ready && c.connection.state === 'connected')[attempt % clients.length] ?? clients.find((c) => c.ready);
      if (client) {
        const started = performance.now();
        try {
          const { children } = await client.connection.session.getChildren(parent);
          history.note(`fault reply-flood: ${client.name} listed ${children.length} nodes in ${Math.round(performance.now() - started)} ms`);
          return;
        } catch (error) {
          lastError = error;
        }
      }
      if (performance.now() >= until) break;
      await sleep(100);
    }
    faultViolations.push(`reply-flood: no client under test could list ${parent} with ${queued} queued nodes within ${withinMs} ms (the last attempt: ${lastError})`);
  }

  /**
   * A foreign client queues `nodes` nodes under one of the lock's parents (waiters' names, as
   * long as Curator's, all with one protected prefix), so that listing it takes a reply over
   * 1 MiB; it deletes them `f.ms` later (found by that prefix in the observer's listing, so that
   * a create whose answer was lost goes too). Persistent nodes: a session that ends with tens of
   * thousands of ephemeral nodes writes a closeSession of megabytes (their paths), which a
   * ZooKeeper 3.8 server with the default jute.maxbuffer writes to its log and then cannot read
   * back at its next start.
   * @param {Fault} f
   */
  async function replyFlood(f) {
    const { nodes } = /** @type {import('./generate.mjs').ReplyFlood} */ (f.flood);
    const candidates = queueParents.filter((p) => !flooded.has(p));
    const parent = candidates[Math.floor(random() * candidates.length)];
    if (parent === undefined) return void (faultsRun[f.kind]--);
    flooded.add(parent);
    const prefix = `_c_${randomUUID()}-`;
    const flooder = new lib.ZkConnection({ connectString, sessionTimeoutMs: s.sessionTimeoutMs });
    const bound = performance.now() + s.sessionTimeoutMs * 3;
    try {
      await flooder.connect();
      const session = () => flooder.session;
      await session().create(parent, Buffer.alloc(0), lib.CreateMode.PERSISTENT).catch(() => undefined);
      let started = performance.now();
      const name = `${parent}/${prefix}${nodeMarker(parent)}`;
      let created = 0;
      // In waves, again for those that failed (a link that dropped, a server cut off).
      while (created < nodes && performance.now() < bound) {
        const wave = Array.from({ length: Math.min(2000, nodes - created) }, () =>
          session().create(name, Buffer.alloc(0), lib.CreateMode.PERSISTENT_SEQUENTIAL, undefined, { batchable: true }).then(() => 1, () => 0),
        );
        created += (await Promise.all(wave)).reduce((a, b) => a + b, 0);
      }
      history.note(`fault reply-flood: ${created} nodes queued under ${parent} in ${Math.round(performance.now() - started)} ms, for ${f.ms} ms`);
      await Promise.all([sleep(f.ms), listThroughClients(parent, created, Math.max(f.ms, 3000))]);
      started = performance.now();
      let left = Infinity;
      while (left > 0 && performance.now() < bound + s.sessionTimeoutMs * 3) {
        const ours = await obs().getChildren(parent).then((/** @type {any} */ r) => r.children.filter((/** @type {string} */ c) => c.startsWith(prefix)), () => undefined);
        if (ours === undefined) {
          await sleep(200);
          continue;
        }
        left = ours.length;
        for (let i = 0; i < ours.length; i += 2000) {
          await Promise.all(ours.slice(i, i + 2000).map((/** @type {string} */ c) => session().delete(`${parent}/${c}`, -1, { batchable: true }).catch(() => undefined)));
        }
      }
      history.note(`fault reply-flood: ${parent} flood removed in ${Math.round(performance.now() - started)} ms${left > 0 ? ` but for ${left} nodes (the schedule's cleanup takes them)` : ''}`);
    } finally {
      await flooder.close();
      flooded.delete(parent);
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
  for (const p of proxies) {
    p.cancelHandshakeStall();
    p.restore();
  }

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
  // go with it; the others' at close). Bounded by a session timeout and some (a server never
  // grants more than asked). Read after a sync, so that a follower that lagged has caught up; a
  // listing that fails is no listing (the observer's session may be a new one, connecting).
  const orphanBound = performance.now() + s.sessionTimeoutMs + 5000;
  /** @type {string[] | undefined} */
  let orphans;
  /** @type {unknown} */
  let listingError;
  for (;;) {
    try {
      await obs().sync(base);
      orphans = await ephemeralsUnder(obs(), base);
      listingError = undefined;
    } catch (error) {
      listingError = error;
    }
    if ((orphans !== undefined && orphans.length === 0 && listingError === undefined) || performance.now() >= orphanBound) break;
    await sleep(200);
  }
  await deleteTree(obs(), base).catch((e) => warnings.push(`cleanup of ${base}: ${e}`));
  await observer.close();
  await servers?.reset();

  const { violations, stats } = history.check({ slackMs, endAt });
  violations.push(...extraViolations, ...faultViolations, ...(orphans ?? []).map((n) => `orphan: ${n} still there ${s.sessionTimeoutMs + 5000} ms after every client closed`));
  if (listingError !== undefined) violations.push(`orphan check: the observer could not list ${base} (${listingError}), the last time ${s.sessionTimeoutMs + 5000} ms after every client closed`);
  const elapsedMs = Math.round(performance.now() - started);
  log(`schedule ${s.seed}: ${violations.length === 0 ? 'ok' : `${violations.length} VIOLATION(S)`} in ${elapsedMs} ms; ${JSON.stringify({ ...stats, faults: faultsRun, warnings: warnings.length })}`);
  return { seed: s.seed, ok: violations.length === 0, violations, stats, orphans: orphans ?? [], warnings, faultsRun, elapsedMs, events: history.events };
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

/**
 * Ephemeral nodes under `path` (recursively); fails if a listing fails (a node gone meanwhile is
 * not an error).
 * @param {any} session @param {string} path @returns {Promise<string[]>}
 */
async function ephemeralsUnder(session, path) {
  const children = await session.getChildren(path).then(
    (/** @type {any} */ r) => r.children,
    (/** @type {any} */ e) => {
      if (e?.codeName === 'NONODE') return [];
      throw e;
    },
  );
  const found = [];
  for (const child of children) {
    const full = `${path}/${child}`;
    const stat = await session.exists(full);
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
