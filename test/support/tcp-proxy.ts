import net from 'node:net';

/**
 * A loopback TCP proxy in front of one ZooKeeper server, so a test can partition one client:
 * `cut()` drops every connection and refuses new ones, `restore()` lets traffic through again,
 * `dropReplies()` keeps forwarding requests but swallows the server's answers (a lost reply),
 * `blackhole()` forwards nothing either way and closes nothing (a silent partition), and
 * `blackholeAfterNotification()` does the same right after the next watch event reaches the client.
 * `lastClientPacketAt` is when the server last heard from the client (any packet, pings included).
 */
export class TcpProxy {
  private readonly sockets = new Set<net.Socket>();
  private mode: 'open' | 'cut' | 'drop-replies' | 'blackhole' | 'blackhole-after-notification' = 'open';
  private notified: (() => void) | undefined;
  /** Date.now() when a client packet was last forwarded to the server. */
  lastClientPacketAt = 0;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(target: string): Promise<TcpProxy> {
    const [host, port] = target.split(',')[0]!.split(':') as [string, string];
    let proxy!: TcpProxy;
    const server = net.createServer((client) => {
      if (proxy.mode === 'cut') return client.destroy();
      const upstream = net.connect(Number(port), host);
      proxy.sockets.add(client).add(upstream);
      client.on('data', (chunk) => {
        if (proxy.mode === 'blackhole') return;
        proxy.lastClientPacketAt = Date.now();
        upstream.write(chunk);
      });
      const replies = new ReplyFrames();
      upstream.on('data', (chunk: Buffer) => {
        const upTo = replies.endOfFirstNotification(chunk); // parsed in every mode, to stay in step
        if (proxy.mode === 'open') return client.write(chunk);
        if (proxy.mode !== 'blackhole-after-notification') return;
        // Forward whole frames up to and including the first notification, then go silent.
        client.write(upTo === undefined ? chunk : chunk.subarray(0, upTo));
        if (upTo !== undefined) proxy.goSilentAfterNotification();
      });
      const close = () => {
        client.destroy();
        upstream.destroy();
        proxy.sockets.delete(client);
        proxy.sockets.delete(upstream);
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = new TcpProxy(server, (server.address() as net.AddressInfo).port);
    return proxy;
  }

  get connectString(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Drops all connections and refuses new ones until restore(). */
  cut(): void {
    this.mode = 'cut';
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }

  /** Forwards requests but swallows every reply (the client sees silence, then times out). */
  dropReplies(): void {
    this.mode = 'drop-replies';
  }

  /**
   * Silence: nothing passes either way, and connections stay open (new ones are accepted and get
   * nothing either), like a dropped network link. The client notices only by its own timeout.
   */
  blackhole(): void {
    this.mode = 'blackhole';
  }

  /**
   * Forwards normally until the server sends the client a watch event, forwards that event, then
   * goes silent as `blackhole()`. Resolves with Date.now() at that moment.
   */
  blackholeAfterNotification(): Promise<number> {
    this.mode = 'blackhole-after-notification';
    return new Promise((resolve) => (this.notified = () => resolve(Date.now())));
  }

  private goSilentAfterNotification(): void {
    this.mode = 'blackhole';
    this.notified?.();
    this.notified = undefined;
  }

  /** Drops current connections (so the client reconnects) and forwards normally again. */
  restore(): void {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    this.mode = 'open';
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * Splits the server's stream into frames (4-byte length, then the body). The first frame of a
 * connection is the connect response; every later one starts with its xid, -1 for a watch event.
 */
class ReplyFrames {
  private pending = Buffer.alloc(0);
  private sawConnectResponse = false;

  /** Offset in `chunk` just past the first notification frame that this chunk completes, if any. */
  endOfFirstNotification(chunk: Buffer): number | undefined {
    const before = this.pending.length;
    this.pending = Buffer.concat([this.pending, chunk]);
    let offset = 0;
    let found: number | undefined;
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
