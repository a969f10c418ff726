// A model of ZooKeeper's session tracking, as 3.8 does it, for the session simulation:
// - the leader alone expires sessions, in buckets of tickTime (ExpiryQueue: a touch at t moves the
//   session's expiry to the first tick boundary after t + its timeout, earlier or later);
// - a server touches a session on every packet of its connection; a follower keeps its touches
//   and reports them (with each connection's negotiated timeout) in its reply to the leader's
//   ping, every tickTime/2; the leader touches them when that reply arrives;
// - a follower answers pings and reads itself; writes, syncs, createSession and the
//   revalidation of a re-attach go to the leader and come back, each way over its link;
// - a connection's requests are carried out and answered in order (a read, a ping waits behind
//   the session's pending sync or write, and sees what that write did);
// - a new session's clock starts when the leader processes its createSession, before the
//   answer; a re-attach touches the session with the timeout negotiated there (possibly shorter);
// - a follower that hears nothing from the leader for syncLimit ticks stops serving (closes its
//   clients) until it rejoins; the leader drops a follower it has not heard from as long;
// - a new leader (after a kill) or a restarted standalone server tracks every session again
//   from its start, with the timeout it was created with; a restart may bring other min/max
//   session timeouts;
// - each server has its own copy of the tree (zookeeper-data.mjs): the leader prepares writes
//   and sends each transaction to its followers, which apply it (and fire their watches) when it
//   arrives, so a lagging or cut-off follower answers reads from an older tree (a cut holds what
//   is sent until it heals, as TCP does; a connection that closes loses it); a follower that
//   rejoins takes the leader's tree; a server refuses a client that saw a newer zxid than it has.
import { Link, Path } from './network.mjs';
import { AUTH_XID, Err, NOTIFICATION_XID, Op, PING_XID, Reader, SET_WATCHES_XID, Writer } from './wire.mjs';
import { DataTree, EventType, Watches } from './zookeeper-data.mjs';

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
  /** The tree a new leader starts from (the last leader's, kept when it went down). @type {DataTree | undefined} */
  committedTree;
  /** Sessions in the data tree (committed; survive leader changes). @type {Map<bigint, StoredSession>} */
  stored = new Map();
  /** The leader's session tracker. @type {Map<bigint, TrackedSession>} */
  tracked = new Map();
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

  /** Client `client`'s Dial (WireSessionOptions.dial). @param {number} client */
  dialFor(client) {
    return (/** @type {{ host: string }} */ address) => {
      const server = this.servers.find((s) => s.host === address.host);
      if (!server) throw new Error(`no server at ${address.host}`);
      return server.accept(client).socket;
    };
  }

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
    const leader = this.leader;
    if (!session || !leader) return;
    this.tracked.delete(id);
    this.stored.delete(id);
    this.config.trace(`leader ${leader.id}: session ${id.toString(16)} ${why}`);
    if (why === 'expired') this.hooks.expired(id, session);
    this.commit(leader, { type: 'closeSession', id }, (server) => server.sessionClosed(id));
  }

  /**
   * The leader applies a transaction now (its watches fire) and, once a quorum acknowledged it,
   * sends it to each follower, which applies it when it arrives; `then` runs on every server after
   * it applied it. Returns the transaction's zxid.
   * @param {Server} leader @param {import('./zookeeper-data.mjs').Txn} txn @param {(server: Server) => void} [then]
   */
  commit(leader, txn, then) {
    const zxid = leader.tree.zxid + 1n;
    const applied = { ...txn, zxid };
    leader.applyTxn(applied);
    then?.(leader);
    this.afterCommit(leader, () => {
      for (const follower of leader.followers.keys()) {
        follower.fromLeader.send(() => {
          // Already in the tree it synced from the leader as it joined (after this was applied there).
          if (follower.role !== 'follower' || applied.zxid <= follower.tree.zxid) return;
          // A gap is a bug of this model (no ensemble skips a transaction): fail the world loudly.
          if (applied.zxid !== follower.tree.zxid + 1n) throw new Error(`model: server ${follower.id} at zxid ${follower.tree.zxid} was sent ${applied.zxid}`);
          follower.applyTxn(applied);
          then?.(follower);
        });
      }
    });
    return zxid;
  }

  /**
   * Runs `run` once what `leader` decided so far is committed: after a quorum acknowledged it, and
   * never before anything it decided earlier (proposals commit in order, also when the quickest
   * round trip changes as followers lag, leave and join). Without a quorum in reach they wait.
   * @param {Server} leader @param {() => void} run
   */
  afterCommit(leader, run) {
    this.proposals.push({ leader, run });
    this.commitProposals();
  }

  /** @private */
  commitProposals() {
    while (this.proposals.length > 0) {
      const { leader, run } = this.proposals[0];
      if (this.leader !== leader) {
        this.proposals.shift();
        continue;
      }
      const delay = this.commitDelay(leader);
      if (delay === Infinity) {
        if (!this.commitRetry) {
          this.commitRetry = true;
          this.clock.after(Math.max(1, this.tick / 10), () => {
            this.commitRetry = false;
            this.commitProposals();
          });
        }
        return;
      }
      this.proposals.shift();
      this.lastCommitAt = Math.max(this.clock.now + delay, this.lastCommitAt);
      this.clock.at(this.lastCommitAt, () => this.leader === leader && run());
    }
  }
  /** @private @type {{ leader: Server, run: () => void }[]} */
  proposals = [];
  /** @private */
  commitRetry = false;
  /** @private */
  lastCommitAt = 0;

  /** The leader went (killed, or stepped down without a quorum): its followers stop serving, and another is elected. @param {Server} leader */
  leaderGone(leader) {
    this.committedTree = leader.tree.clone();
    this.leader = undefined;
    this.tracked.clear();
    this.proposals = [];
    for (const s of this.servers) if (s.role === 'follower') s.fromLeader.send(() => s.role === 'follower' && (s.stopServing(), (s.role = 'looking')));
    if (this.servers.length > 1) this.clock.after(Math.max(200, this.tick * 2), () => this.elect());
  }

  /** A leader is elected among the servers that are up (after a kill): it tracks every stored session anew. */
  elect() {
    if (this.leader) return; // elected already (the restarted server came back first)
    const candidates = this.servers.filter((s) => s.role !== 'down');
    if (candidates.length * 2 <= this.servers.length) return; // no quorum: try again later
    const leader = candidates[candidates.length - 1];
    // What the old leader applied counts as committed (a simplification): the new one starts from it.
    if (this.committedTree) leader.tree = this.committedTree;
    this.committedTree = undefined;
    this.leader = leader;
    leader.role = 'leader';
    leader.leadingSince = this.clock.now;
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
    const committed = (/** @type {() => void} */ then) => this.afterCommit(leader, then);
    if (server === leader) {
      const result = process(leader);
      return committed(() => answer(result));
    }
    if (server.role !== 'follower') return;
    server.toLeader.send(() => {
      if (this.leader !== leader || !leader.followers.has(server)) return;
      const result = process(leader);
      // A follower the leader dropped meanwhile gets neither the commit nor the answer.
      committed(() => leader.followers.has(server) && server.fromLeader.send(() => server.role === 'follower' && answer(result)));
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
    for (const f of leader.followers.keys()) {
      if (f.role === 'follower' && !f.toLeader.cut && !f.fromLeader.cut) best = Math.min(best, f.toLeader.lagMs + f.fromLeader.lagMs);
    }
    return best;
  }
}

/**
 * One direction of a follower's TCP connection to the leader: in order, `lagMs` late. A cut holds
 * what is sent (TCP sends it again) until it heals, then it arrives in order; only a connection
 * that closes (either side gives up on the other, a restart, a new leader) loses what is under way,
 * and the follower then syncs its tree from the leader's as it joins again.
 */
export class PeerPipe {
  static DEFAULT_LAG_MS = 1;
  lagMs = PeerPipe.DEFAULT_LAG_MS;
  /** Cuts in force (they may overlap). @private */
  cuts = 0;
  /** @private @type {(() => void)[]} */
  held = [];
  /** Bumped when the connection closes: what was sent on an earlier one never arrives. */
  connection = 0;
  /** @private */
  lastArrival = 0;
  /** @param {import('./virtual-clock.mjs').VirtualClock} clock */
  constructor(clock) {
    this.clock = clock;
  }
  /** @param {() => void} deliver */
  send(deliver) {
    const connection = this.connection;
    const arrive = () => connection === this.connection && deliver();
    if (this.cut) this.held.push(arrive);
    else this.schedule(arrive);
  }
  get cut() {
    return this.cuts > 0;
  }
  cutOff() {
    this.cuts++;
  }
  heal() {
    this.cuts = Math.max(0, this.cuts - 1);
    if (this.cut) return;
    const held = this.held;
    this.held = [];
    for (const arrive of held) this.schedule(arrive);
  }
  close() {
    this.connection++;
    this.held = [];
  }
  /** @private @param {() => void} arrive */
  schedule(arrive) {
    this.lastArrival = Math.max(this.clock.now + this.lagMs, this.lastArrival);
    this.clock.at(this.lastArrival, arrive);
  }
}

/** A client connection on a server. */
class Connection {
  /** @type {bigint | undefined} */
  sessionId;
  timeout = 0;
  /** @type {'handshake' | 'open' | 'closed'} */
  state = 'handshake';
  /** Requests in order: each is carried out (`run`) once it is ready and all before it were. @type {PendingAnswer[]} */
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
  /** When it became the leader (its followers have syncLimit to join before it counts them). */
  leadingSince = 0;
  /** The leader's followers and when it last heard from each. @type {Map<Server, number>} */
  followers = new Map();
  /** This server's copy of the tree. */
  tree = new DataTree();
  /** @type {Watches<Connection>} */
  watches = new Watches();

  /** @param {ZooKeeperModel} model @param {number} id */
  constructor(model, id) {
    this.model = model;
    this.id = id;
    this.host = `10.0.0.${id}`;
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

  /** The network path from client `client` to this server. @param {number} client */
  pathFrom(client) {
    let path = this.paths.get(client);
    if (!path) this.paths.set(client, (path = new Path()));
    return path;
  }
  /** @private @type {Map<number, Path>} */
  paths = new Map();

  /** @param {number} client */
  accept(client) {
    const link = new Link(this.clock, this.pathFrom(client), this.role !== 'down', client);
    const connection = new Connection(this, link);
    this.connections.add(connection);
    link.onData = (frame) => this.received(connection, frame);
    link.onClose = () => {
      connection.state = 'closed';
      this.connections.delete(connection);
      this.watches.remove(connection);
    };
    this.model.onLink(link, this);
    return link;
  }

  /** Joins the leader (a follower that was looking, or restarted). */
  follow() {
    if (this.serving) this.stopServing();
    this.closePeerConnection();
    this.role = 'looking';
    const join = () => {
      if (this.role !== 'looking' || !this.model.leader) return;
      const leader = this.model.leader;
      this.toLeader.send(() => {
        if (this.model.leader !== leader || this.role === 'down') return;
        leader.followers.set(this, this.clock.now);
        const snapshot = leader.tree.clone(); // the sync: a follower that rejoins takes the leader's tree
        this.fromLeader.send(() => {
          if (this.model.leader !== leader || this.role !== 'looking') return;
          this.tree = snapshot;
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
          follower.closePeerConnection();
          follower.closedByLeader();
          this.model.config.trace(`leader ${this.id} drops follower ${follower.id}`);
        }
      }
      // Without a quorum of followers heard from, the leader shuts down (Leader.lead) once its
      // followers had syncLimit to join: its clients are disconnected and another is elected.
      const quorum = (this.followers.size + 1) * 2 > this.model.servers.length;
      if (this.model.servers.length > 1 && !quorum && now - this.leadingSince > limit) {
        this.model.config.trace(`leader ${this.id} lost its quorum, steps down`);
        this.role = 'looking';
        this.stopServing();
        this.followers.clear();
        this.model.leaderGone(this);
      }
    } else if (this.role === 'follower' && now - this.lastFromLeader > limit) {
      this.model.config.trace(`server ${this.id} lost the leader`);
      this.stopServing();
      this.follow();
    }
  }

  /**
   * The leader closed this follower's connection: the follower reads the end of it after the link's
   * lag and looks for a leader again (on a cut path only its own syncLimit tells it).
   */
  closedByLeader() {
    if (this.fromLeader.cut) return;
    const connection = this.fromLeader.connection;
    this.clock.after(this.fromLeader.lagMs, () => {
      if (this.role !== 'follower' || this.fromLeader.connection !== connection) return;
      this.model.config.trace(`server ${this.id} lost the leader`);
      this.stopServing();
      this.follow();
    });
  }

  /** Closes every client connection (going LOOKING, shut down). */
  stopServing() {
    for (const connection of [...this.connections]) this.drop(connection);
    this.touches.clear();
  }

  /** The TCP connection to the leader closes: what is under way on it is lost. */
  closePeerConnection() {
    this.toLeader.close();
    this.fromLeader.close();
  }

  /** Killed (`restartAfterMs` later it comes back, with `limits` if given). @param {number} downMs @param {{ min: number, max: number }} [limits] */
  restart(downMs, limits) {
    const wasLeader = this.role === 'leader';
    this.role = 'down';
    this.closePeerConnection();
    for (const connection of this.connections) connection.link.reset();
    this.connections.clear();
    this.watches = new Watches();
    this.touches.clear();
    this.followers.clear();
    const model = this.model;
    if (wasLeader) model.leaderGone(this);
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
    for (const connection of [...this.connections]) if (connection.sessionId === id) this.drop(connection);
  }

  /** @private @param {Connection} connection @param {Buffer} frame */
  received(connection, frame) {
    if (connection.state === 'closed') return;
    if (!this.serving) return this.drop(connection);
    const reader = new Reader(frame.subarray(4));
    if (connection.state === 'handshake') return this.handshake(connection, reader);
    const id = /** @type {bigint} */ (connection.sessionId);
    // Every packet touches the session where it arrives (ZooKeeperServer.touch).
    if (this.role === 'leader') this.model.touch(id, connection.timeout, 'request');
    else this.touches.set(id, connection.timeout);
    const xid = reader.int();
    const type = reader.int();
    const header = (/** @type {number} */ err) => new Writer().int(xid).long(this.tree.zxid).int(err);
    const error = (/** @type {number} */ err) => header(err).frame();
    const tree = this.tree;
    switch (type) {
      case Op.ping:
      case Op.auth:
        return this.answerNow(connection, () => error(Err.OK));
      case Op.setWatches: {
        const relativeZxid = reader.long();
        const [data, exist, child] = [reader.strings(), reader.strings(), reader.strings()];
        return this.answerNow(connection, () => {
          this.setWatches(connection, relativeZxid, data, exist, child);
          return error(Err.OK);
        });
      }
      case Op.exists:
      case Op.getData:
      case Op.getChildren2:
      case Op.getACL: {
        const path = reader.string();
        const watch = type !== Op.getACL && reader.bool();
        return this.answerNow(connection, () => {
          const node = this.tree.nodes.get(path);
          // exists watches a missing node too; getData and getChildren only an existing one.
          if (watch && (node || type === Op.exists)) this.watches.add(type === Op.getChildren2 ? 'child' : 'data', path, connection);
          if (!node) return error(Err.NONODE);
          const w = header(Err.OK);
          if (type === Op.getData) w.buffer(node.data);
          if (type === Op.getChildren2) w.strings([...node.children]);
          if (type === Op.getACL) w.int(1).int(31).string('world').string('anyone');
          return w.stat(node).frame();
        });
      }
      case Op.sync: {
        const path = reader.string();
        return this.answerViaLeader(connection, () => () => header(Err.OK).string(path).frame());
      }
      case Op.create:
      case Op.create2:
      case Op.createContainer:
      case Op.delete:
      case Op.setData:
      case Op.setACL: {
        const op = readWriteOp(type, reader);
        return this.answerViaLeader(connection, (leader) => {
          const prepared = leader.tree.prepare(op, id);
          if (prepared.err !== 0 || !('txn' in prepared)) return () => error(prepared.err);
          this.model.commit(leader, prepared.txn);
          // The answer is made where it is sent, after that server applied the transaction.
          return (server) => {
            const w = header(Err.OK);
            const node = server.tree.nodes.get(prepared.path ?? op.path);
            if (type === Op.create) w.string(prepared.path ?? op.path);
            else if (type === Op.create2 || type === Op.createContainer) w.string(prepared.path ?? op.path).stat(node ?? EMPTY_STAT_NODE);
            else if (type === Op.setData || type === Op.setACL) w.stat(node ?? EMPTY_STAT_NODE);
            return w.frame();
          };
        });
      }
      case Op.multi: {
        /** @type {{ type: number, op: import('./zookeeper-data.mjs').WriteOp }[]} */
        const ops = [];
        for (;;) {
          const opType = reader.int();
          const done = reader.bool();
          reader.int();
          if (done) break;
          ops.push({ type: opType, op: readWriteOp(opType, reader) });
        }
        return this.answerViaLeader(connection, (leader) => {
          const prepared = leader.tree.prepareMulti(ops.map((o) => o.op), id);
          if (!prepared.failed && prepared.txn) this.model.commit(leader, prepared.txn);
          return (server) => {
            const w = header(Err.OK);
            for (const [i, result] of /** @type {{ err: number, path?: string }[]} */ (prepared.results).entries()) {
              if (prepared.failed) {
                w.int(Op.error).bool(false).int(result.err).int(result.err);
                continue;
              }
              const { type: opType, op } = ops[i];
              w.int(opType).bool(false).int(0);
              if (opType === Op.create) w.string(result.path ?? op.path);
              else if (opType === Op.create2 || opType === Op.createContainer) w.string(result.path ?? op.path).stat(server.tree.nodes.get(result.path ?? op.path) ?? EMPTY_STAT_NODE);
              else if (opType === Op.setData) w.stat(server.tree.nodes.get(op.path) ?? EMPTY_STAT_NODE);
            }
            return w.int(-1).bool(true).int(-1).frame();
          };
        });
      }
      case Op.closeSession:
        return this.answerViaLeader(connection, () => (this.model.closeSession(id, 'closed'), () => error(Err.OK)), true);
      default:
        return this.answerNow(connection, () => error(Err.UNIMPLEMENTED));
    }
  }

  /** Applies a committed transaction to this server's tree, firing its watches. @param {import('./zookeeper-data.mjs').Txn & { zxid: bigint }} txn */
  applyTxn(txn) {
    this.tree.apply(txn, (type, path) => {
      for (const connection of this.watches.take(type, path)) this.notify(connection, type, path);
    });
  }

  /** @private A watch event to one connection: at once, ahead of answers still being prepared. @param {Connection} connection @param {number} type @param {string} path */
  notify(connection, type, path) {
    if (connection.state !== 'open') return;
    connection.link.serverSend(new Writer().int(NOTIFICATION_XID).long(-1n).int(0).int(type).int(3).string(path).frame());
  }

  /**
   * SetWatches after a reconnect (DataTree.setWatches): each watch fires at once if its node
   * changed after the client's zxid, else is armed again.
   * @private @param {Connection} connection @param {bigint} relativeZxid @param {string[]} data @param {string[]} exist @param {string[]} child
   */
  setWatches(connection, relativeZxid, data, exist, child) {
    const nodes = this.tree.nodes;
    for (const path of data) {
      const node = nodes.get(path);
      if (!node) this.notify(connection, EventType.deleted, path);
      else if (node.mzxid > relativeZxid) this.notify(connection, EventType.changed, path);
      else this.watches.add('data', path, connection);
    }
    for (const path of exist) {
      if (nodes.has(path)) this.notify(connection, EventType.created, path);
      else this.watches.add('data', path, connection);
    }
    for (const path of child) {
      const node = nodes.get(path);
      if (!node) this.notify(connection, EventType.deleted, path);
      else if (node.pzxid > relativeZxid) this.notify(connection, EventType.children, path);
      else this.watches.add('child', path, connection);
    }
  }

  /** @private The server closes a connection (its watches go with it). @param {Connection} connection */
  drop(connection) {
    connection.link.serverClose();
    connection.state = 'closed';
    this.connections.delete(connection);
    this.watches.remove(connection);
  }

  /** @private A ConnectRequest: a new session (createSession at the leader) or a re-attach (revalidated there). @param {Connection} connection @param {Reader} reader */
  handshake(connection, reader) {
    reader.int(); // protocolVersion
    const lastZxidSeen = reader.long();
    // A client that saw a newer state than this server has is refused (it would read the past).
    if (lastZxidSeen > this.tree.zxid) return this.drop(connection);
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
      if (granted <= 0) this.drop(connection);
    };
    if (sessionId === 0n) {
      const id = model.nextSessionId++;
      const pw = Buffer.alloc(16, Number(id & 0xffn));
      model.viaLeader(
        this,
        (leader) => {
          model.stored.set(id, { timeout, password: pw });
          model.tracked.set(id, { expiresAt: model.roundUp(this.clock.now + timeout), lastTouch: { by: 'start', timeout } });
          model.commit(leader, { type: 'none' });
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

  /** A request this server carries out itself, in its turn: `run` makes the answer then. @private @param {Connection} connection @param {() => Buffer} run */
  answerNow(connection, run) {
    connection.answers.push({ run });
    this.flush(connection);
  }

  /**
   * A request the leader decides: `process` runs there and returns what makes the answer, which
   * runs here once the leader's word (and every transaction before it) arrived.
   * @private @param {Connection} connection @param {(leader: Server) => (server: Server) => Buffer} process @param {boolean} [close]
   */
  answerViaLeader(connection, process, close = false) {
    /** @type {PendingAnswer} */
    const answer = { run: undefined, close };
    connection.answers.push(answer);
    this.model.viaLeader(this, process, (makeAnswer) => {
      answer.run = () => makeAnswer(this);
      this.flush(connection);
    });
  }

  /** @private Sends the ready answers at the head, in order. @param {Connection} connection */
  flush(connection) {
    while (connection.answers.length > 0 && connection.answers[0].run) {
      const answer = /** @type {PendingAnswer} */ (connection.answers.shift());
      if (connection.state === 'closed') return;
      connection.link.serverSend(/** @type {() => Buffer} */ (answer.run)());
      if (answer.close) return this.drop(connection);
    }
  }
}

/** A request of a connection: `run` (set once it may be carried out) makes its answer; `close`: the connection goes after it. @typedef {{ run: (() => Buffer) | undefined, close?: boolean }} PendingAnswer */

/** A Stat for a node gone by the time its answer is written (a later transaction deleted it). */
const EMPTY_STAT_NODE = /** @type {import('./zookeeper-data.mjs').ZNode} */ ({
  data: Buffer.alloc(0), czxid: 0n, mzxid: 0n, pzxid: 0n, version: 0, cversion: 0, owner: 0n, container: false, children: new Set(), ctime: 0,
});

/** A write's fields, as Op.create / create2 / createContainer / delete / setData / setACL / check send them. @param {number} type @param {Reader} reader @returns {import('./zookeeper-data.mjs').WriteOp} */
function readWriteOp(type, reader) {
  const path = reader.string();
  switch (type) {
    case Op.create:
    case Op.create2:
    case Op.createContainer: {
      const data = Buffer.from(reader.buffer());
      reader.acl();
      return { op: 'create', path, data, flags: reader.int() };
    }
    case Op.delete:
      return { op: 'delete', path, version: reader.int() };
    case Op.setData: {
      const data = Buffer.from(reader.buffer());
      return { op: 'setData', path, data, version: reader.int() };
    }
    case Op.setACL:
      reader.acl();
      return { op: 'check', path, version: reader.int() };
    default:
      return { op: 'check', path, version: reader.int() };
  }
}

export { PING_XID, SET_WATCHES_XID, AUTH_XID };
