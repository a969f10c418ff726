// The seam between the library and a ZooKeeper client: the ZkSession interface and the types it
// speaks in. Implemented by WireZkSession (wire/session.ts, our TypeScript client, the default),
// NativeZkSession (addon-session.ts, the C addon, client: 'addon') and nestjs-zk-lock/testing's
// in-memory ZooKeeper.
import type { WatchListener } from './session-bookkeeping.js';
import type { Clock } from '../clock.js';

/** A node's stat; `ephemeralOwner` is the owning session id in hex ("0" for persistent nodes). */
export interface ZkStat {
  czxid: number;
  mzxid: number;
  pzxid: number;
  version: number;
  cversion: number;
  numChildren: number;
  dataLength: number;
  ephemeralOwner: string;
  ctime: Date;
  mtime: Date;
}

/** One ACL entry: `perms` is a bitmask of ZkPerm; for digest, `id` is `user:base64(sha1(user:password))`. */
export interface ZkAcl {
  perms: number;
  scheme: string;
  id: string;
}

export const ZkPerm = { READ: 1, WRITE: 2, CREATE: 4, DELETE: 8, ADMIN: 16, ALL: 31 } as const;

/** Create modes, with ZooKeeper's flag values (CONTAINER makes the C client send createContainer). */
export const CreateMode = {
  PERSISTENT: 0,
  EPHEMERAL: 1,
  PERSISTENT_SEQUENTIAL: 2,
  EPHEMERAL_SEQUENTIAL: 3,
  CONTAINER: 4,
} as const;
export type CreateMode = (typeof CreateMode)[keyof typeof CreateMode];

export type { WatchEventType, WatchListener } from './session-bookkeeping.js';

export interface SessionEvents {
  onConnected(): void;
  onConnecting(): void;
  /** The handle is closed for good: `code` is 0 (closed by us), -112 (expired) or -113 (auth failed). */
  onClosed(code: number): void;
  /** A link attempt ended before the session was (re)attached on it, and why where the client can tell. */
  onLinkFailed?(failure: LinkFailure): void;
}

/**
 * Why a link attempt failed (see link-failure.ts, which tells them apart):
 * - `tls-certificate`: the server's certificate did not verify (not signed by a CA we trust, expired...);
 * - `tls-host-name`: the server's certificate is made out to another name;
 * - `tls-client-certificate`: the server refused our client certificate, or wanted one;
 * - `tls-protocol`: no TLS version or cipher both sides accept, or another handshake refusal;
 * - `tls-no-answer`: the server closed the link during our TLS handshake without a TLS answer
 *   (a port that does not speak TLS, or a server that is not serving);
 * - `not-tls`: the server answered our TLS handshake with bytes that are not TLS;
 * - `unanswered`: without TLS, the server closed the link after our session request without an
 *   answer (a TLS port, or a server that is not serving);
 * - `other`: the network (refused, timed out), or a reply we refused.
 */
export type LinkFailureKind = 'tls-certificate' | 'tls-host-name' | 'tls-client-certificate' | 'tls-protocol' | 'tls-no-answer' | 'not-tls' | 'unanswered' | 'other';

export interface LinkFailure {
  /** `host:port` as in the connect string. */
  server: string;
  kind: LinkFailureKind;
  /** What to tell a user, without the server's name; undefined where the client can say nothing (the probe does). */
  message: string | undefined;
}

export interface SessionInit {
  connectString: string;
  sessionTimeoutMs: number;
  /** The ensemble's tickTime at most (see RequestClock); default DEFAULT_SERVER_TICK_MS. */
  serverTickTimeMs?: number;
  /** Re-attach to an existing session (used by tests to expire a session from a second client). */
  sessionId?: string;
  sessionPassword?: string;
  /** Where the session reads the time and arms its timers (default the system clock). */
  clock?: Clock;
}

/**
 * One ZooKeeper session as a small promise API: what the connection and the recipes use. A session
 * never outlives its handle: after expiry the owner opens a new one. `NativeZkSession` is the real
 * one (the C client); `nestjs-zk-lock/testing` has an in-memory one.
 */
export interface ZkSession {
  /** Session id in hex, as ZooKeeper tools print it ("0" until the first connect). */
  readonly id: string;
  readonly password: string;
  /** The session timeout the server granted (the requested one until connected). */
  readonly timeoutMs: number;
  /** Whether the client's own state is connected (polled by the connection's watchdog). */
  readonly isConnectedNatively: boolean;
  readonly isClosed: boolean;
  /**
   * A lower bound (clock time) of when the leader last heard of us, from the answers to
   * writes and syncs (see RequestClock).
   */
  readonly lastAnsweredSentAt: number;
  /**
   * The earliest moment (clock time) the leader may expire the session: `lastAnsweredSentAt` plus
   * the shortest timeout any handshake of the session negotiated (see RequestClock.deadline).
   */
  readonly deadline: number;
  /**
   * Ends the session (its ephemeral nodes go with it). May resolve once the server has ended it
   * (the C client's blocks until then instead).
   */
  close(): void | Promise<void>;
  /**
   * The connection gave this session up (declared it lost) and will close it later: from now on
   * it is closed to its users (`isClosed`), no answer resolves a request (they fail with
   * SESSIONEXPIRED) and no watch event is delivered. A reply read between the loss and the
   * close must not complete an acquire on a session whose holders were told it is gone.
   */
  abandon(): void;
  /** `acl` default: the binding's open ACL (world:anyone:cdrwa). */
  create(path: string, data: Buffer, mode: CreateMode, acl?: readonly ZkAcl[], options?: WriteOptions): Promise<string>;
  getChildren(path: string, watch?: WatchListener): Promise<{ children: string[]; stat: ZkStat }>;
  getData(path: string, watch?: WatchListener): Promise<{ data: Buffer; stat: ZkStat }>;
  /** Resolves null when the node does not exist (the watch then fires on its creation). */
  exists(path: string, watch?: WatchListener): Promise<ZkStat | null>;
  setData(path: string, data: Buffer, version?: number): Promise<ZkStat>;
  delete(path: string, version?: number, options?: WriteOptions): Promise<void>;
  /**
   * Makes the server this session reads from catch up with the leader. `urgent`: sent at once,
   * ahead of requests still waiting to be sent (the heartbeat); otherwise in order with them.
   */
  sync(path: string, options?: { urgent?: boolean }): Promise<void>;
  setAcl(path: string, acl: readonly ZkAcl[], version?: number): Promise<void>;
  getAcl(path: string): Promise<ZkAcl[]>;
  addAuth(scheme: string, credentials: string): Promise<void>;
  /** Forgets `listener` (its waiter stopped waiting); a watch left armed on the server fires to nobody. */
  unwatch(path: string, listener: WatchListener): void;
  /** How long the oldest request still waiting for its answer has waited (0 if none). */
  unansweredForMs(): number;
  /** Why the latest link attempt failed, where the client can tell (e.g. a TLS refusal); cleared by a handshake. */
  readonly lastLinkError?: string;
  /**
   * `host:port` of the server the session's link is connected to, or was last connected to (for
   * log lines); undefined before the first handshake, and where the client cannot tell.
   */
  readonly server?: string;
}

export interface WriteOptions {
  /**
   * May go in one multi request with the session's other batchable writes (see WriteBatcher).
   * Then it can fail with NOT_APPLIED: not applied, because another write of its batch
   * failed; the caller sends it again.
   */
  batchable?: boolean;
}

/** Opens a session: `events` are called as it connects, disconnects and closes. */
export type ZkSessionFactory = (init: SessionInit, events: SessionEvents) => ZkSession;
