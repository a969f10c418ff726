import type { HolderInfo } from './operations/holder-data.js';

/**
 * Typed errors of the lock library. None of them is an HttpException: they also travel through
 * scheduled jobs, event listeners and queues (ZkLockModule answers them in HTTP, RPC and WebSocket contexts).
 * @publicApi
 */
export class ZkLockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** An option has a bad value; `option` names it. */
export class InvalidOptionError extends ZkLockError {
  constructor(
    readonly option: string,
    detail: string,
  ) {
    super(`Invalid option "${option}": ${detail}`);
  }
}

/** A lock name cannot be mapped to a ZooKeeper path; the message quotes the name. */
export class InvalidLockNameError extends ZkLockError {
  constructor(
    readonly lockName: string,
    detail: string,
  ) {
    super(`Invalid lock name ${JSON.stringify(lockName)}: ${detail}`);
  }
}

export type ConnectFailureReason = 'unreachable' | 'tls' | 'auth-failed' | 'chroot-missing' | 'session-expired' | 'closed';

/**
 * The ensemble could not be reached (or refused us) within `connectTimeoutMs`. `tls`: the TLS
 * handshake failed (the message names why: a certificate not trusted, a host name it is not made
 * out to, a client certificate refused, the protocol), or the port speaks the other protocol; a
 * certificate refused by every server fails at once, without waiting out `connectTimeoutMs`.
 */
export class ZkConnectError extends ZkLockError {
  constructor(
    readonly connectString: string,
    readonly reason: ConnectFailureReason,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`Cannot connect to ZooKeeper at ${connectString} (${reason}): ${detail}`, options);
  }
}

/**
 * ZooKeeper's reply to one request (a lock's queue listing, say) is larger than the client accepts
 * (`maxReplyBytes`). Only that request fails: the reply is skipped unread and the connection and
 * its session live on. Raise `maxReplyBytes` in the connection options to read it.
 */
export class ReplyTooLargeError extends ZkLockError {
  constructor(
    readonly operation: string,
    readonly path: string | undefined,
    /** The reply's length in bytes (its frame, without the 4-byte length prefix), where known. */
    readonly replyBytes: number | undefined,
    readonly maxReplyBytes: number,
  ) {
    super(
      `ZooKeeper's reply to ${operation}${path === undefined ? '' : ` ${path}`} is ${replyBytes === undefined ? 'larger than' : `${replyBytes} bytes, over`} ` +
        `the client's limit of ${maxReplyBytes} bytes: raise the connection option maxReplyBytes to read it`,
    );
  }
}

/**
 * A call's `signal` (`inspect`, `revoke`) aborted while it waited for a ZooKeeper session: no
 * session was up all that time. `cause` is the signal's reason (a `TimeoutError` DOMException for
 * `AbortSignal.timeout(ms)`).
 */
export class SessionWaitAbortedError extends ZkLockError {
  constructor(
    readonly operation: string,
    options: { cause: unknown },
  ) {
    super(`${operation} gave up waiting for a ZooKeeper session: ${describeReason(options.cause)}`, options);
  }

  /** Whether the signal aborted for a timeout (`AbortSignal.timeout`, or a reason named TimeoutError). */
  get timedOut(): boolean {
    return (this.cause as { name?: unknown } | undefined)?.name === 'TimeoutError';
  }
}

function describeReason(reason: unknown): string {
  if (reason instanceof Error) return reason.message || reason.name;
  return `the signal aborted (${String(reason)})`;
}

/** The connection was closed (module shutdown) while an operation needed it. */
export class ConnectionClosedError extends ZkLockError {
  constructor(detail = 'the ZooKeeper connection is closed') {
    super(detail);
  }
}

/**
 * `deadlock`: the wait was one of a cycle of waits across processes and it was the one to give
 * up (a `DeadlockError`).
 */
export type NotAcquiredReason = 'timeout' | 'aborted' | 'connection' | 'deadlock';

/** An acquire gave up: the wait ran out, the caller aborted, the connection was closed, or it was in a deadlock. */
export class LockNotAcquiredError extends ZkLockError {
  constructor(
    readonly lockName: string,
    readonly reason: NotAcquiredReason,
    detail?: string,
    options?: { cause?: unknown },
  ) {
    super(detail ?? `Lock ${JSON.stringify(lockName)} was not acquired (${reason})`, options);
  }
}

/**
 * One waiter in a deadlock: it holds `lock`, which the member before it waits for, and waits for
 * `waitsFor`, which the member after it holds (the last one's is held by the first).
 * @publicApi
 */
export interface DeadlockMember {
  /** The lock it holds that the previous member waits for. */
  readonly lock: string;
  /** Its node holding `lock`. */
  readonly holdingNode: string;
  /** Who it is: its waiting node's data (host, pid, app, instance, and the locks it holds). */
  readonly holder: Partial<HolderInfo>;
  /** The ZooKeeper session of both its nodes, in hex. */
  readonly sessionId: string;
  /** The lock it waits for. */
  readonly waitsFor: string;
  /** Its node waiting in `waitsFor`. */
  readonly waitingNode: string;
  /** When it began to wait (its waiting node's creation, by the server's clock). */
  readonly waitingSince: Date;
}

/**
 * A cycle of waits: each member waits for a lock the next one holds, so none can go on. The first
 * member is the wait that began last (the highest czxid of the waiting nodes): the one that gives
 * up with a `DeadlockError`, so that the others go on.
 * @publicApi
 */
export interface Deadlock {
  readonly members: readonly DeadlockMember[];
}

/**
 * An acquire that would have waited for ever: its call chain holds a lock that the holder of the
 * lock it waits for waits for, directly or along a cycle of processes (`deadlock.members`). Of
 * the cycle's waits, the one that began last fails at once with this error (its node deleted, as
 * any wait that gives up); the others keep waiting and go on once its call chain released what it
 * holds. A `LockNotAcquiredError` with reason `deadlock`.
 */
export class DeadlockError extends LockNotAcquiredError {
  constructor(
    lockName: string,
    readonly deadlock: Deadlock,
  ) {
    super(lockName, 'deadlock', `Lock ${JSON.stringify(lockName)} was not acquired: deadlock: ${describeDeadlock(deadlock)}`);
  }
}

/** `/a (held by host:pid app/instance, waits for /b) → /b (held by …, waits for /a)`. */
export function describeDeadlock(deadlock: Deadlock): string {
  return deadlock.members
    .map((m) => {
      const { host, pid, app, instance } = m.holder;
      const who = [`${host ?? '?'}${pid === undefined ? '' : `:${pid}`}`, [app, instance].filter(Boolean).join('/')].filter(Boolean).join(' ');
      return `${m.lock} is held by ${who} (session 0x${m.sessionId}), which waits for ${m.waitsFor}`;
    })
    .join('; ');
}

export type LockLostReason =
  /** ZooKeeper expired the session that owned the lock node. */
  | 'session-expired'
  /** Disconnected for longer than the session timeout: the server has (or will have) expired it. */
  | 'session-timeout'
  /** Someone else deleted the lock node. */
  | 'node-deleted'
  /** The lease's maximum hold time (`leaseMs`) elapsed and the lease released itself. */
  | 'lease-expired'
  /** The connection was closed while the lock was held. */
  | 'connection-closed'
  /** The application shut down and the holder had not released within `shutdownGraceMs`. */
  | 'shutdown'
  /** A leader stepped down (`Leadership.stepDown()` / `close()`, also at the application's shutdown). */
  | 'stepped-down'
  /**
   * Someone asked the holder to let go (`revoke`, Curator's `Revoker`) and the lock was made with
   * `revocable: true`: the signal aborts so the work stops, and the lock is held until `release()`.
   */
  | 'revoked';

/** The reason a lease's `signal` aborts with. */
export class LockLostError extends ZkLockError {
  constructor(
    readonly lockName: string,
    readonly reason: LockLostReason,
  ) {
    super(`Lock ${JSON.stringify(lockName)} was lost (${reason})`);
  }
}

/** A request the lock cannot grant without deadlocking (e.g. a read → write upgrade). */
export class LockUsageError extends ZkLockError {}

/** A leader-only call (`@OnlyLeader(name, { onNotLeader: 'throw' })`) on an instance that does not lead `election`. */
export class NotLeaderError extends ZkLockError {
  constructor(readonly election: string) {
    super(`This instance is not the leader of ${JSON.stringify(election)}`);
  }
}
