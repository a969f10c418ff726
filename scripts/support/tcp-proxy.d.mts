// Types of tcp-proxy.mjs (for the TypeScript tests).

/** A watch event as the proxy saw it pass. */
export interface ProxiedWatchEvent {
  type: 'created' | 'deleted' | 'changed' | 'child' | string;
  path: string;
}

export declare class TcpProxy {
  private constructor(host: string, port: number);
  static start(target: string): Promise<TcpProxy>;
  readonly port: number;
  readonly connectString: string;
  /** Live client connections through this proxy to its server. */
  readonly connections: number;
  /** Date.now() when a client packet was last forwarded to the server. */
  lastClientPacketAt: number;
  /** performance.timeOrigin + performance.now() at that moment (sub-millisecond). */
  lastClientPacketTime: number;
  /** The watch event after which blackholeAfterNotification() went silent. */
  silencedAfter: ProxiedWatchEvent | undefined;
  /** Drops all connections and refuses new ones until restore(). */
  cut(): void;
  /** Forwards requests but swallows every reply (the client sees silence, then times out). */
  dropReplies(): void;
  /** While silent, a close on one side does not reach the other either (until restore()). */
  holdCloses: boolean;
  /**
   * Nothing passes either way, nothing closes (a silent partition). With `holdCloses`, a side
   * that closes (e.g. the server expiring the session) is not passed on to the other either.
   */
  blackhole(options?: { holdCloses?: boolean }): void;
  /**
   * Forwards until the next watch event (with `filter`: of that type, on that path or under it,
   * arriving when the client has sent nothing for `minQuietMs`) has reached the client, then as
   * blackhole(); resolves with Date.now() then.
   */
  blackholeAfterNotification(filter?: {
    type?: 'created' | 'deleted' | 'changed' | 'child';
    path?: string;
    minQuietMs?: number;
    holdCloses?: boolean;
  }): Promise<number>;
  /** Drops current connections (the client reconnects) and forwards normally again. */
  restore(): void;
  /**
   * Forwards normally again, keeping the connections: only right while nothing was swallowed
   * (e.g. to call off blackholeAfterNotification() before it fired; its promise then never settles).
   */
  forward(): void;
  close(): Promise<void>;
}
