// Runs the library's real ZkConnection and TypeScript session (and, in lock worlds, its LockEngine
// and Mutex) on virtual time against the model of ZooKeeper (zookeeper-model.mjs), under one
// world's faults (schedule.mjs), one process per client, and checks the promise.
// Deterministic: a seed replays exactly.
//
// Checks:
// - the session's liveness, for each session a client saw connected: when the model's leader
//   expires it, that client has already declared it lost (its 'lost' event, which aborts every
//   held lease's signal). If the client's event loop is stalled then, the check runs when the
//   client runs again, after what it had due before the expiry: none of its code may run past the
//   expiry with the session still live;
// - in lock worlds, the lock's history (scripts/chaos/schedule/history.mjs, the real-time
//   schedules' checks): no two holders with live signals (a holder whose process was stalled
//   past its session's deadline is excused from then: it learns of the loss when it runs), tokens
//   that only grow, every acquire settled within its waitMs and a margin, every hold ended, no
//   unexpected error out of the library;
// - the price of safety: a loss the client declared while the ensemble still held the session,
//   with how much longer the leader would have kept it;
// - liveness: every client connected again once the faults are over.
import { VirtualClock } from './virtual-clock.mjs';
import { PeerPipe, ZooKeeperModel } from './zookeeper-model.mjs';
import { Path } from './network.mjs';
import { describeWorld, drawWorld } from './schedule.mjs';
import { prng } from '../support/prng.mjs';
import { History } from '../chaos/schedule/history.mjs';

/**
 * What the simulation needs of the library (its sources in Jest, dist/ from the command line).
 * @typedef {object} SimulatedLibrary
 * @property {any} ZkConnection
 * @property {(options: { dial: any }) => any} wireSessionFactoryWith
 * @property {(timeoutMs: number) => number} lossMarginMs
 * @property {any} [LockEngine] for lock worlds
 * @property {any} [Mutex]
 * @property {any} [LockNotAcquiredError]
 * @property {any} [ConnectionClosedError]
 */

/**
 * @typedef {object} SimulationResult
 * @property {number} seed
 * @property {string} world
 * @property {string[]} violations
 * @property {{ sessions: number, losses: number, spuriousLosses: number, spuriousSlackMs: number[], expiries: number, unforeseeable: number, holds: number, events: number, stuck: boolean }} stats
 * @property {string[]} trace the last lines of what happened (for a failing seed)
 */

const LOCK_PATH = '/locks/a';

/**
 * @param {SimulatedLibrary} lib
 * @param {number} seed
 * @param {{ traceLines?: number, historyLines?: number, world?: import("./schedule.mjs").World }} [options]
 * @returns {Promise<SimulationResult>}
 */
export async function simulate(lib, seed, options = {}) {
  const world = options.world ?? drawWorld(seed);
  const clock = new VirtualClock(prng(seed ^ 0x5bd1e995));
  /** @type {string[]} */
  const trace = [];
  const keep = options.traceLines ?? 300;
  const log = (/** @type {string} */ line) => {
    trace.push(`${clock.now.toFixed(1).padStart(9)} ${line}`);
    if (trace.length > keep * 2) trace.splice(0, trace.length - keep);
  };
  const model = new ZooKeeperModel(clock, {
    servers: world.servers,
    tickMs: world.tickMs,
    syncLimit: world.syncLimit,
    minTimeoutMs: world.minTimeoutMs,
    maxTimeoutMs: world.maxTimeoutMs,
    trace: log,
  });

  /** @type {string[]} */
  const violations = [];
  const stats = {
    sessions: 0, losses: 0, spuriousLosses: 0, spuriousSlackMs: /** @type {number[]} */ ([]), expiries: 0, unforeseeable: 0, holds: 0, events: 0, stuck: false,
  };
  let closed = false;
  const history = new History(() => clock.now);
  const clients = Array.from({ length: world.clients ?? 1 }, (_, index) => new SimulatedClient(index, lib, world, model, clock, log, history));
  /** Which client owns each session (hex). @type {Map<string, SimulatedClient>} */
  const owners = new Map();

  for (const client of clients) {
    const { connection } = client;
    const who = clients.length > 1 ? `client ${client.index}` : 'client';
    // Connected with the link down: every request fails at once, and a caller retrying on that spins.
    const linkUp = (/** @type {string} */ said) => {
      if (!connection.session?.isConnectedNatively) violations.push(`${who} said ${said} at ${clock.now.toFixed(1)} while its link was down`);
    };
    connection.on('connected', (/** @type {string} */ id) => {
      linkUp('connected');
      client.connected.add(id);
      owners.set(id, client);
      stats.sessions++;
      log(`${who}: connected ${id}, ${client.believed()}`);
    });
    connection.on('reconnected', (/** @type {string} */ id) => {
      linkUp('reconnected');
      log(`${who}: reconnected ${id}, ${client.believed()}`);
    });
    connection.on('suspended', () => log(`${who}: suspended, ${client.believed()}`));
    connection.on('lost', (/** @type {string} */ reason, /** @type {string} */ id) => {
      client.lostAt.set(id, clock.now);
      stats.losses++;
      const stored = [...model.stored.keys()].find((k) => k.toString(16) === id);
      const tracked = stored === undefined ? undefined : model.tracked.get(stored);
      if (stored !== undefined) {
        stats.spuriousLosses++;
        if (tracked) stats.spuriousSlackMs.push(tracked.expiresAt - clock.now);
      }
      log(`${who}: lost ${id} (${reason})${stored !== undefined ? `, the ensemble still holds it${tracked ? ` until ${tracked.expiresAt}` : ''}` : ''}`);
    });
  }

  model.hooks.expired = (id, session) => {
    stats.expiries++;
    const expiredAt = clock.now;
    const sessionHex = id.toString(16);
    const client = owners.get(sessionHex);
    if (!client?.connected.has(sessionHex)) return;
    const stalled = clock.clientStalled(client.index);
    const getter = client.believed();
    const current = client.connection.session;
    // A re-attach whose answer the client had not read yet shortened the timeout: nothing the
    // client knew said so (see docs/safety.md); counted, and its holds excused from the expiry on.
    if (session.lastTouch.by === 're-attach' && current?.id === sessionHex && session.lastTouch.timeout < current.timeoutMs) {
      stats.unforeseeable++;
      history.sessionExcuses.push({ session: sessionHex, from: expiredAt - history.t0, why: 'a re-attach shortened the timeout before the client read its answer' });
      log(`session ${sessionHex} expired after a re-attach shortened its timeout to ${session.lastTouch.timeout} ms, before the client read that answer`);
      return;
    }
    // An event of that client, due now: it runs after whatever the client had due before the expiry.
    clock.at(
      expiredAt,
      () => {
        if (client.lostAt.has(sessionHex) || closed) return;
        violations.push(
          `session ${sessionHex} of client ${client.index} expired at ${expiredAt.toFixed(1)} while the client still held it` +
            `${stalled ? ` (client stalled until ${clock.stalledUntil(client.index).toFixed(1)})` : ''}; client's ${getter}`,
        );
        log(`VIOLATION: session ${sessionHex} expired, client ${client.index} still holds it`);
      },
      client.index,
    );
  };
  armFaults(world, model, clock, clients, log, history);
  // The callers stop when the faults are over; the sessions keep going while things settle.
  for (const client of clients) client.start(() => closed || clock.now > world.durationMs);

  const settleMs = 4 * Math.max(world.askedTimeoutMs, world.maxTimeoutMs) + 2000;
  const end = world.durationMs + settleMs;
  const flush = () => new Promise((resolve) => setImmediate(resolve));
  // A loop that never lets virtual time move (a timer of 0 ms re-armed for ever, a chain of
  // immediates) is a hang of the real process: reported, and the world ends there.
  let sameTime = { at: -1, events: 0 };
  const run = async (/** @type {number} */ until, /** @type {number} */ limit = Infinity) => {
    for (let n = 0; n < limit; n++) {
      const event = clock.next(until);
      if (!event) return;
      stats.events++;
      sameTime = event.time === sameTime.at ? { at: sameTime.at, events: sameTime.events + 1 } : { at: event.time, events: 1 };
      if (sameTime.events > 200_000) {
        violations.push(`hang: ${sameTime.events} events at virtual time ${event.time.toFixed(1)} without time moving`);
        return;
      }
      try {
        event.run();
      } catch (error) {
        violations.push(`threw at ${clock.now.toFixed(1)}: ${error instanceof Error ? error.stack : String(error)}`);
      }
      if (event.client !== undefined) await flush();
    }
  };
  await flush();
  await run(end);
  for (const client of clients) {
    if (client.connection.state !== 'connected') {
      stats.stuck = true;
      log(`client ${client.index}: not connected at the end (${client.connection.state})`);
    }
  }
  // The end: the callers stop, every client closes (held leases lose, waits give up).
  closed = true;
  for (const client of clients) void client.close();
  await flush(); // what the close settled (rejected waits, aborted signals) runs now
  await run(clock.now + 30_000, 200_000);
  await flush();
  if (world.mutex) {
    const slackMs = 3 * Math.max(world.askedTimeoutMs, world.maxTimeoutMs) + 5000;
    const checked = history.check({ slackMs, endAt: clock.now });
    violations.push(...checked.violations);
    stats.holds = checked.stats.holds;
    if (checked.violations.length > 0) trace.push(...history.events.slice(-(options.historyLines ?? 80)).map((e) => `history ${e}`));
  }
  return { seed, world: describeWorld(world), violations, stats, trace: trace.slice(-keep) };
}

/** One process: its connection (and, in lock worlds, its engine and callers). */
class SimulatedClient {
  /** Sessions this client saw connected. @type {Set<string>} */
  connected = new Set();
  /** When it declared each lost. @type {Map<string, number>} */
  lostAt = new Map();
  /** @type {any} */
  engine;

  /**
   * @param {number} index
   * @param {SimulatedLibrary} lib
   * @param {import('./schedule.mjs').World} world
   * @param {ZooKeeperModel} model
   * @param {VirtualClock} clock
   * @param {(line: string) => void} log
   * @param {History} history
   */
  constructor(index, lib, world, model, clock, log, history) {
    this.index = index;
    this.lib = lib;
    this.world = world;
    this.clock = clock;
    this.log = log;
    this.history = history;
    this.clientClock = clock.clientClock(index);
    /** The server of this client's newest link. */
    this.current = model.servers[0];
    this.connection = new lib.ZkConnection(
      { connectString: model.connectString(world.clientServers), sessionTimeoutMs: world.askedTimeoutMs, serverTickTimeMs: world.tickMs, connectTimeoutMs: 600_000 },
      lib.wireSessionFactoryWith({ dial: model.dialFor(index) }),
      this.clientClock,
    );
  }

  /** When this client counts its session lost, as its clock-reading getters would say (no side effect). */
  believed() {
    const session = this.connection.session;
    return session ? `deadline ${this.lossAt().toFixed(1)} (timeout ${session.timeoutMs})` : 'no session';
  }

  lossAt() {
    const session = this.connection.session;
    return session ? this.connection.sessionDeadline - this.lib.lossMarginMs(session.timeoutMs) : -Infinity;
  }

  /** @param {() => boolean} done */
  start(done) {
    this.connection.connect().catch((/** @type {Error} */ error) => this.log(`client ${this.index}: connect failed: ${error.message}`));
    if (this.world.mutex) this.startMutexCallers(this.world.mutex, done);
    else this.startSessionWork(done);
  }

  close() {
    return this.connection.close().catch(() => undefined);
  }

  /** @param {number} ms */
  sleep(ms) {
    return new Promise((resolve) => this.clientClock.setTimeout(() => resolve(undefined), ms));
  }

  /**
   * What a lock holder asks of the session, with no lock: creates and deletes of ephemeral nodes,
   * reads, now and then (errors are expected under faults and ignored).
   * @param {() => boolean} done
   */
  startSessionWork(done) {
    /** @type {string[]} */
    const mine = [];
    const { connection, clientClock: clock } = this;
    const step = () => {
      if (done()) return;
      const session = connection.state === 'connected' ? connection.session : undefined;
      if (session) {
        const r = clock.random();
        const ignore = () => undefined;
        if (r < 0.35) session.create('/n-', Buffer.from('x'), 3).then((/** @type {string} */ path) => mine.push(path), ignore);
        else if (r < 0.6 && mine.length > 0) session.delete(/** @type {string} */ (mine.shift())).catch(ignore);
        else if (r < 0.8) session.exists('/n-0000000001').catch(ignore);
        else session.getChildren('/').catch(ignore);
      }
      clock.setTimeout(step, 20 + clock.random() * 400);
    };
    clock.setTimeout(step, 50);
  }

  /**
   * Callers that take the mutex in turns, as the real-time schedules' do, recording every acquire
   * and hold in the history.
   * @param {import('./schedule.mjs').MutexWork} work @param {() => boolean} done
   */
  startMutexCallers(work, done) {
    const { lib, history, index } = this;
    const random = this.clientClock.random;
    this.engine = new lib.LockEngine(this.connection, { app: 'simulation', instance: `c${index}` });
    this.engine.onWarning?.(() => undefined);
    const mutex = new lib.Mutex(this.engine, 'a', LOCK_PATH, { coalesce: work.coalesce, retainMs: work.retainMs, releaseInBackground: work.releaseInBackground });
    const expected = (/** @type {unknown} */ error) => error instanceof lib.LockNotAcquiredError || error instanceof lib.ConnectionClosedError;
    const caller = async (/** @type {string} */ owner) => {
      await this.connection.connect().catch(() => undefined);
      while (!done()) {
        const waitMs = work.waitMs[Math.floor(random() * work.waitMs.length)];
        const attempt = history.acquiring(owner, index, LOCK_PATH, waitMs);
        /** @type {any} */ let lease;
        try {
          lease = await mutex.acquire(waitMs === null ? {} : { waitMs });
          history.settled(attempt, 'granted');
        } catch (error) {
          const e = /** @type {any} */ (error);
          history.settled(attempt, `${e?.name}${e?.reason ? ` ${e.reason}` : ''}`);
          if (!expected(error)) history.errors.push(`${owner} acquire: ${e?.stack ?? e}`);
          await this.sleep(5 + random() * 20);
          continue;
        }
        const hold = history.grant({ owner, client: index, session: lease.sessionId, lock: LOCK_PATH, kind: 'exclusive', node: lease.path, token: lease.fencingToken }, lease.signal);
        await this.sleep(work.holdMs[0] + random() * (work.holdMs[1] - work.holdMs[0]));
        history.released(hold);
        await lease.release().catch((/** @type {any} */ e) => history.errors.push(`${owner} release: ${e?.stack ?? e}`));
        await this.sleep(work.pauseMs[0] + random() * (work.pauseMs[1] - work.pauseMs[0]));
      }
    };
    for (let c = 0; c < work.callers; c++) void caller(`c${index}.${c}`);
  }
}

/**
 * Schedules each fault; the ones that wait for a client's handshake are armed at their time.
 * @param {import('./schedule.mjs').World} world
 * @param {ZooKeeperModel} model
 * @param {VirtualClock} clock
 * @param {SimulatedClient[]} clients
 * @param {(line: string) => void} log
 * @param {History} history
 */
function armFaults(world, model, clock, clients, log, history) {
  /** Armed per client: on its next ConnectRequest / the next ConnectResponse a server sends it. */
  const onConnectRequest = clients.map(() => /** @type {((server: any) => void)[]} */ ([]));
  const onConnectResponse = clients.map(() => /** @type {((server: any) => void)[]} */ ([]));
  model.onLink = (link, server) => {
    const client = clients[link.client];
    client.current = server;
    link.onClientWrite = (_frame, index) => {
      if (index !== 0) return;
      for (const run of onConnectRequest[client.index].splice(0)) run(server);
    };
    const send = link.serverSend.bind(link);
    let first = true;
    link.serverSend = (frame) => {
      send(frame);
      if (!first) return;
      first = false;
      for (const run of onConnectResponse[client.index].splice(0)) run(server);
    };
  };
  const pipes = (/** @type {any} */ f, /** @type {'to' | 'from' | 'both'} */ direction) =>
    direction === 'to' ? [f.toLeader] : direction === 'from' ? [f.fromLeader] : [f.toLeader, f.fromLeader];
  /** A client's event loop blocked: a hold whose session's deadline passes meanwhile is excused from then (see History). */
  const stall = (/** @type {SimulatedClient} */ client, /** @type {number} */ ms) => {
    const lossAt = client.lossAt();
    const session = client.connection.session;
    if (session && lossAt >= clock.now && lossAt < clock.now + ms) {
      history.sessionExcuses.push({ session: session.id, from: lossAt - history.t0, why: "holder's process stalled past its session's deadline" });
    }
    clock.stallClient(client.index, ms);
  };
  const silence = (/** @type {any} */ server, /** @type {SimulatedClient} */ client, /** @type {number} */ ms) => {
    const path = server.pathFrom(client.index);
    path.silentUntil = Math.max(path.silentUntil, clock.now + ms);
    log(`fault: path from client ${client.index} to server ${server.id} silent for ${ms} ms`);
  };
  const cutPeer = (/** @type {any} */ f, /** @type {'to' | 'from' | 'both'} */ direction, /** @type {number} */ ms) => {
    if (!f) return;
    for (const pipe of pipes(f, direction)) pipe.cutOff();
    log(`fault: follower ${f.id} cut ${direction} the leader for ${ms} ms`);
    clock.after(ms, () => {
      for (const pipe of pipes(f, direction)) pipe.heal();
    });
  };
  for (const fault of world.faults) {
    const client = clients[(fault.client ?? 0) % clients.length];
    const serverOf = (/** @type {'current' | number} */ which) => (which === 'current' ? client.current : model.servers[(which - 1) % model.servers.length]);
    const followerOf = (/** @type {'current' | number} */ which) => {
      const s = serverOf(which);
      return s === model.leader ? model.servers.find((x) => x !== model.leader) : s;
    };
    clock.at(fault.at, () => {
      switch (fault.kind) {
        case 'stall':
          stall(client, fault.ms);
          return log(`fault: client ${client.index} stalled for ${fault.ms} ms`);
        case 'handshake-stall':
          onConnectRequest[client.index].push(() => {
            stall(client, fault.ms);
            log(`fault: client ${client.index} stalled ${fault.ms} ms right after its ConnectRequest`);
          });
          // Some handshake must come: reset the client's current link.
          for (const c of client.current.connections) if (c.link.client === client.index) c.link.reset();
          return;
        case 'silence':
          return silence(serverOf(fault.server), client, fault.ms);
        case 'silence-after-connect':
          onConnectResponse[client.index].push((server) => clock.after(fault.delayMs, () => silence(server, client, fault.ms)));
          return;
        case 'reset': {
          const server = serverOf(fault.server);
          log(`fault: links of client ${client.index} to server ${server.id} reset`);
          for (const c of server.connections) if (c.link.client === client.index) c.link.reset();
          return;
        }
        case 'latency': {
          const server = serverOf(fault.server);
          const path = server.pathFrom(client.index);
          path.latencyMs = fault.latencyMs;
          log(`fault: path from client ${client.index} to server ${server.id} ${fault.latencyMs} ms one way for ${fault.ms} ms`);
          clock.after(fault.ms, () => (path.latencyMs = new Path().latencyMs));
          return;
        }
        case 'peer-lag': {
          const f = followerOf(fault.follower);
          if (!f) return;
          for (const pipe of pipes(f, fault.direction)) pipe.lagMs = fault.lagMs;
          log(`fault: follower ${f.id} lags ${fault.lagMs} ms ${fault.direction} the leader for ${fault.ms} ms`);
          clock.after(fault.ms, () => {
            for (const pipe of pipes(f, fault.direction)) pipe.lagMs = PeerPipe.DEFAULT_LAG_MS;
          });
          return;
        }
        case 'peer-cut':
          return cutPeer(followerOf(fault.follower), fault.direction, fault.ms);
        case 'peer-cut-after-connect':
          onConnectResponse[client.index].push((server) => clock.after(fault.delayMs, () => server !== model.leader && cutPeer(server, 'to', fault.ms)));
          return;
        case 'foreign-delete': {
          // Someone else (an operator, a buggy client) deletes a node of the lock's queue.
          const leader = model.leader;
          const queue = leader?.tree.nodes.get(LOCK_PATH);
          if (!leader || !queue || queue.children.size === 0) return;
          const sorted = [...queue.children].sort((a, b) => a.slice(-10).localeCompare(b.slice(-10)));
          const name = fault.which === 'head' ? sorted[0] : fault.which === 'second' ? (sorted[1] ?? sorted[0]) : sorted[sorted.length - 1];
          const node = `${LOCK_PATH}/${name}`;
          log(`fault: a foreign client deletes ${name.slice(-10)} (${fault.which} of ${sorted.length})`);
          model.commit(leader, { type: 'delete', path: node });
          history.deletions.push({ node, sentAt: history.now(), repliedAt: history.now(), ok: true });
          return;
        }
        case 'restart': {
          const server =
            fault.server === 'current' ? client.current : fault.server === 'leader' ? model.leader : model.servers.find((s) => s !== model.leader && s.role !== 'down');
          if (!server || server.role === 'down') return;
          log(`fault: server ${server.id} (${server.role}) restarts, down ${fault.downMs} ms${fault.limits ? `, then session timeouts ${fault.limits.min}..${fault.limits.max}` : ''}`);
          server.restart(fault.downMs, fault.limits);
          return;
        }
      }
    });
  }
}
