// A loopback TCP proxy in front of one ZooKeeper server, so one client can be partitioned alone.
// Shared by the Jest tests (test/support/tcp-proxy.ts re-exports it) and the chaos runner.
// Types: tcp-proxy.d.mts. Only node builtins.
import net from 'node:net';

/**
 * `cut()` drops every connection and refuses new ones; `dropReplies()` forwards requests but
 * swallows the server's answers (a lost reply); `blackhole()` forwards nothing either way and
 * closes nothing (a silent partition); `blackholeAfterNotification()` does the same right after
 * the next watch event reaches the client; `restore()` drops current connections and forwards
 * normally again. `lastClientPacketAt` is when the server last heard from the client.
 */
export class TcpProxy {
  /** @type {Set<net.Socket>} */
  sockets = new Set();
  /** Upstream connections that are open (the client is connected through this proxy). */
  upstreams = new Set();
  /** @type {'open' | 'cut' | 'drop-replies' | 'blackhole' | 'blackhole-after-notification'} */
  mode = 'open';
  /** Date.now() when a client packet was last forwarded to the server. */
  lastClientPacketAt = 0;
  /** @type {(() => void) | undefined} */
  notified;

  /** Starts a proxy to `target` ("host:port", the first of a list) on a free loopback port. */
  static async start(target) {
    const [host, port] = target.split(',')[0].split(':');
    const proxy = new TcpProxy(host, Number(port));
    await new Promise((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  constructor(host, port) {
    this.server = net.createServer((client) => this.accept(client, host, port));
  }

  get port() {
    return this.server.address().port;
  }

  get connectString() {
    return `127.0.0.1:${this.port}`;
  }

  /** Live client connections through this proxy to its server. */
  get connections() {
    return this.upstreams.size;
  }

  accept(client, host, port) {
    if (this.mode === 'cut') return client.destroy();
    const upstream = net.connect(port, host);
    this.sockets.add(client).add(upstream);
    upstream.once('connect', () => this.upstreams.add(upstream));
    client.on('data', (chunk) => {
      if (this.mode === 'blackhole') return;
      this.lastClientPacketAt = Date.now();
      upstream.write(chunk);
    });
    const replies = new ReplyFrames();
    upstream.on('data', (chunk) => {
      const upTo = replies.endOfFirstNotification(chunk); // parsed in every mode, to stay in step
      if (this.mode === 'open') return client.write(chunk);
      if (this.mode !== 'blackhole-after-notification') return;
      // Forward whole frames up to and including the first notification, then go silent.
      client.write(upTo === undefined ? chunk : chunk.subarray(0, upTo));
      if (upTo !== undefined) this.goSilentAfterNotification();
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
      this.upstreams.delete(upstream);
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  }

  cut() {
    this.mode = 'cut';
    this.dropConnections();
  }

  dropReplies() {
    this.mode = 'drop-replies';
  }

  blackhole() {
    this.mode = 'blackhole';
  }

  /** Resolves with Date.now() when the watch event has passed and the silence began. */
  blackholeAfterNotification() {
    this.mode = 'blackhole-after-notification';
    return new Promise((resolve) => (this.notified = () => resolve(Date.now())));
  }

  goSilentAfterNotification() {
    this.mode = 'blackhole';
    this.notified?.();
    this.notified = undefined;
  }

  restore() {
    this.dropConnections();
    this.mode = 'open';
  }

  dropConnections() {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    this.upstreams.clear();
  }

  async close() {
    this.cut();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * Splits the server's stream into frames (4-byte length, then the body). The first frame of a
 * connection is the connect response; every later one starts with its xid, -1 for a watch event.
 */
class ReplyFrames {
  pending = Buffer.alloc(0);
  sawConnectResponse = false;

  /** Offset in `chunk` just past the first notification frame that this chunk completes, if any. */
  endOfFirstNotification(chunk) {
    const before = this.pending.length;
    this.pending = Buffer.concat([this.pending, chunk]);
    let offset = 0;
    let found;
    while (this.pending.length - offset >= 4) {
      const end = offset + 4 + this.pending.readInt32BE(offset);
      if (this.pending.length < end) break;
      const isNotification = this.sawConnectResponse && end - offset >= 8 && this.pending.readInt32BE(offset + 4) === -1;
      this.sawConnectResponse = true;
      offset = end;
      if (isNotification && found === undefined) found = offset - before;
    }
    this.pending = this.pending.subarray(offset);
    return found;
  }
}
