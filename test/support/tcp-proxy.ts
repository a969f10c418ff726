import net from 'node:net';

/**
 * A loopback TCP proxy in front of one ZooKeeper server, so a test can partition one client:
 * `cut()` drops every connection and refuses new ones, `restore()` lets traffic through again,
 * `dropReplies()` keeps forwarding requests but swallows the server's answers (a lost reply),
 * `blackhole()` forwards nothing either way and closes nothing (a silent partition).
 */
export class TcpProxy {
  private readonly sockets = new Set<net.Socket>();
  private mode: 'open' | 'cut' | 'drop-replies' | 'blackhole' = 'open';

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
      client.on('data', (chunk) => proxy.mode !== 'blackhole' && upstream.write(chunk));
      upstream.on('data', (chunk) => proxy.mode === 'open' && client.write(chunk));
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
