// A loopback TCP proxy in front of one ZooKeeper server, so one client can be partitioned alone.
// Shared by the Jest tests (test/support/tcp-proxy.ts re-exports it) and the chaos runner.
// Typed by JSDoc (checked by tsconfig.tooling.json). Only node builtins.
import net from 'node:net';

/** @typedef {'created' | 'deleted' | 'changed' | 'child'} WatchEventType */
/**
 * A watch event as the proxy saw it pass (`type`: a WatchEventType, or the number of an unknown one).
 * @typedef {{ type: WatchEventType | string, path: string }} ProxiedWatchEvent
 */

/** ZooKeeper's watch event types (WatcherEvent.type) by the names the filter uses. */
/** @type {Record<number, WatchEventType>} */
const EVENT_TYPES = { 1: 'created', 2: 'deleted', 3: 'changed', 4: 'child' };

/**
 * `cut()` drops every connection and refuses new ones; `dropReplies()` forwards requests but
 * swallows the server's answers (a lost reply); `blackhole()` forwards nothing either way and
 * closes nothing (a silent partition; with `holdCloses`, not even the close of one side reaches
 * the other); `blackholeAfterNotification()` does the same right after the next watch event
 * (optionally: the next one of a type, on a path, after the client was quiet) reaches the client;
 * `slowReplies(bytesPerSecond)` passes the answers on at that rate (a slow or starved server
 * that still hears every request at once); `holdConnectResponses(ms)` (every new connection)
 * and `stallNextHandshake(ms)` (the next one) pass a connection's first answers on late;
 * `restore()` drops current connections and forwards normally again. `lastClientPacketAt` is
 * when the server last heard from the client.
 */
/** @typedef {{ holdMs: number, newSessionOnly: boolean, passed: boolean, onPassed: () => void, resolve: (passed: boolean) => void }} HandshakeStall */

/** How often slowReplies() passes answers on. */
const PUMP_MS = 10;

export class TcpProxy {
  /** @private @type {Set<net.Socket>} */
  sockets = new Set();
  /** Upstream connections that are open (the client is connected through this proxy). @private @type {Set<net.Socket>} */
  upstreams = new Set();
  /** @private @type {'open' | 'cut' | 'drop-replies' | 'slow-replies' | 'blackhole' | 'blackhole-after-notification'} */
  mode = 'open';
  /** Date.now() when a client packet was last forwarded to the server. */
  lastClientPacketAt = 0;
  /** performance.timeOrigin + performance.now() of the same moment (sub-millisecond, for the chaos runner). */
  lastClientPacketTime = 0;
  /** The watch event after which blackholeAfterNotification() went silent. @type {ProxiedWatchEvent | undefined} */
  silencedAfter = undefined;
  /** While silent, a close on one side does not reach the other either (until restore()). */
  holdCloses = false;
  /** @private @type {((event: ProxiedWatchEvent) => boolean) | undefined} */
  notificationFilter;
  /** slowReplies()'s rate. */
  replyBytesPerSecond = 0;
  /** @private @type {(() => void) | undefined} */
  notified;
  /** Set by holdConnectResponses(): how long the server's first answer on each new connection waits. */
  connectResponseDelayMs = 0;
  /** Connections refused while cut (a client that keeps trying to reconnect). */
  refused = 0;
  /** Set by rewriteReplies() and rewriteConnectResponses() (a man in the middle). @type {Rewriters} */
  rewriters = { reply: undefined, connectResponse: undefined };
  /** ConnectRequests that went through: `newSessions` asked for a new session (id 0), `reattaches` for one by id. */
  connectRequests = { newSessions: 0, reattaches: 0 };
  /** Set by stallNextHandshake() until a connection's answers were passed on. @private @type {HandshakeStall | undefined} */
  handshakeStall;

  /**
   * Starts a proxy to `target` ("host:port", the first of a list) on a free loopback port.
   * @param {string} target
   */
  static async start(target) {
    const [host, port] = target.split(',')[0].split(':');
    const proxy = new TcpProxy(host, Number(port));
    await new Promise((resolve) => proxy.server.listen(0, '127.0.0.1', () => resolve(undefined)));
    return proxy;
  }

  /**
   * @private use TcpProxy.start()
   * @param {string} host
   * @param {number} port
   */
  constructor(host, port) {
    /** @private */
    this.server = net.createServer((client) => this.accept(client, host, port));
  }

  get port() {
    return /** @type {net.AddressInfo} */ (this.server.address()).port;
  }

  get connectString() {
    return `127.0.0.1:${this.port}`;
  }

  /** Live client connections through this proxy to its server. */
  get connections() {
    return this.upstreams.size;
  }

  /**
   * @private
   * @param {net.Socket} client
   * @param {string} host
   * @param {number} port
   */
  accept(client, host, port) {
    if (this.mode === 'cut') {
      this.refused++;
      return client.destroy();
    }
    const upstream = net.connect(port, host);
    this.sockets.add(client).add(upstream);
    upstream.once('connect', () => this.upstreams.add(upstream));
    const rewriting = new RewrittenLink(this.rewriters, this.connectRequests);
    /** The connection's first request (its ConnectRequest, or the start of it). @type {Buffer | undefined} */
    let firstRequest;
    client.on('data', (chunk) => {
      firstRequest ??= chunk;
      rewriting.fromClient(chunk);
      if (this.mode === 'blackhole') return;
      this.lastClientPacketAt = Date.now();
      this.lastClientPacketTime = performance.timeOrigin + performance.now();
      upstream.write(chunk);
    });
    const replies = new ReplyFrames();
    // Answers held back by slowReplies(), passed on every PUMP_MS at its rate (all at once when open again).
    /** @type {Buffer[]} */
    const held = [];
    /** @type {NodeJS.Timeout | undefined} */
    let pumping;
    // holdConnectResponses() or stallNextHandshake() (until a connection's answers passed on):
    // the connection's first answer (the ConnectResponse) and all after it wait until then.
    // Decided when that answer comes: by then the ConnectRequest said whether the client asks
    // for a new session (session id 0, at offset 20: length, protocol version, last zxid, timeout).
    /** @type {HandshakeStall | undefined} */
    let stall;
    let holdMs = 0;
    /** @type {number | undefined} */
    let heldUntil;
    /** @type {NodeJS.Timeout | undefined} */
    let releaseHeld;
    const pump = () => {
      let budget = this.mode === 'slow-replies' ? Math.ceil((this.replyBytesPerSecond * PUMP_MS) / 1000) : this.mode === 'open' ? Infinity : 0;
      while (held.length > 0 && budget > 0) {
        const chunk = /** @type {Buffer} */ (held[0]);
        const n = Math.min(budget, chunk.length);
        client.write(chunk.subarray(0, n));
        budget -= n;
        if (n === chunk.length) held.shift();
        else held[0] = chunk.subarray(n);
      }
      if (held.length === 0 || client.destroyed) (clearInterval(pumping), (pumping = undefined));
    };
    /** The connection's first answer (its ConnectResponse, or the start of it). @type {Buffer | undefined} */
    let firstAnswer;
    // stallNextHandshake(): passed on. An answer that expires the session (a negotiated timeout
    // of 0: the client goes on to a new session) does not count.
    const stallPassed = () => {
      if (!stall || stall.passed) return;
      if (firstAnswer && firstAnswer.length >= 12 && firstAnswer.readInt32BE(8) <= 0) return;
      stall.passed = true;
      if (this.handshakeStall === stall) this.handshakeStall = undefined;
      stall.onPassed();
      stall.resolve(true);
    };
    upstream.on('data', (data) => {
      const chunk = rewriting.fromServer(data);
      if (chunk.length === 0) return;
      if (firstAnswer === undefined) {
        firstAnswer = chunk;
        const asksNew = firstRequest !== undefined && firstRequest.length >= 28 && firstRequest.readBigInt64BE(20) === 0n;
        stall = this.handshakeStall && (!this.handshakeStall.newSessionOnly || asksNew) ? this.handshakeStall : undefined;
        holdMs = stall?.holdMs ?? this.connectResponseDelayMs;
      }
      // Parsed in every mode, to stay in step with the frames.
      const match = replies.endOfFirstNotification(chunk, this.mode === 'blackhole-after-notification' ? this.notificationFilter : undefined);
      if (holdMs > 0 && this.mode === 'open') {
        heldUntil ??= performance.now() + holdMs;
        if (performance.now() < heldUntil) {
          held.push(chunk);
          releaseHeld ??= setTimeout(() => {
            pump();
            stallPassed();
          }, heldUntil - performance.now());
          return;
        }
      }
      if (this.mode === 'slow-replies' || (this.mode === 'open' && held.length > 0)) {
        held.push(chunk);
        pumping ??= setInterval(pump, PUMP_MS);
        return;
      }
      if (this.mode === 'open') {
        client.write(chunk);
        return stallPassed(); // a stall of 0 ms: on as it comes
      }
      if (this.mode !== 'blackhole-after-notification') return;
      // Forward whole frames up to and including the (first matching) notification, then go silent.
      client.write(match === undefined ? chunk : chunk.subarray(0, match.end));
      if (match !== undefined) this.goSilentAfterNotification(match.event);
    });
    const close = () => {
      clearInterval(pumping);
      clearTimeout(releaseHeld);
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
      this.upstreams.delete(upstream);
    };
    // With `holdCloses`, a silent link does not carry a close either: the side that closed goes,
    // the other stays open (and hears nothing) until restore().
    /** @param {net.Socket} socket */
    const closeSide = (socket) => () => {
      if (!(this.holdCloses && this.mode === 'blackhole')) return close();
      socket.destroy();
      this.sockets.delete(socket);
      this.upstreams.delete(socket);
    };
    client.on('error', closeSide(client)).on('close', closeSide(client));
    upstream.on('error', closeSide(upstream)).on('close', closeSide(upstream));
  }

  /**
   * On connections made from now on, the server's first answer (the ConnectResponse: the server
   * has opened or re-attached the session already) and what follows reach the client `ms` late:
   * as a client whose event loop stalls right after it sent its ConnectRequest. 0 ends it.
   * @param {number} ms
   */
  holdConnectResponses(ms) {
    this.connectResponseDelayMs = ms;
  }

  /**
   * A man in the middle: from now on, every reply after a connection's ConnectResponse goes
   * through `rewrite` (a watch event too), whole, with the request it answers (by xid; undefined
   * for an event or an xid nobody asked). Undefined ends it.
   * @param {ReplyRewriter | undefined} rewrite
   */
  rewriteReplies(rewrite) {
    this.rewriters.reply = rewrite;
  }

  /**
   * A man in the middle: from now on, each connection's ConnectResponse goes through `rewrite`,
   * with the timeout and session id its ConnectRequest asked for. Undefined ends it.
   * @param {ConnectResponseRewriter | undefined} rewrite
   */
  rewriteConnectResponses(rewrite) {
    this.rewriters.connectResponse = rewrite;
  }

  /**
   * New connections' ConnectResponse (and what follows) reaches the client `holdMs` late, as with
   * holdConnectResponses(), until one connection's answers were passed on (one that closes
   * first, a client giving up on its handshake, does not count, nor one that tells the client
   * its session expired): a client stalled inside its handshake (0: not held, only watched).
   * With `newSessionOnly`, only a connection that asks for a new session is held and counts (a
   * re-attach passes as usual). `onPassed` runs in the turn the answers are passed on, before
   * the client can read them (a blackhole() there swallows whatever the client sends once it
   * read them). Resolves true then, false if called off first (cancelHandshakeStall(), or
   * another call).
   * @param {number} holdMs
   * @param {() => void} [onPassed]
   * @param {{ newSessionOnly?: boolean }} [options]
   * @returns {Promise<boolean>}
   */
  stallNextHandshake(holdMs, onPassed = () => undefined, options = {}) {
    this.cancelHandshakeStall();
    return new Promise((resolve) => {
      this.handshakeStall = { holdMs, newSessionOnly: options.newSessionOnly ?? false, passed: false, onPassed, resolve };
    });
  }

  /** Calls off a stallNextHandshake() that no connection has taken yet. */
  cancelHandshakeStall() {
    this.handshakeStall?.resolve(false);
    this.handshakeStall = undefined;
  }

  /** Drops all connections and refuses new ones until restore(). */
  cut() {
    this.mode = 'cut';
    this.dropConnections();
  }

  /** Forwards requests but swallows every reply (the client sees silence, then times out). */
  dropReplies() {
    this.mode = 'drop-replies';
  }

  /**
   * Passes requests on at once but answers at `bytesPerSecond` (a ZooKeeper answer to exists is
   * about 90 bytes): a server that hears the client all along and is slow to answer it.
   * @param {number} bytesPerSecond
   */
  slowReplies(bytesPerSecond) {
    this.replyBytesPerSecond = bytesPerSecond;
    this.mode = 'slow-replies';
  }

  /**
   * Nothing passes either way, nothing closes (a silent partition). With `holdCloses`, a side
   * that closes (e.g. the server expiring the session) is not passed on to the other either.
   * @param {{ holdCloses?: boolean }} [options]
   */
  blackhole(options) {
    this.mode = 'blackhole';
    if (options?.holdCloses) this.holdCloses = true;
  }

  /**
   * Forwards normally until a watch event reaches the client, forwards that event, then goes
   * silent as blackhole(). With `filter`, only an event of that `type` ('created', 'deleted',
   * 'changed', 'child') on `path` or under it (`path` + '/') counts, and with `minQuietMs` only
   * one that comes when the client has sent nothing for that long (the server last heard from it
   * that long ago); the others pass. Resolves with Date.now() then.
   * @param {{ type?: WatchEventType, path?: string, minQuietMs?: number, holdCloses?: boolean }} [filter]
   * @returns {Promise<number>}
   */
  blackholeAfterNotification(filter) {
    this.mode = 'blackhole-after-notification';
    if (filter?.holdCloses) this.holdCloses = true;
    this.silencedAfter = undefined;
    this.notificationFilter =
      filter === undefined
        ? undefined
        : (event) =>
            (filter.type === undefined || event.type === filter.type) &&
            (filter.path === undefined || event.path === filter.path || event.path.startsWith(`${filter.path}/`)) &&
            (filter.minQuietMs === undefined || performance.timeOrigin + performance.now() - this.lastClientPacketTime >= filter.minQuietMs);
    return new Promise((resolve) => (this.notified = () => resolve(Date.now())));
  }

  /**
   * @private
   * @param {ProxiedWatchEvent | undefined} event
   */
  goSilentAfterNotification(event) {
    this.mode = 'blackhole';
    this.silencedAfter = event;
    this.notificationFilter = undefined;
    this.notified?.();
    this.notified = undefined;
  }

  /** Drops current connections (the client reconnects) and forwards normally again. */
  restore() {
    this.dropConnections();
    this.mode = 'open';
    this.holdCloses = false;
  }

  /** Back to forwarding, keeping the connections: only right while nothing was swallowed (e.g. to call off blackholeAfterNotification before it fired). */
  forward() {
    this.mode = 'open';
    this.holdCloses = false;
    this.notificationFilter = undefined;
    this.notified = undefined;
  }

  /** @private */
  dropConnections() {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    this.upstreams.clear();
  }

  /** @returns {Promise<void>} */
  async close() {
    this.cut();
    await new Promise((resolve) => this.server.close(() => resolve(undefined)));
  }
}

/**
 * Splits the server's stream into frames (4-byte length, then the body). The first frame of a
 * connection is the connect response; every later one starts with its reply header (xid, zxid,
 * err), xid -1 for a watch event, whose body is a WatcherEvent (type, state, path).
 */
class ReplyFrames {
  pending = Buffer.alloc(0);
  sawConnectResponse = false;

  /**
   * The first notification frame that this chunk completes and `accept` (if given) accepts:
   * `end` is the offset in `chunk` just past it.
   * @param {Buffer} chunk
   * @param {((event: ProxiedWatchEvent) => boolean) | undefined} accept
   * @returns {{ end: number, event: ProxiedWatchEvent | undefined } | undefined}
   */
  endOfFirstNotification(chunk, accept) {
    const before = this.pending.length;
    this.pending = Buffer.concat([this.pending, chunk]);
    let offset = 0;
    let found;
    while (this.pending.length - offset >= 4) {
      const end = offset + 4 + this.pending.readInt32BE(offset);
      if (this.pending.length < end) break;
      const isNotification = this.sawConnectResponse && end - offset >= 8 && this.pending.readInt32BE(offset + 4) === -1;
      this.sawConnectResponse = true;
      if (isNotification && found === undefined) {
        const event = parseWatcherEvent(this.pending.subarray(offset + 4, end));
        if (!accept || (event && accept(event))) found = { end: end - before, event };
      }
      offset = end;
    }
    this.pending = this.pending.subarray(offset);
    return found;
  }
}

/**
 * Reply header (xid 4, zxid 8, err 4), then type 4, state 4, path (length 4 + UTF-8).
 * @param {Buffer} body
 * @returns {ProxiedWatchEvent | undefined}
 */
function parseWatcherEvent(body) {
  if (body.length < 28) return undefined;
  const type = body.readInt32BE(16);
  const length = body.readInt32BE(24);
  const path = length > 0 && body.length >= 28 + length ? body.toString('utf8', 28, 28 + length) : '';
  return { type: EVENT_TYPES[type] ?? String(type), path };
}

/**
 * A request as the proxy saw it go to the server: its xid, op code and the bytes after its header.
 * @typedef {{ xid: number, type: number, body: Buffer }} ProxiedRequest
 */
/** @typedef {{ timeoutMs: number, sessionId: bigint }} ProxiedConnectRequest */
/**
 * Gets a reply's frame without its length prefix (reply header, then body) and returns the frame
 * to pass on instead (the proxy puts its length in front), or undefined to pass it unchanged.
 * @typedef {(reply: Buffer, request: ProxiedRequest | undefined) => Buffer | undefined} ReplyRewriter
 */
/**
 * The same for a connection's ConnectResponse (protocolVersion, timeout, sessionId, password, readOnly).
 * @typedef {(response: Buffer, request: ProxiedConnectRequest) => Buffer | undefined} ConnectResponseRewriter
 */
/** @typedef {{ reply: ReplyRewriter | undefined, connectResponse: ConnectResponseRewriter | undefined }} Rewriters */

/**
 * One connection's two streams cut into frames for rewriteReplies() and rewriteConnectResponses():
 * the client's pass unchanged (its requests are noted by xid, its ConnectRequest counted); the
 * server's pass unchanged while no rewriter is set, else as whole frames, rewritten.
 */
class RewrittenLink {
  /** @type {Map<number, ProxiedRequest>} */
  requests = new Map();
  /** @type {ProxiedConnectRequest | undefined} */
  connectRequest;
  /** @type {Buffer} */
  clientPending = Buffer.alloc(0);
  /** @type {Buffer} */
  serverPending = Buffer.alloc(0);
  /** Bytes of the server's unfinished frame already passed on (before a rewriter was set). */
  serverForwarded = 0;
  sawConnectResponse = false;

  /**
   * @param {Rewriters} rewriters
   * @param {{ newSessions: number, reattaches: number }} counts
   */
  constructor(rewriters, counts) {
    this.rewriters = rewriters;
    this.counts = counts;
  }

  /** @param {Buffer} chunk */
  fromClient(chunk) {
    const { frames, rest } = splitFrames(Buffer.concat([this.clientPending, chunk]));
    this.clientPending = rest;
    for (const frame of frames) {
      if (this.connectRequest === undefined) {
        // protocolVersion 4, lastZxidSeen 8, timeOut 4, sessionId 8, passwd, readOnly
        if (frame.length < 24) continue;
        this.connectRequest = { timeoutMs: frame.readInt32BE(12), sessionId: frame.readBigInt64BE(16) };
        if (this.connectRequest.sessionId === 0n) this.counts.newSessions++;
        else this.counts.reattaches++;
      } else if (frame.length >= 8) {
        const xid = frame.readInt32BE(0);
        this.requests.set(xid, { xid, type: frame.readInt32BE(4), body: frame.subarray(8) });
      }
    }
  }

  /**
   * @param {Buffer} chunk
   * @returns {Buffer}
   */
  fromServer(chunk) {
    const { frames, rest } = splitFrames(Buffer.concat([this.serverPending, chunk]));
    const rewriting = this.rewriters.reply !== undefined || this.rewriters.connectResponse !== undefined;
    /** @type {Buffer[]} */
    const out = [];
    for (const frame of frames) {
      if (this.serverForwarded > 0) {
        // Begun before a rewriter was set: the rest goes as it is.
        out.push(withLength(frame).subarray(this.serverForwarded));
        this.serverForwarded = 0;
        this.sawConnectResponse = true;
        continue;
      }
      out.push(withLength(this.rewritten(frame)));
    }
    this.serverPending = rest;
    if (!rewriting && rest.length > this.serverForwarded) {
      out.push(rest.subarray(this.serverForwarded));
      this.serverForwarded = rest.length;
    }
    return Buffer.concat(out);
  }

  /**
   * @private
   * @param {Buffer} frame
   * @returns {Buffer}
   */
  rewritten(frame) {
    if (!this.sawConnectResponse) {
      this.sawConnectResponse = true;
      const rewrite = this.rewriters.connectResponse;
      return (rewrite && this.connectRequest && rewrite(frame, this.connectRequest)) ?? frame;
    }
    const xid = frame.length >= 4 ? frame.readInt32BE(0) : undefined;
    const request = xid === undefined || xid === -1 ? undefined : this.requests.get(xid);
    if (request) this.requests.delete(request.xid);
    return this.rewriters.reply?.(frame, request) ?? frame;
  }
}

/**
 * The whole frames at the start of `bytes` (without their length) and what follows them.
 * @param {Buffer} bytes
 * @returns {{ frames: Buffer[], rest: Buffer }}
 */
function splitFrames(bytes) {
  const frames = [];
  let offset = 0;
  while (bytes.length - offset >= 4) {
    const end = offset + 4 + bytes.readInt32BE(offset);
    if (end < offset + 4 || bytes.length < end) break;
    frames.push(bytes.subarray(offset + 4, end));
    offset = end;
  }
  return { frames, rest: bytes.subarray(offset) };
}

/** @param {Buffer} frame */
function withLength(frame) {
  const length = Buffer.alloc(4);
  length.writeInt32BE(frame.length);
  return Buffer.concat([length, frame]);
}
