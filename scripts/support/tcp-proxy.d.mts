// Types of tcp-proxy.mjs (for the TypeScript tests).
export declare class TcpProxy {
  static start(target: string): Promise<TcpProxy>;
  readonly port: number;
  readonly connectString: string;
  /** Live client connections through this proxy to its server. */
  readonly connections: number;
  /** Date.now() when a client packet was last forwarded to the server. */
  lastClientPacketAt: number;
  /** Drops all connections and refuses new ones until restore(). */
  cut(): void;
  /** Forwards requests but swallows every reply. */
  dropReplies(): void;
  /** Nothing passes either way, nothing closes (a silent partition). */
  blackhole(): void;
  /** Forwards until the next watch event has reached the client, then as blackhole(); resolves with Date.now() then. */
  blackholeAfterNotification(): Promise<number>;
  /** Drops current connections (the client reconnects) and forwards normally again. */
  restore(): void;
  close(): Promise<void>;
}
