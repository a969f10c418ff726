// Runs the library's real ZkConnection and TypeScript session on virtual time against the model
// of ZooKeeper (zookeeper-model.mjs), under one world's faults (schedule.mjs), and checks the
// inequality the lost signal rests on: the client's lost signal fires before the leader can
// expire the session. Deterministic: a seed replays exactly.
//
// Checks, for each session the client saw connected:
// - safety: when the model's leader expires it, the client has already declared it lost (its
//   'lost' event, which aborts every held lease's signal). If the client's event loop is stalled
//   then, the check runs when the client runs again, after what was due before the expiry: no
//   code of the client may run past the expiry with the session still live;
// - the price of safety: a loss the client declared while the ensemble still held the session,
//   with how much longer the leader would have kept it;
// - liveness: a connected session again once the faults are over.
import { VirtualClock } from './virtual-clock.mjs';
import { ZooKeeperModel, PeerPipe } from './zookeeper-model.mjs';
import { Path } from './network.mjs';
import { describeWorld, drawWorld } from './schedule.mjs';
import { prng } from '../support/prng.mjs';

/**
 * What the simulation needs of the library (its sources in Jest, dist/ from the command line).
 * @typedef {object} SimulatedLibrary
 * @property {any} ZkConnection
 * @property {(options: { dial: any }) => any} wireSessionFactoryWith
 * @property {(timeoutMs: number) => number} lossMarginMs
 */

/**
 * @typedef {object} SimulationResult
 * @property {number} seed
 * @property {string} world
 * @property {string[]} violations
 * @property {{ sessions: number, losses: number, spuriousLosses: number, spuriousSlackMs: number[], expiries: number, unforeseeable: number, events: number, stuck: boolean }} stats
 * @property {string[]} trace the last lines of what happened (for a failing seed)
 */

/**
 * @param {SimulatedLibrary} lib
 * @param {number} seed
 * @param {{ traceLines?: number, world?: import('./schedule.mjs').World }} [options]
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
  const connection = new lib.ZkConnection(
    { connectString: model.connectString(world.clientServers), sessionTimeoutMs: world.askedTimeoutMs, serverTickTimeMs: world.tickMs, connectTimeoutMs: 600_000 },
    lib.wireSessionFactoryWith({ dial: model.dial }),
    clock.clientClock(),
  );

  /** @type {string[]} */
  const violations = [];
  const stats = { sessions: 0, losses: 0, spuriousLosses: 0, spuriousSlackMs: /** @type {number[]} */ ([]), expiries: 0, unforeseeable: 0, events: 0, stuck: false };
  /** Sessions the client saw connected, and when it declared each lost. */
  const connected = new Set();
  /** @type {Map<string, number>} */
  const lostAt = new Map();
  let closed = false;
  const hex = (/** @type {bigint} */ id) => id.toString(16);
  const believed = () => {
    const session = connection.session;
    return session ? `deadline ${(connection.sessionDeadline - lib.lossMarginMs(session.timeoutMs)).toFixed(1)} (timeout ${session.timeoutMs})` : 'no session';
  };
  connection.on('connected', (/** @type {string} */ id) => {
    connected.add(id);
    stats.sessions++;
    log(`client: connected ${id}, ${believed()}`);
  });
  connection.on('reconnected', (/** @type {string} */ id) => log(`client: reconnected ${id}, ${believed()}`));
  connection.on('suspended', () => log(`client: suspended, ${believed()}`));
  connection.on('lost', (/** @type {string} */ reason, /** @type {string} */ id) => {
    lostAt.set(id, clock.now);
    stats.losses++;
    const stored = [...model.stored.keys()].find((k) => hex(k) === id);
    const tracked = stored === undefined ? undefined : model.tracked.get(stored);
    if (stored !== undefined) {
      stats.spuriousLosses++;
      if (tracked) stats.spuriousSlackMs.push(tracked.expiresAt - clock.now);
    }
    log(`client: lost ${id} (${reason})${stored !== undefined ? `, the ensemble still holds it${tracked ? ` until ${tracked.expiresAt}` : ''}` : ''}`);
  });
  model.hooks.expired = (id, session) => {
    stats.expiries++;
    const expiredAt = clock.now;
    const sessionHex = hex(id);
    if (!connected.has(sessionHex)) return;
    const stalled = clock.clientStalled;
    const getter = believed();
    // A re-attach whose answer the client had not read yet shortened the timeout: nothing the
    // client knew said so (see docs/safety.md); counted, not a violation.
    const unforeseeable = session.lastTouch.by === 're-attach' && connection.session?.id === sessionHex && session.lastTouch.timeout < connection.session.timeoutMs;
    // A client event due now: it runs after whatever the client had due before the expiry.
    clock.at(
      expiredAt,
      () => {
        if (lostAt.has(sessionHex) || closed) return;
        if (unforeseeable) {
          stats.unforeseeable++;
          log(`session ${sessionHex} expired after a re-attach shortened its timeout to ${session.lastTouch.timeout} ms, before the client read that answer`);
          return;
        }
        violations.push(
          `session ${sessionHex} expired at ${expiredAt.toFixed(1)} while the client still held it` +
            `${stalled ? ` (client stalled until ${clock.stalledUntil.toFixed(1)})` : ''}; client's ${getter}`,
        );
        log(`VIOLATION: session ${sessionHex} expired, client still holds it`);
      },
      true,
    );
  };
  armFaults(world, model, clock, connection, log);
  startWorkload(connection, clock.clientClock(), () => closed);

  connection.connect().catch((/** @type {Error} */ error) => log(`client: connect failed: ${error.message}`));
  const settleMs = 4 * Math.max(world.askedTimeoutMs, world.maxTimeoutMs) + 2000;
  const end = world.durationMs + settleMs;
  const flush = () => new Promise((resolve) => setImmediate(resolve));
  await flush();
  for (;;) {
    const event = clock.next(end);
    if (!event) break;
    stats.events++;
    try {
      event.run();
    } catch (error) {
      violations.push(`threw at ${clock.now.toFixed(1)}: ${error instanceof Error ? error.stack : String(error)}`);
    }
    if (event.client) await flush();
  }
  stats.stuck = connection.state !== 'connected';
  if (stats.stuck) log(`client: not connected at the end (${connection.state})`);
  closed = true;
  void connection.close().catch(() => undefined);
  for (let event = clock.next(Infinity), n = 0; event && n < 10_000; event = clock.next(Infinity), n++) {
    try {
      event.run();
    } catch {
      // after the end: nothing to check
    }
    if (event.client) await flush();
  }
  return { seed, world: describeWorld(world), violations, stats, trace: trace.slice(-keep) };
}

/**
 * Schedules each fault; the ones that wait for a handshake are armed at their time.
 * @param {import('./schedule.mjs').World} world
 * @param {ZooKeeperModel} model
 * @param {VirtualClock} clock
 * @param {any} connection
 * @param {(line: string) => void} log
 */
function armFaults(world, model, clock, connection, log) {
  /** The server of the client's newest link. */
  let current = model.servers[0];
  /** Armed: on the next ConnectRequest the client writes / the next ConnectResponse a server sends. @type {((server: any) => void)[]} */
  let onConnectRequest = [];
  /** @type {((server: any) => void)[]} */
  let onConnectResponse = [];
  model.onLink = (link, server) => {
    current = server;
    link.onClientWrite = (_frame, index) => {
      if (index !== 0) return;
      const armed = onConnectRequest;
      onConnectRequest = [];
      for (const run of armed) run(server);
    };
    const send = link.serverSend.bind(link);
    let first = true;
    link.serverSend = (frame) => {
      send(frame);
      if (!first) return;
      first = false;
      const armed = onConnectResponse;
      onConnectResponse = [];
      for (const run of armed) run(server);
    };
  };
  const serverOf = (/** @type {'current' | number} */ which) => (which === 'current' ? current : model.servers[(which - 1) % model.servers.length]);
  const followerOf = (/** @type {'current' | number} */ which) => {
    const s = serverOf(which);
    return s === model.leader ? model.servers.find((x) => x !== model.leader) : s;
  };
  const pipes = (/** @type {any} */ f, /** @type {'to' | 'from' | 'both'} */ direction) =>
    direction === 'to' ? [f.toLeader] : direction === 'from' ? [f.fromLeader] : [f.toLeader, f.fromLeader];
  const silence = (/** @type {any} */ server, /** @type {number} */ ms) => {
    server.path.silentUntil = Math.max(server.path.silentUntil, clock.now + ms);
    log(`fault: path to server ${server.id} silent for ${ms} ms`);
  };
  const cutPeer = (/** @type {any} */ f, /** @type {'to' | 'from' | 'both'} */ direction, /** @type {number} */ ms) => {
    if (!f) return;
    for (const pipe of pipes(f, direction)) pipe.cut = true;
    log(`fault: follower ${f.id} cut ${direction} the leader for ${ms} ms`);
    clock.after(ms, () => {
      for (const pipe of pipes(f, direction)) pipe.cut = false;
    });
  };
  for (const fault of world.faults) {
    clock.at(fault.at, () => {
      switch (fault.kind) {
        case 'stall':
          clock.stallClient(fault.ms);
          return log(`fault: client stalled for ${fault.ms} ms`);
        case 'handshake-stall':
          onConnectRequest.push(() => {
            clock.stallClient(fault.ms);
            log(`fault: client stalled ${fault.ms} ms right after its ConnectRequest`);
          });
          // Some handshake must come: reset the current link.
          for (const c of current.connections) c.link.reset();
          return;
        case 'silence':
          return silence(serverOf(fault.server), fault.ms);
        case 'silence-after-connect':
          onConnectResponse.push((server) => clock.after(fault.delayMs, () => silence(server, fault.ms)));
          return;
        case 'reset': {
          const server = serverOf(fault.server);
          log(`fault: links to server ${server.id} reset`);
          for (const c of server.connections) c.link.reset();
          return;
        }
        case 'latency': {
          const server = serverOf(fault.server);
          server.path.latencyMs = fault.latencyMs;
          log(`fault: path to server ${server.id} ${fault.latencyMs} ms one way for ${fault.ms} ms`);
          clock.after(fault.ms, () => (server.path.latencyMs = new Path().latencyMs));
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
          onConnectResponse.push((server) => clock.after(fault.delayMs, () => server !== model.leader && cutPeer(server, 'to', fault.ms)));
          return;
        case 'restart': {
          const server =
            fault.server === 'current' ? current : fault.server === 'leader' ? model.leader : model.servers.find((s) => s !== model.leader && s.role !== 'down');
          if (!server || server.role === 'down') return;
          log(`fault: server ${server.id} (${server.role}) restarts, down ${fault.downMs} ms${fault.limits ? `, then session timeouts ${fault.limits.min}..${fault.limits.max}` : ''}`);
          server.restart(fault.downMs, fault.limits);
          return;
        }
      }
    });
  }
  void connection;
}

/**
 * What a lock holder asks of the session: creates and deletes of ephemeral nodes, reads, now and
 * then (errors are expected under faults and ignored).
 * @param {any} connection
 * @param {{ setTimeout: (run: () => void, ms: number) => unknown, random: () => number }} clock
 * @param {() => boolean} done
 */
function startWorkload(connection, clock, done) {
  /** @type {string[]} */
  const mine = [];
  const step = () => {
    if (done()) return;
    const session = connection.state === 'connected' ? connection.session : undefined;
    if (session) {
      const r = clock.random();
      const ignore = () => undefined;
      if (r < 0.35) session.create('/sim/n-', Buffer.from('x'), 3).then((/** @type {string} */ path) => mine.push(path), ignore);
      else if (r < 0.6 && mine.length > 0) session.delete(/** @type {string} */ (mine.shift())).catch(ignore);
      else if (r < 0.8) session.exists('/sim/n-0000000001').catch(ignore);
      else session.getChildren('/sim').catch(ignore);
    }
    clock.setTimeout(step, 20 + clock.random() * 400);
  };
  clock.setTimeout(step, 50);
}
