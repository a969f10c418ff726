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

export type NotAcquiredReason = 'timeout' | 'aborted' | 'connection';

/** An acquire gave up: the wait ran out, the caller aborted, or the connection was closed. */
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
