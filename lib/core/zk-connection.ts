import { EventEmitter } from 'node:events';
import { ConnectionClosedError, ZkConnectError } from './errors.js';
import { resolveConnectionOptions, type ResolvedConnectionOptions, type ZkConnectionOptions } from './connection-options.js';
import { ZkSession } from './zk-session.js';
import { ZkCode } from './zk-error.js';
import { LockChannels, publish } from './diagnostics.js';

/**
 * - `connecting`: no session yet (before the first connect, or between a lost session and its successor)
 * - `connected`: the session is usable
 * - `suspended`: disconnected; the session may still live on the server (we cannot be sure)
 * - `lost`: the session is gone (expired, or disconnected longer than its timeout); a new one is being opened
 * - `closed`: closed by us, for good
 */
export type ConnectionState = 'connecting' | 'connected' | 'suspended' | 'lost' | 'closed';
export type SessionLostReason = 'session-expired' | 'session-timeout';

export interface ConnectionEvents {
  state: [state: ConnectionState, previous: ConnectionState];
  /** A new session is connected (the first one, or one opened after a loss). */
  connected: [sessionId: string];
  suspended: [];
  /** The same session is connected again after a suspension. */
  reconnected: [sessionId: string];
  lost: [reason: SessionLostReason, sessionId: string];
  closed: [];
}

const AUTH_FAILED_STATE = -113;
const WATCHDOG_INTERVAL_MS = 250;

/**
 * How long after a disconnection is noticed the session counts as lost: before the server can
 * have expired it. The server expires a session one timeout (T) after it last heard from the
 * client, and it heard from us at least when it last answered (`lastHeardAt`). The C client
 * notices a silent connection only after 2/3 T without a packet, so the last packet may be that
 * old: at most T/3 remain from the moment it is noticed. The margin covers the watchdog's lag.
 */
export function lostDelayMs(session: Pick<ZkSession, 'timeoutMs' | 'lastHeardAt'>, now = performance.now()): number {
  const timeout = session.timeoutMs;
  const margin = WATCHDOG_INTERVAL_MS + 50;
  return Math.max(0, Math.max(timeout / 3, session.lastHeardAt + timeout - now) - margin);
}
const EXPIRED_SESSION_STATE = -112;

/**
 * One logical ZooKeeper connection: a session at a time, opened again automatically after a loss,
 * with its state as events. Framework-free; the Nest module owns one.
 * @publicApi
 */
export class ZkConnection extends EventEmitter<ConnectionEvents> {
  readonly options: ResolvedConnectionOptions;
  private current: ZkSession | undefined;
  private currentState: ConnectionState = 'connecting';
  private lostTimer: NodeJS.Timeout | undefined;
  private generation = 0;
  private firstConnect: Promise<void> | undefined;

  constructor(options: ZkConnectionOptions) {
    super();
    this.options = resolveConnectionOptions(options);
    // Lock recipes add one listener per held lease; do not warn about "leaks" at 11.
    this.setMaxListeners(0);
  }

  get state(): ConnectionState {
    return this.currentState;
  }

  /** The current session (it may be suspended); undefined before `connect()` and after `close()`. */
  get session(): ZkSession | undefined {
    return this.current;
  }

  get sessionId(): string | undefined {
    return this.current && this.currentState !== 'connecting' ? this.current.id : undefined;
  }

  /** The negotiated session timeout of the current session. */
  get sessionTimeoutMs(): number {
    return this.current?.timeoutMs ?? this.options.sessionTimeoutMs;
  }

  /** `host:port[,...]` plus the chroot, for messages (never includes credentials). */
  get description(): string {
    return this.options.connectString + (this.options.chroot ?? '');
  }

  /**
   * Opens the first session and waits until it is usable: connected, authenticated, chroot present.
   * Rejects with ZkConnectError after `connectTimeoutMs`. Calling it again returns the same promise.
   */
  connect(): Promise<void> {
    if (!this.firstConnect) {
      this.watchdog = setInterval(() => this.checkNativeState(), WATCHDOG_INTERVAL_MS).unref();
      this.firstConnect = this.openFirstSession();
    }
    return this.firstConnect;
  }
  private watchdog: NodeJS.Timeout | undefined;
  private heartbeat: Promise<void> | undefined;

  /** Resolves with the session once connected; rejects when the connection is closed or `signal` aborts. */
  whenConnected(signal?: AbortSignal): Promise<ZkSession> {
    if (this.currentState === 'connected' && this.current) return Promise.resolve(this.current);
    if (this.currentState === 'closed') return Promise.reject(new ConnectionClosedError());
    return new Promise((resolve, reject) => {
      const onState = (state: ConnectionState) => {
        if (state === 'connected' && this.current) finish(() => resolve(this.current!));
        else if (state === 'closed') finish(() => reject(new ConnectionClosedError()));
      };
      const onAbort = () => finish(() => reject(signal!.reason));
      const finish = (settle: () => void) => {
        this.off('state', onState);
        signal?.removeEventListener('abort', onAbort);
        settle();
      };
      if (signal?.aborted) return reject(signal.reason);
      this.on('state', onState);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Closes the session (its ephemeral nodes go with it) and stops reconnecting. Idempotent. */
  async close(): Promise<void> {
    if (this.currentState === 'closed') return;
    this.clearTimers();
    const session = this.current;
    this.current = undefined;
    session?.close();
    this.setState('closed');
    this.emit('closed');
  }

  private async openFirstSession(): Promise<void> {
    const { connectTimeoutMs } = this.options;
    this.openSession();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.whenConnected(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new ZkConnectError(this.description, 'unreachable', `no server answered within connectTimeoutMs (${connectTimeoutMs} ms)`)),
            connectTimeoutMs,
          );
        }),
      ]);
    } catch (error) {
      await this.close();
      if (error instanceof ConnectionClosedError && this.failure) throw this.failure;
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sessions that were connected at least once (only their end is a loss). */
  private readonly connectedSessions = new WeakSet<ZkSession>();

  /** Set when a session fails for a reason worth reporting (auth, chroot) before the first connect. */
  private failure: ZkConnectError | undefined;

  private openSession(): ZkSession {
    const generation = ++this.generation;
    const { connectString, chroot, sessionTimeoutMs } = this.options;
    const isCurrent = () => generation === this.generation && this.currentState !== 'closed';
    let everConnected = false;
    const session: ZkSession = new ZkSession(
      { connectString: connectString + (chroot ?? ''), sessionTimeoutMs },
      {
        onConnected: () => {
          if (!isCurrent()) return;
          if (!everConnected) {
            everConnected = true;
            this.connectedSessions.add(session);
            void this.prepareSession(session, isCurrent);
          } else {
            this.resume(session);
          }
        },
        onConnecting: () => {
          if (!isCurrent() || !everConnected) return;
          this.suspend(session);
        },
        onClosed: (code) => {
          if (!isCurrent()) return;
          if (code === AUTH_FAILED_STATE) {
            this.failure = new ZkConnectError(this.description, 'auth-failed', 'the server rejected the credentials');
            void this.close();
          } else if (code === EXPIRED_SESSION_STATE) {
            this.sessionLost(session, 'session-expired');
          }
        },
      },
    );
    this.current = session;
    return session;
  }

  /** Adds credentials and checks the chroot before the session counts as connected. */
  private async prepareSession(session: ZkSession, isCurrent: () => boolean): Promise<void> {
    try {
      for (const { scheme, credentials } of this.options.auth) await session.addAuth(scheme, credentials);
      if (this.options.chroot && (await session.exists('/')) === null) {
        this.failure = new ZkConnectError(
          this.description,
          'chroot-missing',
          `the chroot ${this.options.chroot} does not exist; create it first (e.g. zkCli.sh create ${this.options.chroot})`,
        );
        await this.close();
        return;
      }
    } catch (error) {
      if (!isCurrent()) return;
      const code = (error as { code?: number }).code;
      if (code === ZkCode.AUTHFAILED || code === ZkCode.NOAUTH) {
        this.failure = new ZkConnectError(this.description, 'auth-failed', 'the server rejected the credentials', { cause: error });
        await this.close();
        return;
      }
      // Disconnected while preparing: the C client reconnects and we will be called again.
      if (session.isClosed) this.sessionLost(session, 'session-expired');
      else setTimeout(() => isCurrent() && void this.prepareSession(session, isCurrent), 100).unref();
      return;
    }
    if (!isCurrent()) return;
    this.clearLostTimer();
    this.setState('connected');
    this.emit('connected', session.id);
  }

  private suspend(session: ZkSession): void {
    if (session !== this.current || this.currentState !== 'connected') return;
    this.setState('suspended');
    this.emit('suspended');
    this.lostTimer = setTimeout(() => this.sessionLost(session, 'session-timeout'), lostDelayMs(session));
  }

  private resume(session: ZkSession): void {
    if (session !== this.current || this.currentState !== 'suspended') return;
    this.clearLostTimer();
    this.setState('connected');
    this.emit('reconnected', session.id);
  }

  /**
   * The native binding misses the "connecting" event when a request is sent on a socket the peer
   * has just closed; the C client's own state still tells. Checked a few times per second.
   */
  private checkNativeState(): void {
    const session = this.current;
    if (!session || !this.connectedSessions.has(session)) return;
    // Keep `lastHeardAt` fresh (the C client's pings are invisible to us), so that a disconnection
    // is not taken for a loss sooner than it needs to be.
    if (this.currentState === 'connected' && performance.now() - session.lastHeardAt > session.timeoutMs / 3 && !this.heartbeat) {
      this.heartbeat = session.exists('/').then(
        () => undefined,
        () => undefined,
      );
      void this.heartbeat.finally(() => (this.heartbeat = undefined));
    }
    if (this.currentState === 'connected' && !session.isConnectedNatively) this.suspend(session);
    else if (this.currentState === 'suspended' && session.isConnectedNatively) this.resume(session);
  }

  private sessionLost(session: ZkSession, reason: SessionLostReason): void {
    if (session !== this.current || this.currentState === 'closed') return;
    this.clearLostTimer();
    const sessionId = session.id;
    session.close();
    if (!this.connectedSessions.has(session)) {
      // Never connected: nothing was lost, keep trying.
      this.openSession();
      return;
    }
    this.setState('lost');
    this.emit('lost', reason, sessionId);
    this.openSession();
  }

  private setState(state: ConnectionState): void {
    const previous = this.currentState;
    if (previous === state) return;
    this.currentState = state;
    publish(LockChannels.connectionState, () => ({ state, previous, sessionId: this.current?.id }));
    this.emit('state', state, previous);
  }

  private clearLostTimer(): void {
    clearTimeout(this.lostTimer);
    this.lostTimer = undefined;
  }

  private clearTimers(): void {
    this.clearLostTimer();
    clearInterval(this.watchdog);
  }
}
