// A model of ZooKeeper's session tracking, as 3.8 does it, for the session simulation:
// - the leader alone expires sessions, in buckets of tickTime (ExpiryQueue: a touch at t moves the
//   session's expiry to the first tick boundary after t + its timeout, earlier or later);
// - a server touches a session on every packet of its connection; a follower keeps its touches
//   and reports them (with each connection's negotiated timeout) in its reply to the leader's
//   ping, every tickTime/2; the leader touches them when that reply arrives;
// - a follower answers pings and reads itself; writes, syncs, createSession and the
//   revalidation of a re-attach go to the leader and come back, each way over its link;
// - answers to one connection go out in the order of its requests (a ping waits behind a sync);
// - a new session's clock starts when the leader processes its createSession, before the
//   answer; a re-attach touches the session with the timeout negotiated there (possibly shorter);
// - a follower that hears nothing from the leader for syncLimit ticks stops serving (closes its
//   clients) until it rejoins; the leader drops a follower it has not heard from as long;
// - a new leader (after a kill) or a restarted standalone server tracks every session again
//   from its start, with the timeout it was created with; a restart may bring other min/max
//   session timeouts.
import { Link, Path } from './network.mjs';
import { Err, Op, PING_XID, Reader, SET_WATCHES_XID, Writer } from './wire.mjs';

/**
 * @typedef {object} ModelConfig
 * @property {number} servers 1 (standalone) or 3
 * @property {number} tickMs
 * @property {number} syncLimit
 * @property {number} minTimeoutMs
 * @property {number} maxTimeoutMs
 * @property {(line: string) => void} trace
 */

/** @typedef {{ timeout: number, password: Buffer }} StoredSession */
/**
 * `lastTouch`: what set the expiry last (a request on the leader, a follower's report, a re-attach, the tracking's start).
 * @typedef {{ expiresAt: number, lastTouch: { by: 'request' | 'report' | 're-attach' | 'start', timeout: number } }} TrackedSession
 */

export class ZooKeeperModel {
  /** @type {Server[]} */
  servers = [];
  /** @type {Server | undefined} the current leader (undefined during an election) */
  leader;
  /** Sessions in the data tree (committed; survive leader changes). @type {Map<bigint, StoredSession>} */
  stored = new Map();
  /** The leader's session tracker. @type {Map<bigint, TrackedSession>} */
  tracked = new Map();
  /** @type {Map<string, { owner: bigint, czxid: bigint }>} */
  nodes = new Map();
  zxid = 1n;
  nextSessionId = 0x1000n;
  /** Listeners of the leader's decisions (the checker). */
  hooks = {
    /** @type {(id: bigint, timeoutMs: number) => void} */ created: () => undefined,
    /** @type {(id: bigint, session: TrackedSession) => void} */ expired: () => undefined,
  };

  /**
   * @param {import('./virtual-clock.mjs').VirtualClock} clock
   * @param {ModelConfig} config
   */
  constructor(clock, config) {
    this.clock = clock;
    this.config = config;
    for (let id = 1; id <= config.servers; id++) this.servers.push(new Server(this, id));
    this.leader = this.servers[config.servers === 1 ? 0 : 2];
    this.leader.role = 'leader';
    for (const s of this.servers) if (s !== this.leader) s.follow();
    this.expireEveryTick();
    this.pingEveryHalfTick();
  }

  get tick() {
    return this.config.tickMs;
  }

  /** `10.0.0.1:2181,...`: the connect string of the servers (of `ids` only, if given). @param {number[]} [ids] */
  connectString(ids) {
    return this.servers
      .filter((s) => !ids || ids.includes(s.id))
      .map((s) => `${s.host}:2181`)
      .join(',');
  }

  /** The client's Dial (WireSessionOptions.dial). */
  dial = (/** @type {{ host: string }} */ address) => {
    const server = this.servers.find((s) => s.host === address.host);
    if (!server) throw new Error(`no server at ${address.host}`);
    return server.accept().socket;
  };

  /** Hook for the checker and the triggers: every link the client opens. @type {(link: Link, server: Server) => void} */
  onLink = () => undefined;

  /** The first tick boundary after `time` (ExpiryQueue.roundToNextInterval). @param {number} time */
  roundUp(time) {
    return (Math.floor(time / this.tick) + 1) * this.tick;
  }

  /**
   * The leader touches a session (SessionTrackerImpl.touchSession).
   * @param {bigint} id @param {number} timeout @param {TrackedSession['lastTouch']['by']} by
   */
  touch(id, timeout, by) {
    const session = this.tracked.get(id);
    if (!session) return false;
    session.expiresAt = this.roundUp(this.clock.now + timeout);
    session.lastTouch = { by, timeout };
    return true;
  }

  /** @private */
  expireEveryTick() {
    const run = () => {
      const now = this.clock.now;
      if (this.leader) {
        for (const [id, session] of this.tracked) if (session.expiresAt <= now) this.closeSession(id, 'expired');
      }
      for (const server of this.servers) server.checkSync();
      this.clock.at(this.roundUp(now), run);
    };
    this.clock.at(this.tick, run);
  }

  /** @private The leader's pings to its followers, whose replies carry their touches. */
  pingEveryHalfTick() {
    const run = () => {
      const leader = this.leader;
      if (leader) {
        for (const follower of this.servers) {
          if (follower.role !== 'follower' || !leader.followers.has(follower)) continue;
          follower.fromLeader.send(() => follower.onLeaderPing(leader));
        }
      }
      this.clock.after(this.tick / 2, run);
    };
    this.clock.after(this.tick / 2, run);
  }

  /** The leader ends a session: expired, or closed by its client. @param {bigint} id @param {'expired' | 'closed'} why */
  closeSession(id, why) {
    const session = this.tracked.get(id);
    if (!session) return;
    this.tracked.delete(id);
    this.stored.delete(id);
    for (const [path, node] of this.nodes) if (node.owner === id) this.nodes.delete(path);
    this.zxid++;
    this.config.trace(`leader ${this.leader?.id}: session ${id.toString(16)} ${why}`);
    if (why === 'expired') this.hooks.expired(id, session);
    for (const server of this.servers) {
      if (server === this.leader) server.sessionClosed(id);
      else if (server.role === 'follower') server.fromLeader.send(() => server.sessionClosed(id));
    }
  }

  /** A leader is elected among the servers that are up (after a kill): it tracks every stored session anew. */
  elect() {
    const candidates = this.servers.filter((s) => s.role !== 'down');
    if (candidates.length * 2 <= this.servers.length) return; // no quorum: try again later
    const leader = candidates[candidates.length - 1];
    this.leader = leader;
    leader.role = 'leader';
    leader.followers.clear();
    this.startTracking();
    this.config.trace(`server ${leader.id} leads`);
    for (const s of candidates) if (s !== leader) s.follow();
  }

  /** The leader's tracker from the data tree: each session's clock starts now, with the timeout it was created with. */
  startTracking() {
    this.tracked.clear();
    for (const [id, stored] of this.stored) this.tracked.set(id, { expiresAt: this.roundUp(this.clock.now + stored.timeout), lastTouch: { by: 'start', timeout: stored.timeout } });
  }

  /**
   * Runs `process` at the leader on behalf of `server` (at once on the leader itself, else over
   * the follower's link and back), then `answer` with its result at `server`. Lost when a link
   * drops it or the roles changed meanwhile.
   * @template T
   * @param {Server} server
   * @param {(leader: Server) => T} process
   * @param {(result: T) => void} answer
   */
  viaLeader(server, process, answer) {
    const leader = this.leader;
    if (!leader) return;
    const committed = (/** @type {() => void} */ then) => {
      const delay = this.commitDelay(leader);
      if (delay !== Infinity) this.clock.after(delay, () => this.leader === leader && then());
    };
    if (server === leader) {
      const result = process(leader);
      return committed(() => answer(result));
    }
    if (server.role !== 'follower') return;
    server.toLeader.send(() => {
      if (this.leader !== leader || !leader.followers.has(server)) return;
      const result = process(leader);
      committed(() => server.fromLeader.send(() => server.role === 'follower' && answer(result)));
    });
  }

  /**
   * How long the leader waits for a quorum to acknowledge a proposal: the quickest follower's
   * round trip (none on a standalone server); never without a quorum.
   * @param {Server} leader
   */
  commitDelay(leader) {
    if (this.servers.length === 1) return 0.05;
    let best = Infinity;
    for (const f of leader.followers.keys()) if (!f.toLeader.cut && !f.fromLeader.cut) best = Math.min(best, f.toLeader.lagMs + f.fromLeader.lagMs);
    return best;
  }
}

/** One direction between a follower and the leader: in order, `lagMs` late; a cut drops what is sent. */
export class PeerPipe {
  static DEFAULT_LAG_MS = 1;
  lagMs = PeerPipe.DEFAULT_LAG_MS;
  cut = false;
  /** @private */
  lastArrival = 0;
  /** @param {import('./virtual-clock.mjs').VirtualClock} clock */
  constructor(clock) {
    this.clock = clock;
  }
  /** @param {() => void} deliver */
  send(deliver) {
    if (this.cut) return;
    this.lastArrival = Math.max(this.clock.now + this.lagMs, this.lastArrival);
    this.clock.at(this.lastArrival, deliver);
  }
}

/** A client connection on a server. */
class Connection {
  /** @type {bigint | undefined} */
  sessionId;
  timeout = 0;
  /** @type {'handshake' | 'open' | 'closed'} */
  state = 'handshake';
  /** Answers in request order: each waits until ready. @type {{ frame: Buffer | undefined, close?: boolean }[]} */
  answers = [];
  /** @param {Server} server @param {Link} link */
  constructor(server, link) {
    this.server = server;
    this.link = link;
  }
}

class Server {
  /** @type {'leader' | 'follower' | 'looking' | 'down'} */
  role = 'looking';
  /** @type {Set<Connection>} */
  connections = new Set();
  /** A follower's touches since its last ping reply: session → its connection's timeout. @type {Map<bigint, number>} */
  touches = new Map();
  lastFromLeader = 0;
  /** The leader's followers and when it last heard from each. @type {Map<Server, number>} */
  followers = new Map();

  /** @param {ZooKeeperModel} model @param {number} id */
  constructor(model, id) {
    this.model = model;
    this.id = id;
    this.host = `10.0.0.${id}`;
    this.path = new Path();
    this.toLeader = new PeerPipe(model.clock);
    this.fromLeader = new PeerPipe(model.clock);
    this.minTimeoutMs = model.config.minTimeoutMs;
    this.maxTimeoutMs = model.config.maxTimeoutMs;
  }

  get clock() {
    return this.model.clock;
  }

  /** Serving clients: the leader, or a follower in sync with it. */
  get serving() {
    return this.role === 'leader' || this.role === 'follower';
  }

  accept() {
    const link = new Link(this.clock, this.path, this.role !== 'down');
    const connection = new Connection(this, link);
    this.connections.add(connection);
    link.onData = (frame) => this.received(connection, frame);
    link.onClose = () => {
      connection.state = 'closed';
      this.connections.delete(connection);
    };
    this.model.onLink(link, this);
    return link;
  }

  /** Joins the leader (a follower that was looking, or restarted). */
  follow() {
    if (this.serving) this.stopServing();
    this.role = 'looking';
    const join = () => {
      if (this.role !== 'looking' || !this.model.leader) return;
      const leader = this.model.leader;
      this.toLeader.send(() => {
        if (this.model.leader !== leader || this.role === 'down') return;
        leader.followers.set(this, this.clock.now);
        this.fromLeader.send(() => {
          if (this.model.leader !== leader || this.role !== 'looking') return;
          this.role = 'follower';
          this.lastFromLeader = this.clock.now;
          this.model.config.trace(`server ${this.id} follows ${leader.id}`);
        });
      });
    };
    join();
    const retry = () => {
      if (this.role !== 'looking') return;
      join();
      this.clock.after(this.model.tick, retry);
    };
    this.clock.after(this.model.tick, retry);
  }

  /** A follower gets the leader's ping and replies with its touches. @param {Server} leader */
  onLeaderPing(leader) {
    if (this.role !== 'follower') return;
    this.lastFromLeader = this.clock.now;
    const touches = [...this.touches];
    this.touches.clear();
    this.toLeader.send(() => {
      if (this.model.leader !== leader || !leader.followers.has(this)) return;
      leader.followers.set(this, this.clock.now);
      for (const [id, timeout] of touches) this.model.touch(id, timeout, 'report');
    });
  }

  /** Each tick: the syncLimit checks, on both sides. */
  checkSync() {
    const limit = this.model.config.syncLimit * this.model.tick;
    const now = this.clock.now;
    if (this.role === 'leader') {
      for (const [follower, heard] of this.followers) {
        if (now - heard > limit) {
          this.followers.delete(follower);
          this.model.config.trace(`leader ${this.id} drops follower ${follower.id}`);
        }
      }
    } else if (this.role === 'follower' && now - this.lastFromLeader > limit) {
      this.model.config.trace(`server ${this.id} lost the leader`);
      this.stopServing();
      this.follow();
    }
  }

  /** Closes every client connection (going LOOKING, shut down). */
  stopServing() {
    for (const connection of this.connections) connection.link.serverClose();
    this.connections.clear();
    this.touches.clear();
  }

  /** Killed (`restartAfterMs` later it comes back, with `limits` if given). @param {number} downMs @param {{ min: number, max: number }} [limits] */
  restart(downMs, limits) {
    const wasLeader = this.role === 'leader';
    this.role = 'down';
    for (const connection of this.connections) connection.link.reset();
    this.connections.clear();
    this.touches.clear();
    this.followers.clear();
    const model = this.model;
    if (wasLeader) {
      model.leader = undefined;
      model.tracked.clear();
      // The followers see the leader's links close, stop serving and elect another.
      for (const s of model.servers) if (s.role === 'follower') s.fromLeader.send(() => s.role === 'follower' && (s.stopServing(), (s.role = 'looking')));
      if (model.servers.length > 1) this.clock.after(Math.max(200, model.tick * 2), () => model.elect());
    }
    this.clock.after(downMs, () => {
      if (limits) {
        this.minTimeoutMs = limits.min;
        this.maxTimeoutMs = limits.max;
      }
      if (model.servers.length === 1) {
        this.role = 'leader';
        model.leader = this;
        model.startTracking();
        model.config.trace(`server ${this.id} up again (standalone)`);
      } else if (!model.leader) {
        this.role = 'looking';
        model.elect();
        if (this.role === 'looking') this.follow();
      } else this.follow();
    });
  }

  /** A session the leader closed: its connections here go. @param {bigint} id */
  sessionClosed(id) {
    for (const connection of this.connections) {
      if (connection.sessionId === id) {
        connection.link.serverClose();
        this.connections.delete(connection);
      }
    }
  }

  /** @private @param {Connection} connection @param {Buffer} frame */
  received(connection, frame) {
    if (connection.state === 'closed') return;
    if (!this.serving) {
      connection.link.serverClose();
      this.connections.delete(connection);
      return;
    }
    const reader = new Reader(frame.subarray(4));
    if (connection.state === 'handshake') return this.handshake(connection, reader);
    const id = /** @type {bigint} */ (connection.sessionId);
    // Every packet touches the session where it arrives (ZooKeeperServer.touch).
    if (this.role === 'leader') this.model.touch(id, connection.timeout, 'request');
    else this.touches.set(id, connection.timeout);
    const xid = reader.int();
    const type = reader.int();
    const reply = (/** @type {number} */ err, /** @type {(w: Writer) => void} */ body = () => undefined) => {
      const w = new Writer().int(xid).long(this.model.zxid).int(err);
      if (err === Err.OK) body(w);
      return w.frame();
    };
    switch (type) {
      case Op.ping:
        return this.answerNow(connection, reply(Err.OK));
      case Op.setWatches:
        return this.answerNow(connection, reply(Err.OK));
      case Op.exists:
      case Op.getData: {
        const path = reader.string();
        const node = this.model.nodes.get(path);
        if (!node) return this.answerNow(connection, reply(Err.NONODE));
        return this.answerNow(connection, reply(Err.OK, (w) => (type === Op.getData && w.buffer(Buffer.alloc(0)), w.stat({ czxid: node.czxid, numChildren: 0, ephemeralOwner: node.owner }))));
      }
      case Op.getChildren2: {
        const path = reader.string();
        const children = [...this.model.nodes.keys()].filter((p) => p.startsWith(`${path}/`)).map((p) => p.slice(path.length + 1));
        return this.answerNow(connection, reply(Err.OK, (w) => {
          w.int(children.length);
          for (const c of children) w.string(c);
          w.stat({ czxid: 1n, numChildren: children.length, ephemeralOwner: 0n });
        }));
      }
      case Op.sync: {
        const path = reader.string();
        return this.answerViaLeader(connection, () => reply(Err.OK, (w) => w.string(path)));
      }
      case Op.create:
      case Op.create2: {
        const path = reader.string();
        reader.buffer();
        const acl = reader.int();
        for (let i = 0; i < acl; i++) (reader.int(), reader.string(), reader.string());
        const flags = reader.int();
        return this.answerViaLeader(connection, () => {
          const model = this.model;
          if (!model.tracked.has(id)) return reply(Err.SESSIONEXPIRED);
          const name = flags & 2 ? `${path}${String(Number(model.zxid)).padStart(10, '0')}` : path;
          if (model.nodes.has(name)) return reply(Err.NODEEXISTS);
          model.zxid++;
          model.nodes.set(name, { owner: flags & 1 ? id : 0n, czxid: model.zxid });
          return reply(Err.OK, (w) => (w.string(name), type === Op.create2 && w.stat({ czxid: model.zxid, numChildren: 0, ephemeralOwner: id })));
        });
      }
      case Op.delete: {
        const path = reader.string();
        return this.answerViaLeader(connection, () => {
          const model = this.model;
          if (!model.nodes.delete(path)) return reply(Err.NONODE);
          model.zxid++;
          return reply(Err.OK);
        });
      }
      case Op.closeSession:
        return this.answerViaLeader(connection, () => (this.model.closeSession(id, 'closed'), reply(Err.OK)), true);
      default:
        return this.answerNow(connection, reply(Err.UNIMPLEMENTED));
    }
  }

  /** @private A ConnectRequest: a new session (createSession at the leader) or a re-attach (revalidated there). @param {Connection} connection @param {Reader} reader */
  handshake(connection, reader) {
    reader.int(); // protocolVersion
    reader.long(); // lastZxidSeen
    const asked = reader.int();
    const sessionId = reader.long();
    const password = Buffer.from(reader.buffer());
    const timeout = Math.min(this.maxTimeoutMs, Math.max(this.minTimeoutMs, asked));
    const model = this.model;
    const respond = (/** @type {number} */ granted, /** @type {bigint} */ id, /** @type {Buffer} */ pw) => {
      if (connection.state === 'closed') return;
      if (granted > 0) {
        connection.state = 'open';
        connection.sessionId = id;
        connection.timeout = granted;
      }
      connection.link.serverSend(new Writer().int(0).int(granted).long(id).buffer(pw).bool(false).frame());
      if (granted <= 0) {
        connection.link.serverClose();
        this.connections.delete(connection);
      }
    };
    if (sessionId === 0n) {
      const id = model.nextSessionId++;
      const pw = Buffer.alloc(16, Number(id & 0xffn));
      model.viaLeader(
        this,
        () => {
          model.stored.set(id, { timeout, password: pw });
          model.tracked.set(id, { expiresAt: model.roundUp(this.clock.now + timeout), lastTouch: { by: 'start', timeout } });
          model.zxid++;
          model.config.trace(`leader: session ${id.toString(16)} created (${timeout} ms) via server ${this.id}`);
          model.hooks.created(id, timeout);
        },
        () => respond(timeout, id, pw),
      );
    } else {
      model.viaLeader(
        this,
        () => {
          const stored = model.stored.get(sessionId);
          const valid = stored !== undefined && stored.password.equals(password) && model.touch(sessionId, timeout, 're-attach');
          if (valid) model.config.trace(`leader: session ${sessionId.toString(16)} re-attached at server ${this.id} (${timeout} ms)`);
          return valid;
        },
        (valid) => respond(valid ? timeout : 0, sessionId, valid ? password : Buffer.alloc(16)),
      );
    }
  }

  /** @private @param {Connection} connection @param {Buffer} frame */
  answerNow(connection, frame) {
    connection.answers.push({ frame });
    this.flush(connection);
  }

  /** @private @param {Connection} connection @param {() => Buffer} process @param {boolean} [close] */
  answerViaLeader(connection, process, close = false) {
    /** @type {{ frame: Buffer | undefined, close?: boolean }} */
    const answer = { frame: undefined, close };
    connection.answers.push(answer);
    this.model.viaLeader(this, process, (frame) => {
      answer.frame = frame;
      this.flush(connection);
    });
  }

  /** @private Sends the ready answers at the head, in order. @param {Connection} connection */
  flush(connection) {
    while (connection.answers.length > 0 && connection.answers[0].frame) {
      const answer = /** @type {{ frame: Buffer, close?: boolean }} */ (connection.answers.shift());
      connection.link.serverSend(answer.frame);
      if (answer.close) {
        connection.link.serverClose();
        this.connections.delete(connection);
        return;
      }
    }
  }
}

export { PING_XID, SET_WATCHES_XID };
