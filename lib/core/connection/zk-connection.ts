import { EventEmitter } from 'node:events';
import { ConnectionClosedError, ZkConnectError } from '../errors.js';
import { resolveConnectionOptions, type ResolvedConnectionOptions, type ZkConnectionOptions } from './connection-options.js';
import { nativeSessionFactory } from '../client/addon-session.js';
import { type LinkFailure, type ZkSession, type ZkSessionFactory } from '../client/session.js';
import { wireSessionFactoryWith } from '../client/wire/session.js';
import { isCertificateFailure, isTlsFailure } from '../client/wire/link-failure.js';
import { ZkCode } from '../client/zk-error.js';
import { publish } from '../diagnostics.js';
import { probeHosts } from './host-probe.js';
import { newSessionBackoffMs, refusedGrant } from '../client/session-opening.js';
import { sleep, systemClock, type Clock, type ClockTimer } from '../clock.js';
import { reportLagMs } from '../client/session-bookkeeping.js';

import type { ConnectionState, SessionLostReason } from './connection-state.js';
export type { ConnectionState, SessionLostReason } from './connection-state.js';

export interface ConnectionEvents {
  state: [state: ConnectionState, previous: ConnectionState];
  /** A new session is connected (the first one, or one opened after a loss). */
  connected: [sessionId: string];
  suspended: [];
  /** The same session is connected again after a suspension. */
  reconnected: [sessionId: string];
  lost: [reason: SessionLostReason, sessionId: string];
  closed: [];
  /**
   * The first session is not connected yet: what each server said to a look-up and TCP connect
   * (the session retries silently). From 2 s after the start (sooner with a short connectTimeoutMs), then every 10 s.
   */
  unreachable: [problems: string[], elapsedMs: number];
}

const AUTH_FAILED_STATE = -113;
/** When the first "still not connected" probe runs (a healthy connect takes milliseconds), and then how often. */
const FIRST_PROBE_MS = 2000;
const PROBE_EVERY_MS = 10_000;

/**
 * How often the watchdog looks at the session's link state and the heartbeat's due time: at most a
 * fortieth of the session timeout, so that a heartbeat goes out within T/20 + T/40 (see lossMarginMs).
 */
function watchdogIntervalMs(sessionTimeoutMs: number): number {
  return Math.max(20, Math.min(250, sessionTimeoutMs / 40));
}

/** A sync goes out this often, also while earlier ones are unanswered (up to MAX_HEARTBEATS_IN_FLIGHT). */
function heartbeatAfterMs(sessionTimeoutMs: number): number {
  return sessionTimeoutMs / 20;
}

/** Heartbeats one link may have unanswered: a slow link still gets one every T/20. */
const MAX_HEARTBEATS_IN_FLIGHT = 4;

/**
 * How long before the leader may expire the session we count it as lost: room for timers firing
 * late on a busy event loop and for clock drift (the follower's report to the leader is already
 * in the deadline: see RequestClock). A tenth of the session timeout, at least 250 ms.
 */
export function lossMarginMs(sessionTimeoutMs: number): number {
  return Math.max(250, sessionTimeoutMs / 10);
}
const EXPIRED_SESSION_STATE = -112;
/** The period of the timer that keeps the process alive while a call is pending (it does nothing). */
const KEEP_ALIVE_INTERVAL_MS = 3_600_000;

/**
 * One logical ZooKeeper connection: a session at a time, opened again automatically after a loss,
 * with its state as events. Framework-free; the Nest module owns one.
 * @publicApi
 */
export class ZkConnection extends EventEmitter<ConnectionEvents> {
  /**
   * Adds `handlers` and returns the function that removes them again: for listeners whose owner
   * may end before the connection does (an engine or Nest module on a connection passed in).
   */
  listen(handlers: { [K in keyof ConnectionEvents]?: (...args: ConnectionEvents[K]) => void }): () => void {
    const added = Object.entries(handlers) as [keyof ConnectionEvents, (...args: any[]) => void][];
    for (const [event, handler] of added) this.on(event, handler as any);
    return () => {
      for (const [event, handler] of added) this.off(event, handler as any);
    };
  }

  readonly options: ResolvedConnectionOptions;
  private current: ZkSession | undefined;
  private currentState: ConnectionState = 'connecting';
  /** Fires at the current session's deadline (less the margin) unless a fresher answer moved it. */
  private deadlineTimer: ClockTimer | undefined;
  private generation = 0;
  private firstConnect: Promise<void> | undefined;

  private readonly openWith: ZkSessionFactory;

  /**
   * `openWith` opens each session: by default the client that `options.client` names;
   * `nestjs-zk-lock/testing` passes its in-memory ZooKeeper's. `clock`: where the connection and
   * its sessions read the time and arm their timers (a simulation passes a virtual one).
   */
  constructor(
    options: ZkConnectionOptions,
    openWith?: ZkSessionFactory,
    readonly clock: Clock = systemClock,
  ) {
    super();
    this.options = resolveConnectionOptions(options);
    const { client, tls, maxReplyBytes } = this.options;
    this.openWith = openWith ?? (client === 'addon' ? nativeSessionFactory : wireSessionFactoryWith({ tls, maxReplyBytes }));
    // Lock recipes add one listener per held lease; do not warn about "leaks" at 11.
    this.setMaxListeners(0);
  }

  /** Whether sessions come from the `zookeeper` addon (not, say, the testing kit's in-memory server). */
  get usesAddon(): boolean {
    return this.openWith === nativeSessionFactory;
  }

  get state(): ConnectionState {
    return this.currentState;
  }

  /**
   * @internal When the link last came up (counted as connected) and went down (clock time), and how
   * long its oldest request had gone unanswered then: for a deadline whose timer ran late.
   */
  readonly links = { upAt: Infinity, downAt: -Infinity, unansweredAtDown: 0 };

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

  /**
   * The earliest moment (clock time) the server may expire the current session: the shortest
   * timeout it negotiated after the send time of the newest request the leader surely heard of
   * (see ZkSession.deadline). The session counts as lost a margin before it (`lossMarginMs`),
   * connected or not, unless a fresher answer moves it.
   */
  get sessionDeadline(): number {
    return this.current?.deadline ?? -Infinity;
  }

  /**
   * @internal Declares the session lost now if its deadline (less the margin) has passed: a synchronous
   * check for code that resumes after the event loop was blocked, before the deadline timer ran.
   * Returns false when the session is lost (or there is none).
   */
  checkDeadline(): boolean {
    const session = this.current;
    if (!session || this.currentState === 'closed' || this.currentState === 'connecting' || this.currentState === 'lost') return false;
    if (!this.connectedSessions.has(session)) return false;
    if (this.clock.now() < this.sessionDeadline - lossMarginMs(session.timeoutMs)) return true;
    this.sessionLost(session, 'session-timeout');
    return false;
  }

  /** `host:port[,...]` plus the chroot, for messages (never includes credentials). */
  get description(): string {
    return this.options.connectString + (this.options.chroot ?? '');
  }

  /**
   * Opens the first session and waits until it is usable: connected, authenticated, chroot present.
   * Rejects with ZkConnectError after `connectTimeoutMs` (saying what each server answered to a
   * probe) and closes. Calling it again returns the same promise.
   */
  connect(): Promise<void> {
    // A connect begun in the background keeps no process alive (nor does waiting for it here).
    if (this.firstConnect && this.connectingInBackground) return this.firstConnect;
    this.firstConnect ??= this.openFirstSession();
    return this.keepAliveUntilSettled(this.firstConnect);
  }
  private connectingInBackground = false;

  /**
   * Opens the first session in the background and returns at once: it keeps trying, with no
   * deadline, until connected or closed (for services that must start while ZooKeeper is down;
   * until then, lock calls fail with reason `connection`). Without effect once connecting.
   */
  connectInBackground(): void {
    if (this.firstConnect) return;
    this.connectingInBackground = true;
    this.start(FIRST_PROBE_MS);
    // Not a pending call: a process with nothing else to do may exit while this keeps trying.
    this.firstConnect = this.untilConnected().then(() => undefined);
    this.firstConnect.catch(() => undefined); // closed before it connected: nobody is waiting
  }

  /** Why the connection closed before its first session was usable (auth, chroot, a certificate), if it did. */
  get failure(): ZkConnectError | undefined {
    return this.failed;
  }

  private start(firstProbeMs: number): void {
    this.watchdog = this.clock.setInterval(() => this.checkNativeState(), watchdogIntervalMs(this.options.sessionTimeoutMs)).unref();
    this.openSession();
    this.probeUntilConnected(firstProbeMs);
  }

  /** Probes the servers while the first session is not connected, and says what they answered. */
  private probeUntilConnected(firstProbeMs: number): void {
    const started = this.clock.now();
    const round = async () => {
      if (this.currentState !== 'connecting') return;
      const results = await probeHosts(this.options.hosts, { failures: this.linkFailures, clock: this.clock });
      if (this.currentState !== 'connecting') return;
      const problems = results.map((r) => `${r.server}: ${r.said}`);
      // What the session itself last met on a link (a refusal, say), unless said above already.
      const linkError = this.current?.lastLinkError ?? this.refusal;
      if (linkError && !problems.includes(linkError)) problems.push(`last attempt: ${linkError}`);
      this.lastProbe = problems;
      this.otherProtocol = new Set(results.filter((r) => r.otherProtocol).map((r) => r.server));
      this.emit('unreachable', problems, Math.round(this.clock.now() - started));
      this.probeTimer = this.clock.setTimeout(round, PROBE_EVERY_MS).unref();
    };
    this.probeTimer = this.clock.setTimeout(round, firstProbeMs).unref();
  }
  private probeTimer: ClockTimer | undefined;
  private lastProbe: string[] | undefined;
  /** The servers whose port the last probe found to speak the other protocol (TLS or plain). */
  private otherProtocol = new Set<string>();
  /** The latest failure of a link attempt to each server (`host:port`), until the first session is usable. */
  private readonly linkFailures = new Map<string, LinkFailure>();
  /** Ends the first connect() early (every server refused a certificate); set while it runs. */
  private stopFirstConnect: ((error: ZkConnectError) => void) | undefined;

  /**
   * A link attempt failed before the first session was usable. Once every server failed the TLS
   * handshake for a certificate (retrying does not mend a certificate), connect() fails at once;
   * any other failure is retried until connectTimeoutMs, as is everything in connectInBackground().
   */
  private linkFailed(failure: LinkFailure): void {
    if (this.currentState !== 'connecting') return;
    this.linkFailures.set(failure.server, failure);
    const failures = this.options.hosts.map((server) => this.linkFailures.get(server));
    if (!this.stopFirstConnect || !failures.every((f) => f !== undefined && isCertificateFailure(f.kind))) return;
    const said = failures.map((f) => `${f!.server}: ${f!.message}`).join('; ');
    this.failed = new ZkConnectError(this.description, 'tls', `no server passed the TLS handshake, for a certificate reason that retrying does not mend: ${said}`);
    this.stopFirstConnect(this.failed);
  }

  /** Whether TLS failed on every server, or the port speaks the other protocol: the reason of a connect that timed out. */
  private get tlsFailedEverywhere(): boolean {
    return this.options.hosts.every((server) => this.otherProtocol.has(server) || isTlsFailure(this.linkFailures.get(server)?.kind ?? 'other'));
  }

  private watchdog: ClockTimer | undefined;
  /** The heartbeats of the current session's link: when the last went out, and how many are unanswered. */
  private heartbeats = { link: -1, sentAt: -Infinity, inFlight: 0 };

  /** Calls pending now (see keepAliveUntilSettled), and the one timer that keeps the process alive meanwhile. */
  private pendingCalls = 0;
  private keepAliveTimer: ClockTimer | undefined;

  /**
   * @internal Keeps the process alive until `work` settles, as a pending socket read would: while
   * disconnected the session holds no socket and every timer of the client is unref'd, so a
   * script awaiting a release or an acquire while ZooKeeper is away would otherwise exit (code 13)
   * in the middle of the call. Every call a user awaits (connection, engine, recipes, leases) goes
   * through here; one ref'd timer serves them all, armed only while one is pending. Returns `work`.
   */
  keepAliveUntilSettled<T>(work: Promise<T>): Promise<T> {
    if (this.pendingCalls++ === 0) this.keepAliveTimer = this.clock.setInterval(() => undefined, KEEP_ALIVE_INTERVAL_MS).ref();
    const settled = () => {
      if (--this.pendingCalls > 0) return;
      // unref() too: a timer armed before a test installed fake timers is not cleared by theirs.
      this.keepAliveTimer?.unref();
      this.clock.clearInterval(this.keepAliveTimer);
      this.keepAliveTimer = undefined;
    };
    work.then(settled, settled);
    return work;
  }

  /** Resolves with the session once connected; rejects when the connection is closed or `signal` aborts. */
  whenConnected(signal?: AbortSignal): Promise<ZkSession> {
    return this.keepAliveUntilSettled(this.untilConnected(signal));
  }

  /** whenConnected for the connection's own waits, which keep no process alive. */
  private untilConnected(signal?: AbortSignal): Promise<ZkSession> {
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
  close(): Promise<void> {
    return this.keepAliveUntilSettled(this.closeSession());
  }

  private async closeSession(): Promise<void> {
    if (this.currentState === 'closed') return;
    this.clearTimers();
    const session = this.current;
    this.current = undefined;
    this.linkUpWaiters = [];
    let ended: void | Promise<void>;
    try {
      ended = session?.close();
    } finally {
      // Closed for its users whatever the session's close did (held leases' signals abort now).
      this.setState('closed');
      this.emit('closed');
    }
    // A session that ends asynchronously (the wire client) is gone from the server once this resolves.
    await ended;
  }

  private async openFirstSession(): Promise<void> {
    const { connectTimeoutMs } = this.options;
    // Soon enough that a short connectTimeoutMs still fails with the answers (a probe takes ≤ 1.3 s).
    this.start(Math.min(FIRST_PROBE_MS, Math.max(0, connectTimeoutMs - 1500)));
    let timer: ClockTimer | undefined;
    try {
      await Promise.race([
        this.untilConnected(),
        new Promise<never>((_, reject) => {
          this.stopFirstConnect = reject;
          timer = this.clock.setTimeout(() => {
            // What the servers answered to the last probe, if one finished in time (never waits for one).
            const problems = this.lastProbe ? `: ${this.lastProbe.join('; ')}` : '';
            const tls = this.tlsFailedEverywhere;
            const what = tls ? 'no session came up' : 'no server answered';
            reject(new ZkConnectError(this.description, tls ? 'tls' : 'unreachable', `${what} within connectTimeoutMs (${connectTimeoutMs} ms)${problems}`));
          }, connectTimeoutMs);
        }),
      ]);
    } catch (error) {
      await this.close();
      if (error instanceof ConnectionClosedError && this.failed) throw this.failed;
      throw error;
    } finally {
      this.stopFirstConnect = undefined;
      this.clock.clearTimeout(timer);
    }
  }

  /** Sessions that were connected at least once (only their end is a loss). */
  private readonly connectedSessions = new WeakSet<ZkSession>();

  /** Set when a session fails for a reason worth reporting (auth, chroot, a certificate) before the first connect. */
  private failed: ZkConnectError | undefined;

  private openSession(): ZkSession {
    const generation = ++this.generation;
    const { connectString, chroot, sessionTimeoutMs, serverTickTimeMs } = this.options;
    const isCurrent = () => generation === this.generation && this.currentState !== 'closed';
    let everConnected = false;
    this.usableSince = undefined;
    const session: ZkSession = this.openWith(
      { connectString: connectString + (chroot ?? ''), sessionTimeoutMs, serverTickTimeMs, clock: this.clock },
      {
        onConnected: () => {
          if (!isCurrent()) return;
          if (!everConnected) {
            // A timeout no server grants for our ask (the C client takes any, 0 included): never usable.
            const refused = refusedGrant(session.timeoutMs, sessionTimeoutMs, true, serverTickTimeMs);
            if (refused !== undefined) return this.refuseSession(session, refused);
            everConnected = true;
            this.connectedSessions.add(session);
            void this.prepareSession(session, isCurrent);
          } else {
            // Re-attached: the timeout negotiated now may be shorter, so the deadline may be
            // earlier than the timer was armed for.
            if (this.connectedSessions.has(session)) this.armDeadline(session);
            // A new link: whatever we learned on the old one is unconfirmed until the server answers
            // on this one, also when the drop itself went unnoticed (the binding can miss it).
            this.suspend(session);
            this.resume(session);
          }
        },
        onConnecting: () => {
          if (!isCurrent() || !everConnected) return;
          this.suspend(session);
        },
        onLinkFailed: (failure) => isCurrent() && this.linkFailed(failure),
        onClosed: (code) => {
          if (!isCurrent()) return;
          if (code === AUTH_FAILED_STATE) {
            this.failed = new ZkConnectError(this.description, 'auth-failed', 'the server rejected the credentials');
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
        this.failed = new ZkConnectError(
          this.description,
          'chroot-missing',
          `the chroot ${this.options.chroot} does not exist; create it first (e.g. zkCli.sh create ${this.options.chroot})`,
        );
        await this.close();
        return;
      }
      await this.freshenDeadline(session);
    } catch (error) {
      if (!isCurrent()) return;
      const code = (error as { code?: number }).code;
      if (code === ZkCode.AUTHFAILED || code === ZkCode.NOAUTH) {
        this.failed = new ZkConnectError(this.description, 'auth-failed', 'the server rejected the credentials', { cause: error });
        await this.close();
        return;
      }
      // Disconnected while preparing: the session reconnects and we will be called again.
      if (session.isClosed) this.sessionLost(session, 'session-expired');
      else this.prepareAgain(session, isCurrent);
      return;
    }
    if (!isCurrent()) return;
    // The link dropped after the last answer (freshenDeadline sleeps between its syncs): connected
    // now, every request would fail at once and a caller that retries on that would spin.
    if (!session.isConnectedNatively) return this.prepareAgain(session, isCurrent);
    this.usableSince = { at: this.clock.now(), timeoutMs: session.timeoutMs };
    this.refusal = undefined;
    this.linkFailures.clear();
    this.armDeadline(session);
    this.setState('connected');
    this.emit('connected', session.id);
  }

  private prepareAgain(session: ZkSession, isCurrent: () => boolean): void {
    this.clock.setTimeout(() => isCurrent() && void this.prepareSession(session, isCurrent), 100).unref();
  }

  /**
   * A session whose deadline is behind it (or nearly) as it comes up counts as usable only once
   * answers move it: the C client writes its ConnectRequest out of our sight, so a new session's
   * bound is its handle's creation, past after an outage longer than the timeout. A sync's answer
   * moves the bound to the send time of a request answered a report's time before that sync was
   * sent (see RequestClock): a few syncs that far apart do. A session whose bound is ahead by more
   * than that (ours, counted from the ConnectRequest, unless its answer came very late) sends none.
   */
  private async freshenDeadline(session: ZkSession): Promise<void> {
    // Ahead by a report's time: the heartbeats' answers move it before it comes.
    const lag = () => reportLagMs(this.options.serverTickTimeMs, session.timeoutMs);
    const ahead = () => session.deadline - lossMarginMs(session.timeoutMs) - this.clock.now() > lag();
    for (let tries = 0; tries < 4 && !ahead() && !session.isClosed; tries++) {
      await session.sync('/');
      await sleep(this.clock, lag());
    }
  }

  /** (Re)arms the deadline timer of `session`; when it fires with no fresher answer, the session is lost. */
  private armDeadline(session: ZkSession): void {
    this.clock.clearTimeout(this.deadlineTimer);
    const due = this.sessionDeadline - lossMarginMs(session.timeoutMs) - this.clock.now();
    this.deadlineTimer = this.clock.setTimeout(() => {
      if (session !== this.current || this.currentState === 'closed') return;
      if (this.checkDeadline()) this.armDeadline(session);
    }, Math.max(0, due));
    this.deadlineTimer.unref();
  }

  /**
   * Counts the links the current session went through: bumped when one drops, so that an answer
   * to a request sent on an earlier link confirms nothing about the current one.
   */
  private link = 0;
  /** The link whose confirmation is in flight (see resume). */
  private confirming: number | undefined;
  /** Asked to run when the link is back, before its confirming sync (see onLinkUp). */
  private linkUpWaiters: { session: ZkSession; run: () => void }[] = [];
  /** The link on which a request went out after its confirming sync: confirm it again. */
  private reconfirm: number | undefined;
  /** onLinkUp runs scheduled and not yet run: a confirmation waits for them to have sent. */
  private linkUpRuns = 0;

  /**
   * @internal Calls `run` once `session`'s link is up (at once, in a later turn, if it is), so that what it
   * asks goes out before the sync that confirms the link is answered, and is answered before the
   * connection counts as connected again: for a watch whose request failed when the link dropped,
   * which the confirmation must not overtake. Never if the session ends first.
   */
  onLinkUp(session: ZkSession, run: () => void): void {
    if (session !== this.current || session.isClosed || this.currentState === 'closed') return;
    const up = session.isConnectedNatively && (this.currentState === 'connected' || this.confirming === this.link);
    if (!up) {
      this.linkUpWaiters.push({ session, run });
      return;
    }
    if (this.currentState !== 'connected') this.reconfirm = this.link;
    this.linkUpRuns++;
    this.clock.setImmediate(() => {
      this.linkUpRuns--;
      if (session === this.current && !session.isClosed) run();
    });
  }

  /** Disconnected: the session lives on until its deadline (the deadline timer keeps running). */
  private suspend(session: ZkSession): void {
    if (session !== this.current) return;
    this.link++;
    if (this.currentState !== 'connected') return;
    this.setState('suspended');
    this.emit('suspended');
  }

  /**
   * Connected again, but everything learned before the drop (a watch set, a node of ours, a
   * leader's term) is unconfirmed: the server sends the events of the watches the client re-sent
   * (a deletion of our node while we were away, say) after the reconnect, and before the answer to
   * any request sent after it. So the session counts as connected again, and 'reconnected' is
   * emitted, only once a sync sent on this link is answered: by then every such event was
   * delivered, and the answer went through the leader, which still knew the session.
   */
  private resume(session: ZkSession): void {
    if (session !== this.current || this.currentState !== 'suspended') return;
    if (!this.checkDeadline()) return; // reconnected too late: the server may have expired it
    const link = this.link;
    if (this.confirming === link) return;
    this.confirming = link;
    // Watches to set again go first, on this link, ahead of the confirming sync.
    const waiters = this.linkUpWaiters.filter((w) => w.session === session);
    this.linkUpWaiters = [];
    for (const waiter of waiters) waiter.run();
    this.confirmLink(session, link);
  }

  private confirmLink(session: ZkSession, link: number): void {
    const confirmed = () => {
      if (session !== this.current || this.currentState !== 'suspended' || link !== this.link || this.confirming !== link) return;
      if (this.reconfirm !== undefined || this.linkUpRuns > 0) {
        // Something went out after this sync, or is about to (onLinkUp): a sync sent after it
        // confirms (the runs scheduled so far go first).
        this.reconfirm = undefined;
        this.clock.setImmediate(() => this.confirmLink(session, link));
        return;
      }
      this.confirming = undefined;
      if (!session.isConnectedNatively || !this.checkDeadline()) return;
      this.setState('connected');
      this.emit('reconnected', session.id);
    };
    // Failed (the link dropped again, or the server refused): the next connect or watchdog round retries.
    const failed = () => void (this.confirming === link && (this.confirming = undefined));
    // In order with what waits to be sent (a watch set again, say), not ahead of it.
    session.sync('/').then(confirmed, failed);
  }

  /**
   * The native binding misses the "connecting" event when a request is sent on a socket the peer
   * has just closed; the session's own link state still tells. Checked a few times per second.
   */
  private checkNativeState(): void {
    const session = this.current;
    if (!session || !this.connectedSessions.has(session)) return;
    // Keep the deadline fresh (the session's pings are invisible to us): a request whenever the
    // newest answered one was sent a quarter of the timeout ago, so that an answer has the rest.
    if (this.currentState === 'connected') this.sendHeartbeat(session);
    if (this.currentState === 'connected' && !session.isConnectedNatively) this.suspend(session);
    else if (this.currentState === 'suspended' && session.isConnectedNatively) this.resume(session);
  }

  /**
   * A sync every T/20 while connected; their answers move the deadline. A sync, not a read: a
   * follower forwards it to the leader, so a follower cut off from the leader cannot answer it (it
   * answers reads). Several may be unanswered on a slow link, so that the link's requests stay
   * close together (see RequestClock); one sent on an earlier link never holds the next back.
   */
  private sendHeartbeat(session: ZkSession): void {
    const now = this.clock.now();
    if (this.heartbeats.link !== this.link) this.heartbeats = { link: this.link, sentAt: -Infinity, inFlight: 0 };
    const beats = this.heartbeats;
    if (now - beats.sentAt < heartbeatAfterMs(session.timeoutMs) || beats.inFlight >= MAX_HEARTBEATS_IN_FLIGHT) return;
    beats.sentAt = now;
    beats.inFlight++;
    const done = () => void beats.inFlight--;
    session.sync('/', { urgent: true }).then(done, done);
  }

  private sessionLost(session: ZkSession, reason: SessionLostReason): void {
    if (session !== this.current || this.currentState === 'closed') return;
    this.clock.clearTimeout(this.deadlineTimer);
    const sessionId = session.id;
    if (!this.connectedSessions.has(session)) {
      // Never connected: nothing was lost, keep trying.
      session.close();
      this.openSuccessor();
      return;
    }
    // Holders first: closing a handle whose link went silent blocks the event loop until the C
    // client gives up waiting for the server's answer to the close (1.5 s), and a signal that
    // aborts after that may come after the server freed the lock. So the successor becomes
    // current (what held on the old session is told it is gone), then the loss is announced,
    // then the old handle is closed. Until then it answers nothing (abandon): a reply read in
    // between must not complete an acquire after its holders were told the session is gone.
    session.abandon();
    this.linkUpWaiters = [];
    this.openSuccessor();
    this.setState('lost');
    this.emit('lost', reason, sessionId);
    this.clock.setImmediate(() => session.close());
  }

  /** Why the latest new session was refused (see refusedGrant), for the connect error. */
  private refusal: string | undefined;

  private refuseSession(session: ZkSession, reason: string): void {
    this.refusal = reason;
    this.openSuccessor();
    // Not from inside the session's own callback (the C client's), as in sessionLost.
    this.clock.setImmediate(() => void session.close());
  }

  /** Sessions in a row that ended before they were usable; 0 once one was (see newSessionBackoffMs). */
  private unusableInARow = 0;
  /** When the current session became usable, and with which timeout (undefined: not yet). */
  private usableSince: { at: number; timeoutMs: number } | undefined;
  private successorTimer: ClockTimer | undefined;

  /**
   * The current session ended: the next one opens at once after a session that lived its timeout,
   * else after a pause with jitter (no session is current meanwhile) that grows while sessions end
   * young (a server that expires every new session must not get thousands of them a second).
   */
  private openSuccessor(): void {
    // A session lost within its own timeout of becoming usable counts as unusable: a server that
    // grants a timeout too short to keep (below the loss margin, say) must not get a session every
    // few milliseconds either.
    const lived = this.usableSince !== undefined && this.clock.now() - this.usableSince.at >= this.usableSince.timeoutMs;
    this.unusableInARow = lived ? 0 : this.unusableInARow + 1;
    // After a session that lived, the next one opens at once: its holders want to take their locks
    // again, and a caller right after the loss finds a session coming up.
    if (lived) {
      this.openSession();
      return;
    }
    this.current = undefined;
    this.generation++;
    this.successorTimer = this.clock.setTimeout(() => {
      this.successorTimer = undefined;
      if (this.currentState !== 'closed') this.openSession();
    }, newSessionBackoffMs(this.unusableInARow, this.clock.random));
  }

  private setState(state: ConnectionState): void {
    const previous = this.currentState;
    if (previous === state) return;
    this.currentState = state;
    if (state === 'connected') this.links.upAt = this.clock.now();
    else if (previous === 'connected' || state === 'lost') {
      this.links.downAt = this.clock.now();
      // Lost at its deadline: nothing had been answered for most of the session timeout.
      this.links.unansweredAtDown = state === 'lost' ? Infinity : (this.current?.unansweredForMs() ?? 0);
    }
    publish('connectionState', () => ({ state, previous, sessionId: this.current?.id }));
    this.emit('state', state, previous);
  }

  private clearTimers(): void {
    this.clock.clearTimeout(this.deadlineTimer);
    this.clock.clearTimeout(this.probeTimer);
    this.clock.clearInterval(this.watchdog);
    this.clock.clearTimeout(this.successorTimer);
  }
}
