// WireZkSession: a ZooKeeper session over node:net in TypeScript (no native code), behind the same
// ZkSession seam as the C client's NativeZkSession. The default session of ZkConnection.
import net from 'node:net';
import tls from 'node:tls';
import { isServerCode, ZkCode, ZkError } from '../zk-error.js';
import { ClientWatches, DEFAULT_SERVER_TICK_MS, MIN_IN_FLIGHT, nextWindow, RequestClock, reportLagMs, VIA_LEADER, type WatchListener } from '../session-bookkeeping.js';
import { MultiOpType, WriteBatcher, type MultiCall, type MultiOp, type QueuedRequest } from '../write-batch.js';
import type { CreateMode, LinkFailureKind, SessionEvents, SessionInit, WriteOptions, ZkAcl, ZkSession, ZkSessionFactory, ZkStat } from '../session.js';
import { Fifo } from '../fifo.js';
import { DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_REPLY_BYTES, FrameReader } from './frames.js';
import { Chroot, HostList, isValidPath, parseConnectString } from './hosts.js';
import { JuteDecodeError, JuteReader, type JuteWriter } from './jute.js';
import {
  createOpFor,
  decodeConnectResponse,
  decodeCreateResponse,
  decodeReplyHeader,
  decodeStat,
  decodeWatcherEvent,
  encodeConnectRequest,
  encodeRequest,
  hex64,
  OpCode,
  readAcl,
  readMultiResults,
  writeAcl,
  writeCreate,
  writeMulti,
  Xid,
  type MultiRequestOp,
  type MultiResult,
} from './records.js';
import { ServerWatches } from './server-watches.js';
import { classifyLinkError, type LinkError, type LinkStage } from './link-failure.js';
import { refusedGrant } from '../session-opening.js';
import { sleep, systemClock, type Clock, type ClockTimer } from '../../clock.js';
import { ReplyTooLargeError } from '../../errors.js';

export const wireSessionFactory: ZkSessionFactory = (init, events) => new WireZkSession(init, events);

export interface WireSessionOptions {
  /**
   * TLS from the first byte (ZooKeeper's secureClientPort): `ca`, and `cert` / `key` when the
   * server wants a client certificate. The certificate is checked against the host name of the
   * connect string (or its IP). A TLS failure counts as a failed host.
   */
  tls?: tls.ConnectionOptions;
  /**
   * The largest reply read (default DEFAULT_MAX_REPLY_BYTES, 16 MiB): a larger one is skipped unread
   * and fails its request with ReplyTooLargeError; the link lives on. Requests we send stay within
   * the server's default jute.maxbuffer (0xfffff) whatever this says.
   */
  maxReplyBytes?: number;
  /** Opens the link to one server (default: TCP, or TLS with `tls`); the simulation's links in test/simulation/. */
  dial?: Dial;
}

/** What the session uses of a socket: net.Socket and tls.TLSSocket have it. */
export interface LinkSocket {
  on(event: 'connect' | 'secureConnect' | 'close', listener: () => void): unknown;
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'error', listener: (error: NodeJS.ErrnoException) => void): unknown;
  once(event: 'connect' | 'close', listener: () => void): unknown;
  write(data: Buffer): unknown;
  destroy(): unknown;
  cork(): void;
  uncork(): void;
  readonly writableCorked: number;
}

/** Opens a link to `address` (resolved; `name` is the host name as given). It emits 'connect' ('secureConnect' with TLS) once usable. */
export type Dial = (address: { host: string; port: number; name: string }, tlsOptions: tls.ConnectionOptions | undefined) => LinkSocket;

/** TCP, or TLS from the first byte; the certificate is checked against the name we were given. */
const dialNetwork: Dial = (address, tlsOptions) => {
  const socket = tlsOptions
    ? tls.connect({
        ...tlsOptions,
        host: address.host,
        port: address.port,
        servername: tlsOptions.servername ?? (net.isIP(address.name) ? undefined : address.name),
        checkServerIdentity: tlsOptions.checkServerIdentity ?? ((_host, cert) => tls.checkServerIdentity(tlsOptions.servername ?? address.name, cert)),
      })
    : net.connect({ host: address.host, port: address.port });
  socket.setNoDelay(true);
  return socket;
};

/** One link attempt: how far it got, and what its socket said when it failed. */
interface LinkAttempt {
  /** `host:port` as in the connect string. */
  server: string;
  /** TCP connected. */
  reached: boolean;
  /** The TLS handshake completed. */
  secured: boolean;
  /** Our ConnectRequest went out. */
  requestSent: boolean;
  /** The server sent something back. */
  answered: boolean;
  /** The server closed the link (not our timeout). */
  closedByServer: boolean;
  failure: { kind: LinkFailureKind; message: string | undefined } | undefined;
}

/** Why an attempt that ended before its handshake failed. */
function whyAttemptFailed(attempt: LinkAttempt): { kind: LinkFailureKind; message: string | undefined } {
  // Without TLS: closed on our request, unanswered (a TLS port closes so; see host-probe.ts).
  const unanswered = attempt.requestSent && !attempt.answered && attempt.closedByServer && !attempt.secured && (attempt.failure === undefined || attempt.failure.kind === 'other');
  if (unanswered) return { kind: 'unanswered', message: 'the server closed the connection without answering the session request' };
  return attempt.failure ?? { kind: 'other', message: undefined };
}

/** A factory for sessions with options the ZkSession seam does not carry (TLS). */
export function wireSessionFactoryWith(options: WireSessionOptions): ZkSessionFactory {
  return (init, events) => new WireZkSession(init, events, options);
}

const OPEN_ACL: readonly ZkAcl[] = [{ perms: 31, scheme: 'world', id: 'anyone' }];
const SEQUENTIAL_FLAG = 2;
/** onClosed codes, as the C client's handle states. */
const EXPIRED_STATE = -112;
const AUTH_FAILED_STATE = -113;

const EVENT_TYPES: Record<number, 'created' | 'deleted' | 'changed' | 'child'> = { 1: 'created', 2: 'deleted', 3: 'changed', 4: 'child' };

type Done = (code: number, value?: unknown) => void;

/** A request on the wire waiting for its reply (replies come in the order requests were sent). */
interface AwaitedReply {
  xid: number;
  decode: (reader: JuteReader) => unknown;
  done: Done;
}

type LinkState = 'connecting' | 'handshake' | 'connected' | 'closed';

/** A frame over maxReplyBytes: its reply header, the rest skipped unread (see FrameReader). */
interface SkippedReply {
  header: Buffer;
  length: number;
}
/** xid, zxid, err. */
const REPLY_HEADER_BYTES = 16;

export class WireZkSession implements ZkSession {
  private readonly hosts: HostList;
  private readonly chroot: Chroot;
  private readonly requestedTimeoutMs: number;
  /** The ensemble's tickTime at most (SessionInit.serverTickTimeMs): bounds the timeout a server may grant above the ask. */
  private readonly serverTickMs: number;
  private sessionId = 0n;
  private sessionPassword: Buffer = Buffer.alloc(16);
  private negotiatedTimeoutMs: number | undefined;
  /** The newest zxid a reply carried: sent on reconnect (a server behind it refuses us) and with SetWatches. */
  private lastZxid = 0n;
  private nextXid = 0;

  private state: LinkState = 'connecting';
  lastLinkError: string | undefined;
  private socket: LinkSocket | undefined;
  /** `host:port` of the server the last handshake was with (see ZkSession.server). */
  private connectedTo: string | undefined;
  private frames: FrameReader<SkippedReply> | undefined;
  private readonly replies = new Fifo<AwaitedReply>();
  /** Auth replies come out of band (the server answers them at once), matched by xid -4 in order. */
  private authWaiters: ((code: number) => void)[] = [];
  private pingsOutstanding = 0;
  private setWatchesOutstanding = 0;
  private attemptStartedAt = 0;
  /** When this link's ConnectRequest went out: the server opened or re-attached the session after it. */
  private connectRequestSentAt = 0;
  private lastSentAt = 0;
  private lastReceivedAt = 0;
  private connecting = false;
  private everAttempted = false;
  private readonly timer: ClockTimer;
  private readonly clock: Clock;
  /** Credentials the server accepted: sent again on every new link (auth is per connection). */
  private readonly credentials: { scheme: string; auth: Buffer }[] = [];

  private closed = false;
  private abandoned = false;
  private readonly requests: RequestClock;
  private readonly watches = new ClientWatches();
  private readonly serverWatches = new ServerWatches();
  private readonly batcher: WriteBatcher;

  constructor(
    init: SessionInit,
    private readonly events: SessionEvents,
    private readonly options: WireSessionOptions = {},
  ) {
    this.clock = init.clock ?? systemClock;
    const { hosts, chroot } = parseConnectString(init.connectString);
    this.hosts = new HostList(hosts, this.clock.random);
    this.chroot = new Chroot(chroot);
    this.requestedTimeoutMs = init.sessionTimeoutMs;
    const tickMs = init.serverTickTimeMs ?? DEFAULT_SERVER_TICK_MS;
    this.serverTickMs = tickMs;
    this.requests = new RequestClock(() => reportLagMs(tickMs, this.timeoutMs), this.clock);
    if (init.sessionId !== undefined) {
      this.sessionId = BigInt(`0x${init.sessionId}`);
      this.sessionPassword = Buffer.from(init.sessionPassword ?? '', 'hex');
    }
    const multi: MultiCall = (ops, cb) => this.sendMulti(ops, cb);
    this.batcher = new WriteBatcher(
      multi,
      () => (this.closed ? ZkCode.INVALIDSTATE : this.abandoned ? ZkCode.SESSIONEXPIRED : undefined),
      this.clock,
      () => this.framesQueued > 0,
    );
    this.timer = this.clock.setInterval(() => this.tick(), Math.max(10, Math.min(100, init.sessionTimeoutMs / 30))).unref();
    void this.connectNext();
  }

  get id(): string {
    // Asked on every acquire (each lease keeps it): one string per session id, not one per call.
    if (this.idText?.[0] !== this.sessionId) this.idText = [this.sessionId, hex64(this.sessionId)];
    return this.idText[1];
  }

  private idText: [bigint, string] | undefined;

  get password(): string {
    return this.sessionPassword.toString('hex').toUpperCase();
  }

  get timeoutMs(): number {
    return this.negotiatedTimeoutMs ?? this.requestedTimeoutMs;
  }

  get isConnectedNatively(): boolean {
    return this.state === 'connected';
  }

  get isClosed(): boolean {
    return this.closed || this.abandoned;
  }

  get server(): string | undefined {
    return this.connectedTo;
  }

  get lastAnsweredSentAt(): number {
    return this.requests.lastAnsweredSentAt;
  }

  get deadline(): number {
    return this.requests.deadline(this.timeoutMs);
  }

  /**
   * While the link is down: at least what was unanswered when it dropped, counted on (the requests
   * it failed are gone from the RequestClock, the silence before the drop is not).
   */
  unansweredForMs(): number {
    const now = this.requests.unansweredForMs();
    return this.linkDownSince === undefined ? now : Math.max(now, this.linkDownSince.unansweredMs + this.clock.now() - this.linkDownSince.at);
  }
  /** When the connected link last dropped, and how long its oldest request had waited then (until the next handshake). */
  private linkDownSince: { at: number; unansweredMs: number } | undefined;

  // ---- the link: connect, handshake, frames, liveness ----

  /** No packet for this long on a live link: it is dead (half-open), drop it. */
  private get readTimeoutMs(): number {
    return (this.timeoutMs * 2) / 3;
  }

  /** TCP connect plus handshake, per host. */
  private get connectTimeoutMs(): number {
    return this.timeoutMs / this.hosts.size;
  }

  private async connectNext(): Promise<void> {
    if (this.connecting || this.closed) return;
    this.connecting = true;
    try {
      for (;;) {
        const delay = this.everAttempted ? this.hosts.delayBeforeNextMs() : 0;
        this.everAttempted = true;
        if (delay > 0) await sleep(this.clock, delay);
        if (this.closed) return;
        let address: Awaited<ReturnType<HostList['next']>>;
        try {
          address = await this.hosts.next();
        } catch {
          this.hosts.failed(); // the name did not resolve: the next host
          continue;
        }
        if (this.open(address)) return;
        this.hosts.failed(); // the link could not even be opened (said in lastLinkError)
      }
    } finally {
      this.connecting = false;
    }
  }

  /** Opens a link to `address`; false when it cannot even be opened (the dial threw). */
  private open(address: { host: string; port: number; name: string }): boolean {
    if (this.closed) return true;
    const { tls: tlsOptions } = this.options;
    const server = `${net.isIPv6(address.name) ? `[${address.name}]` : address.name}:${address.port}`;
    const attempt: LinkAttempt = { server, reached: false, secured: false, requestSent: false, answered: false, closedByServer: false, failure: undefined };
    this.attempt = attempt;
    let socket: LinkSocket;
    try {
      socket = (this.options.dial ?? dialNetwork)(address, tlsOptions);
    } catch (error) {
      // Not a name that did not resolve: say what Node refused (options are checked at construction).
      this.linkFailed(attempt, { kind: 'other', message: `cannot open a link: ${(error as Error).message}` });
      return false;
    }
    this.socket = socket;
    this.frames = new FrameReader(this.maxReplyBytes, { headerBytes: REPLY_HEADER_BYTES, mark: (header, length): SkippedReply => ({ header, length }) });
    this.state = 'handshake';
    this.attemptStartedAt = this.lastReceivedAt = this.clock.now();
    socket.on(tlsOptions ? 'secureConnect' : 'connect', () => {
      if (socket !== this.socket) return;
      attempt.secured = tlsOptions !== undefined;
      // Nothing else goes out before the ConnectResponse (a write could provoke a reset that swallows an expiry reply).
      this.connectRequestSentAt = this.clock.now();
      attempt.requestSent = true;
      this.write(encodeConnectRequest({ lastZxidSeen: this.lastZxid, timeoutMs: this.requestedTimeoutMs, sessionId: this.sessionId, password: this.sessionPassword }));
    });
    socket.on('data', (chunk: Buffer) => this.received(socket, chunk));
    socket.once('connect', () => (attempt.reached = true)); // TCP (also under TLS)
    socket.on('error', (error: LinkError) => {
      // 'close' follows (see linkDown). Past TCP, the reason goes in the connect error (a
      // certificate refused, say): the plain probe sees only that the port accepts connections.
      if (socket !== this.socket || !attempt.reached) return;
      const stage: LinkStage = {
        tls: tlsOptions !== undefined,
        secured: attempt.secured,
        certificateRefused: Boolean((socket as Partial<tls.TLSSocket>).authorizationError),
        clientCertificate: tlsOptions?.cert !== undefined || tlsOptions?.pfx !== undefined,
      };
      attempt.failure = classifyLinkError(error, stage);
    });
    socket.on('close', () => {
      if (socket !== this.socket) return;
      attempt.closedByServer = true;
      // After the frames read before it (each waits for a macrotask of its own, see received): a
      // server that answers and then closes (an auth failure) is heard out first. Not later than
      // that: the state must say the link is down before the next round of timers runs.
      if (this.framesQueued > 0) this.clock.setImmediate(() => socket === this.socket && this.linkDown());
      else this.linkDown();
    });
    return true;
  }

  /** The link attempt under way: what it got to, and why it failed (see linkDown). */
  private attempt: LinkAttempt | undefined;

  /**
   * A link attempt ended before a session was attached on it: tell why, as far as we know. A link
   * closed unanswered says little on its own: the probe looks further (see host-probe.ts).
   */
  private linkFailed(attempt: LinkAttempt, failure: { kind: LinkFailureKind; message: string | undefined }): void {
    if (failure.message && failure.kind !== 'unanswered' && failure.kind !== 'tls-no-answer') this.lastLinkError = `${attempt.server}: ${failure.message}`;
    this.events.onLinkFailed?.({ server: attempt.server, ...failure });
  }

  private write(frame: Buffer): void {
    const socket = this.socket;
    if (!socket) return;
    this.lastSentAt = this.clock.now();
    // The requests of one turn go out together (one syscall, not one per request).
    if (!socket.writableCorked) {
      socket.cork();
      process.nextTick(() => socket.uncork());
    }
    socket.write(frame);
  }

  private received(socket: LinkSocket, chunk: Buffer): void {
    if (socket !== this.socket) return;
    this.lastReceivedAt = this.clock.now();
    if (this.attempt) this.attempt.answered = true;
    let frames: (Buffer | SkippedReply)[];
    try {
      frames = this.frames!.push(chunk);
    } catch (error) {
      if (!(error instanceof JuteDecodeError)) throw error;
      // Out of sync with the server: nothing more on this link can be trusted (after what came before).
      this.clock.setImmediate(() => socket === this.socket && this.linkDown());
      return;
    }
    // One frame per macrotask, as the C client's binding hands over one reply per callback: what an
    // answer wakes, promise continuations included, has run before the next answer is handled. The
    // recipes rely on it: a watch set again after a reconnect is settled (our node found gone, say)
    // before the answer to the sync behind it confirms the link.
    for (const frame of frames) {
      this.framesQueued++;
      this.clock.setImmediate(() => this.handleFrameOn(socket, frame));
    }
  }

  /** Frames read and waiting for their macrotask. */
  private framesQueued = 0;

  private handleFrameOn(socket: LinkSocket, frame: Buffer | SkippedReply): void {
    this.framesQueued--;
    if (socket !== this.socket) return; // closed, or dropped by an earlier frame
    try {
      if (Buffer.isBuffer(frame)) this.handleFrame(frame);
      else this.skippedReply(frame);
    } catch (error) {
      if (!(error instanceof JuteDecodeError)) throw error;
      if (socket === this.socket) this.linkDown();
    }
  }

  private handleFrame(frame: Buffer): void {
    if (this.state === 'handshake') return this.handshake(frame);
    const reader = new JuteReader(frame);
    const header = decodeReplyHeader(reader);
    if (!isServerCode(header.err)) throw new JuteDecodeError(`reply error code ${header.err}: not one ZooKeeper defines`);
    switch (header.xid) {
      case Xid.notification: {
        const event = decodeWatcherEvent(reader);
        reader.expectEnd('watch event');
        return this.deliverEvent(event.path, event.type);
      }
      case Xid.ping:
        if (this.pingsOutstanding <= 0) throw new JuteDecodeError('a ping reply without a ping');
        reader.expectEnd('ping reply');
        this.pingsOutstanding--;
        return;
      case Xid.setWatches:
        if (this.setWatchesOutstanding <= 0) throw new JuteDecodeError('a SetWatches reply without a SetWatches');
        reader.expectEnd('SetWatches reply');
        this.setWatchesOutstanding--;
        return;
      case Xid.auth: {
        reader.expectEnd('auth reply');
        const waiter = this.authWaiters.shift();
        if (!waiter) throw new JuteDecodeError('an auth reply without an auth request');
        waiter(header.err);
        if (header.err === ZkCode.AUTHFAILED) return this.endForGood(AUTH_FAILED_STATE, ZkCode.AUTHFAILED);
        // Requests wait behind an auth (a server refusing it closes the link: they would be lost with it).
        this.dispatchBacklog();
        return;
      }
    }
    const awaited = this.replies.peek();
    if (!awaited || awaited.xid !== header.xid) throw new JuteDecodeError(`reply xid ${header.xid}, expected ${awaited?.xid ?? 'none'}`);
    this.replies.shift();
    if (header.zxid > 0n) this.lastZxid = header.zxid;
    if (header.err !== ZkCode.OK) return awaited.done(header.err);
    let value: unknown;
    try {
      value = awaited.decode(reader);
      // Bytes left over: the reply was read as another record than it is (a listing as a create's path, say).
      reader.expectEnd('reply');
    } catch (error) {
      awaited.done(ZkCode.CONNECTIONLOSS);
      throw error;
    }
    awaited.done(ZkCode.OK, value);
  }

  private get maxReplyBytes(): number {
    return this.options.maxReplyBytes ?? DEFAULT_MAX_REPLY_BYTES;
  }

  /**
   * A reply over maxReplyBytes (its body skipped unread) fails only its request. Any other frame
   * that large (an event, a ping or auth answer, an xid we do not await) cannot be skipped without
   * losing what it says: the link goes.
   */
  private skippedReply({ header: bytes, length }: SkippedReply): void {
    if (this.state !== 'connected') throw new JuteDecodeError(`a frame of ${length} bytes before the handshake ended`);
    const header = decodeReplyHeader(new JuteReader(bytes));
    const awaited = this.replies.peek();
    if (!awaited || awaited.xid !== header.xid) throw new JuteDecodeError(`a frame of ${length} bytes with xid ${header.xid}, expected ${awaited?.xid ?? 'none'}`);
    this.replies.shift();
    if (header.zxid > 0n) this.lastZxid = header.zxid;
    awaited.done(ZkCode.REPLY_TOO_LARGE, length);
  }

  private handshake(frame: Buffer): void {
    const response = decodeConnectResponse(frame);
    this.refuseImpossibleGrant(response.timeoutMs);
    // Another session than the one we asked to re-attach would hide the loss of ours: expired too.
    const replaced = this.sessionId !== 0n && response.sessionId !== this.sessionId;
    if (response.timeoutMs <= 0 || replaced) return this.endForGood(EXPIRED_STATE, ZkCode.SESSIONEXPIRED);
    this.sessionId = response.sessionId;
    this.sessionPassword = response.password;
    this.negotiatedTimeoutMs = response.timeoutMs;
    this.state = 'connected';
    this.lastLinkError = undefined;
    this.connectedTo = this.attempt?.server;
    this.hosts.connected();
    this.pingsOutstanding = 0;
    this.setWatchesOutstanding = 0;
    // What the server forgot with the old connection: auth, then the watches (with our lastZxid, so
    // that what changed meanwhile fires now).
    for (const { scheme, auth } of this.credentials) this.sendAuth(scheme, auth, () => undefined);
    for (const setWatches of this.serverWatches.setWatchesFrames(this.lastZxid, (path) => this.chroot.toServer(path))) {
      this.setWatchesOutstanding++;
      this.write(setWatches);
    }
    // The session's clock started (or restarted, with this timeout) after the ConnectRequest went
    // out, not when its answer was read: that may have waited on a slow link or a stalled loop.
    this.requests.negotiated(response.timeoutMs, this.connectRequestSentAt);
    this.requests.newLink();
    this.linkDownSince = undefined;
    this.events.onConnected();
  }

  /**
   * A negotiated timeout no server grants for what we asked (see refusedGrant) drops the link as a
   * broken frame does: a connection failure, said in lastLinkError, with a growing pause before the next.
   */
  private refuseImpossibleGrant(grantedMs: number): void {
    const refused = refusedGrant(grantedMs, this.requestedTimeoutMs, this.sessionId === 0n, this.serverTickMs);
    if (refused === undefined) return;
    if (this.attempt) this.attempt.failure = { kind: 'other', message: refused };
    this.hosts.refused();
    throw new JuteDecodeError(refused);
  }

  /** The link is gone (closed, timed out, out of sync): fail what waits on it, tell, reconnect. */
  private linkDown(): void {
    const socket = this.socket;
    if (!socket) return;
    this.socket = undefined;
    this.frames = undefined;
    socket.destroy();
    const wasConnected = this.state === 'connected';
    if (wasConnected) this.linkDownSince = { at: this.clock.now(), unansweredMs: this.requests.unansweredForMs() };
    this.state = 'connecting';
    if (!wasConnected && this.attempt) this.linkFailed(this.attempt, whyAttemptFailed(this.attempt));
    this.hosts.failed();
    this.failReplies(ZkCode.CONNECTIONLOSS);
    if (wasConnected) this.events.onConnecting();
    this.dispatchBacklog(); // what waited behind an auth fails now, as anything asked while down
    void this.connectNext();
  }

  private failReplies(code: number): void {
    const waiters = this.authWaiters;
    this.authWaiters = [];
    this.pingsOutstanding = 0;
    this.setWatchesOutstanding = 0;
    for (const awaited of this.replies.drain()) awaited.done(code);
    for (const waiter of waiters) waiter(code);
  }

  private tick(): void {
    const now = this.clock.now();
    if (this.state === 'handshake' && now - this.attemptStartedAt > this.connectTimeoutMs) return this.dropIfStill(this.socket);
    if (this.state !== 'connected') return;
    if (now - this.lastReceivedAt > this.readTimeoutMs) return this.dropIfStill(this.socket);
    if (now - this.lastSentAt > this.readTimeoutMs / 3) {
      this.pingsOutstanding++;
      this.write(encodeRequest(Xid.ping, OpCode.ping));
    }
  }

  /**
   * Timers run before the poll phase: after the event loop was blocked, bytes that arrived
   * meanwhile are not read yet. Look again after the poll (setImmediate) before calling the link dead.
   */
  private dropIfStill(socket: LinkSocket | undefined): void {
    const lastReceivedAt = this.lastReceivedAt;
    this.clock.setImmediate(() => {
      if (socket === this.socket && this.lastReceivedAt === lastReceivedAt) this.linkDown();
    });
  }

  /** Expired or auth failed: the handle is dead (a new session needs a new handle). */
  private endForGood(stateCode: number, failCode: number): void {
    if (this.closed) return;
    this.closed = true;
    this.state = 'closed';
    this.clock.clearInterval(this.timer);
    const socket = this.socket;
    this.socket = undefined;
    socket?.destroy();
    this.failReplies(failCode);
    this.batcher.failQueued(ZkCode.INVALIDSTATE);
    this.dispatchBacklog();
    this.watches.clear();
    this.serverWatches.clear();
    this.events.onClosed(stateCode);
  }

  abandon(): void {
    this.abandoned = true;
    this.batcher.failQueued(ZkCode.SESSIONEXPIRED);
  }

  /**
   * Ends the session: closeSession goes out and nothing waits for it here. The promise (which the
   * ZkSession seam does not carry: its close() returns void) resolves once the server has closed
   * the link after its answer, i.e. the session and its ephemerals are gone, or after 2 s.
   */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    const wasConnected = this.state === 'connected';
    this.state = 'closed';
    this.clock.clearInterval(this.timer);
    const socket = this.socket;
    this.socket = undefined;
    let ended = Promise.resolve();
    if (socket && wasConnected) {
      // Both stay referenced: a process awaiting close() (a top-level await, a shutdown hook) must
      // not exit before the server has ended the session; the timer bounds that wait.
      ended = new Promise((resolve) => {
        const giveUp = this.clock.setTimeout(() => socket.destroy(), 2000);
        socket.once('close', () => {
          this.clock.clearTimeout(giveUp);
          resolve();
        });
      });
      socket.write(encodeRequest(this.takeXid(), OpCode.closeSession));
    } else {
      socket?.destroy();
    }
    this.watches.clear();
    this.serverWatches.clear();
    this.failReplies(ZkCode.CLOSING);
    this.batcher.failQueued(ZkCode.INVALIDSTATE);
    this.dispatchBacklog();
    return ended;
  }

  /**
   * Sends one request now, or returns the code it fails with at once (not connected, too large).
   * `done` gets the reply's code and, on OK, what `decode` read from its body.
   */
  private submit(type: number, body: (writer: JuteWriter) => void, decode: (reader: JuteReader) => unknown, done: Done): number {
    if (this.state !== 'connected' || !this.socket) return ZkCode.CONNECTIONLOSS;
    const xid = this.takeXid();
    const frame = encodeRequest(xid, type, body);
    // The server would drop the connection over it, and a resend would do the same again.
    if (frame.length - 4 > DEFAULT_MAX_FRAME_BYTES) return ZkCode.BADARGUMENTS;
    this.write(frame);
    this.replies.push({ xid, decode, done });
    return ZkCode.OK;
  }

  /** The next request's xid: positive, wrapping to 1 after 2^31 - 1 (the reserved xids are negative). */
  private takeXid(): number {
    this.nextXid = this.nextXid >= 0x7fffffff ? 1 : this.nextXid + 1;
    return this.nextXid;
  }

  private sendAuth(scheme: string, auth: Buffer, done: (code: number) => void): void {
    this.authWaiters.push(done);
    this.write(encodeRequest(Xid.auth, OpCode.auth, (w) => w.int(0).ustring(scheme).buffer(auth)));
  }

  private deliverEvent(serverPath: string, typeCode: number): void {
    const type = EVENT_TYPES[typeCode];
    if (!type) return;
    const path = this.chroot.fromServer(serverPath);
    this.serverWatches.fired(type, path);
    if (this.abandoned || this.closed) return;
    for (const listener of this.watches.take(type, path)) {
      try {
        listener({ type, path });
      } catch (error) {
        // The listener's own bug: surface it as uncaught, without breaking the frames after this one.
        process.nextTick(() => {
          throw error;
        });
      }
    }
  }

  // ---- the ZkSession API ----

  create(path: string, data: Buffer, mode: CreateMode, acl?: readonly ZkAcl[], options?: WriteOptions): Promise<string> {
    const valid = isValidPath(path, (mode & SEQUENTIAL_FLAG) !== 0);
    const write: MultiOp | undefined =
      options?.batchable && valid ? { type: MultiOpType.CREATE, path, data, flags: mode, acl: acl?.map((a) => ({ perm: a.perms, scheme: a.scheme, auth: a.id })) } : undefined;
    return this.call('create', path, valid, (done) =>
      this.submit(
        createOpFor(mode),
        (w) => writeCreate(w, this.chroot.toServer(path), data, acl ?? OPEN_ACL, mode),
        (r) => this.chroot.fromServer(decodeCreateResponse(r, this.chroot.toServer(path), mode)),
        done,
      ),
      { write },
    );
  }

  getChildren(path: string, watch?: WatchListener): Promise<{ children: string[]; stat: ZkStat }> {
    return this.call(
      'getChildren',
      path,
      isValidPath(path, false),
      (done) =>
        this.submit(
          OpCode.getChildren2,
          (w) => w.ustring(this.chroot.toServer(path)).bool(watch !== undefined),
          (r) => ({ children: r.vector((x) => x.string()) ?? [], stat: decodeStat(r) }),
          this.arming(watch && 'child', path, done),
        ),
      { read: true, watch: watch && { kind: 'child', listener: watch } },
    );
  }

  getData(path: string, watch?: WatchListener): Promise<{ data: Buffer; stat: ZkStat }> {
    return this.call(
      'getData',
      path,
      isValidPath(path, false),
      (done) =>
        this.submit(
          OpCode.getData,
          (w) => w.ustring(this.chroot.toServer(path)).bool(watch !== undefined),
          (r) => ({ data: r.buffer() ?? Buffer.alloc(0), stat: decodeStat(r) }),
          this.arming(watch && 'data', path, done),
        ),
      { read: true, watch: watch && { kind: 'data', listener: watch } },
    );
  }

  /** Resolves null when the node does not exist (the watch then fires on its creation). */
  exists(path: string, watch?: WatchListener): Promise<ZkStat | null> {
    return this.call<ZkStat | null>(
      'exists',
      path,
      isValidPath(path, false),
      (done) =>
        this.submit(
          OpCode.exists,
          (w) => w.ustring(this.chroot.toServer(path)).bool(watch !== undefined),
          (r) => decodeStat(r),
          (code, value) => {
            if (watch && code === ZkCode.OK) this.serverWatches.armed('data', path);
            if (watch && code === ZkCode.NONODE) this.serverWatches.armed('exist', path);
            done(code === ZkCode.NONODE ? ZkCode.OK : code, code === ZkCode.NONODE ? null : value);
          },
        ),
      { read: true, watch: watch && { kind: 'data', listener: watch } },
    );
  }

  setData(path: string, data: Buffer, version = -1): Promise<ZkStat> {
    return this.call('setData', path, isValidPath(path, false), (done) =>
      this.submit(OpCode.setData, (w) => w.ustring(this.chroot.toServer(path)).buffer(data).int(version), (r) => decodeStat(r), done),
    );
  }

  delete(path: string, version = -1, options?: WriteOptions): Promise<void> {
    const valid = isValidPath(path, false);
    const write: MultiOp | undefined = options?.batchable && valid ? { type: MultiOpType.DELETE, path, version } : undefined;
    return this.call('delete', path, valid, (done) =>
      this.submit(OpCode.delete, (w) => w.ustring(this.chroot.toServer(path)).int(version), () => undefined, done),
      { write },
    );
  }

  /** `urgent` (the connection's heartbeat): past the backlog (see NativeZkSession.sync). */
  sync(path: string, options?: { urgent?: boolean }): Promise<void> {
    return this.call('sync', path, isValidPath(path, false), (done) =>
      this.submit(OpCode.sync, (w) => w.ustring(this.chroot.toServer(path)), (r) => void r.string(), done),
      { urgent: options?.urgent },
    );
  }

  setAcl(path: string, acl: readonly ZkAcl[], version = -1): Promise<void> {
    return this.call('setAcl', path, isValidPath(path, false), (done) =>
      this.submit(
        OpCode.setACL,
        (w) => {
          w.ustring(this.chroot.toServer(path));
          writeAcl(w, acl);
          w.int(version);
        },
        (r) => void decodeStat(r),
        done,
      ),
    );
  }

  getAcl(path: string): Promise<ZkAcl[]> {
    return this.call('getAcl', path, isValidPath(path, false), (done) =>
      this.submit(
        OpCode.getACL,
        (w) => w.ustring(this.chroot.toServer(path)),
        (r) => {
          const acl = readAcl(r);
          decodeStat(r);
          return acl;
        },
        done,
      ),
    );
  }

  /** The credentials never go into an error: only the scheme does. Kept (and sent on every reconnect) once accepted. */
  addAuth(scheme: string, credentials: string): Promise<void> {
    const auth = Buffer.from(credentials);
    return this.call('addAuth', scheme, true, (done) => {
      if (this.state !== 'connected') return ZkCode.CONNECTIONLOSS;
      this.sendAuth(scheme, auth, (code) => {
        if (code === ZkCode.OK && !this.credentials.some((c) => c.scheme === scheme && c.auth.equals(auth))) this.credentials.push({ scheme, auth });
        done(code);
      });
      return ZkCode.OK;
    });
  }

  unwatch(path: string, listener: WatchListener): void {
    this.watches.remove(path, listener);
  }

  /** Records, on a watching read's success, that the server now holds that watch (to re-send it after a reconnect). */
  private arming(kind: 'data' | 'child' | undefined, path: string, done: Done): Done {
    if (!kind) return done;
    return (code, value) => {
      if (code === ZkCode.OK) this.serverWatches.armed(kind, path);
      done(code, value);
    };
  }

  /** The write batcher's multi: creates and deletes in one transaction (op 14). */
  private sendMulti(ops: MultiOp[], cb: (rc: number, err: string, results: { rc: number; path?: string }[]) => void): number {
    const requestOps: MultiRequestOp[] = ops.map((op) =>
      op.type === MultiOpType.CREATE
        ? {
            type: OpCode.create,
            path: this.chroot.toServer(op.path),
            data: op.data,
            flags: op.flags,
            acl: op.acl ? op.acl.map((a) => ({ perms: a.perm, scheme: a.scheme, id: a.auth })) : OPEN_ACL,
          }
        : { type: OpCode.delete, path: this.chroot.toServer(op.path), version: op.version },
    );
    return this.submit(
      OpCode.multi,
      (w) => writeMulti(w, requestOps),
      (r) => readMultiResults(r, requestOps),
      (code, value) => {
        if (code !== ZkCode.OK) return cb(code, '', []);
        const results = (value as MultiResult[]).map((r) => ({ rc: r.err, path: r.path === undefined ? undefined : this.chroot.fromServer(r.path) }));
        // The transaction's outcome: the op that failed (ZooKeeper's header says OK either way).
        const failed = results.find((r) => r.rc !== ZkCode.OK && r.rc !== ZkCode.RUNTIMEINCONSISTENCY) ?? results.find((r) => r.rc !== ZkCode.OK);
        cb(failed?.rc ?? ZkCode.OK, '', results);
      },
    );
  }

  // ---- requests: the in-flight window and backlog, as NativeZkSession keeps them ----

  private inFlight = 0;
  private readonly backlog = new Fifo<() => void>();
  private window = MIN_IN_FLIGHT;
  private draining = false;

  private adaptWindow(roundTripMs: number): void {
    this.window = nextWindow(this.window, roundTripMs, this.timeoutMs);
  }

  /**
   * `valid`: the path passed the client's check (else BADARGUMENTS, never sent). `read`, `write`,
   * `watch`, `urgent`: as in NativeZkSession.call.
   */
  private call<T>(
    operation: string,
    path: string,
    valid: boolean,
    send: (done: Done) => number,
    { read, write, watch, urgent }: { read?: boolean; write?: MultiOp; watch?: { kind: 'data' | 'child'; listener: WatchListener }; urgent?: boolean } = {},
  ): Promise<T> {
    const drop = watch && valid && !this.isClosed ? this.watches.add(watch.kind, path, watch.listener) : undefined;
    return new Promise<T>((resolve, reject) => {
      const dispatch = () => {
        if (this.closed || this.abandoned) {
          drop?.();
          reject(new ZkError(this.closed ? ZkCode.INVALIDSTATE : ZkCode.SESSIONEXPIRED, operation, path));
          return;
        }
        if (this.state !== 'connected') {
          // No link: it fails, but in a later turn of the event loop. A caller that tries again at
          // once would otherwise run only promise continuations, and the reconnect (a socket's
          // events, a timer) would never get a turn: the process would spin instead of waiting.
          this.clock.setImmediate(() => {
            drop?.();
            reject(new ZkError(ZkCode.CONNECTIONLOSS, operation, path));
          });
          return;
        }
        this.inFlight++;
        const answered = this.requests.sent(VIA_LEADER.has(operation));
        const sentAt = this.clock.now();
        let settled = false;
        const done = (code: number, value?: unknown) => {
          if (settled) return;
          settled = true;
          this.inFlight--;
          if (code !== ZkCode.OK) drop?.();
          if (answered(code)) this.adaptWindow(this.clock.now() - sentAt);
          if (this.abandoned) reject(new ZkError(ZkCode.SESSIONEXPIRED, operation, path));
          else if (code === ZkCode.OK) resolve(value as T);
          else if (code === ZkCode.REPLY_TOO_LARGE) reject(new ReplyTooLargeError(operation, path, typeof value === 'number' ? value : undefined, this.maxReplyBytes));
          else reject(new ZkError(code, operation, path));
          this.dispatchBacklog();
        };
        const request: QueuedRequest = { send: valid ? send : () => ZkCode.BADARGUMENTS, write, reads: read ? path : undefined, done };
        this.batcher.submit(request);
      };
      if (!urgent && (this.backlog.size > 0 || this.inFlight >= this.window || this.authWaiters.length > 0)) this.backlog.push(dispatch);
      else dispatch();
    });
  }

  private dispatchBacklog(): void {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.backlog.size > 0 && (this.closed || this.abandoned || (this.inFlight < this.window && this.authWaiters.length === 0))) this.backlog.shift()!();
    } finally {
      this.draining = false;
    }
  }
}
