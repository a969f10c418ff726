import { ZkCode } from './zk-error.js';
import { systemClock, type Clock } from '../clock.js';

export type WatchEventType = 'created' | 'deleted' | 'changed' | 'child' | 'session' | 'not-watching';
/**
 * A watch fires once for its node event; the C client also calls it for every session event
 * (`type: 'session'`) while it is armed, so a waiter wakes on reconnects too.
 */
export type WatchListener = (event: { type: WatchEventType; path: string }) => void;

/**
 * A session's watch listeners, by kind and path, as a ZooKeeper client keeps them: one event
 * fires them once (`deleted` reaches data and child listeners, `child` child ones, `created` and
 * `changed` data ones). A listener is kept only while the server holds its watch: `add` returns
 * the function that drops it again when the reply shows none was set (getData or getChildren on a
 * missing node), and `remove` forgets one whose waiter stopped waiting. Shared by the C client's
 * session and the testing kit's in-memory one.
 */
export class ClientWatches {
  private readonly data = new Map<string, Registration[]>();
  private readonly child = new Map<string, Registration[]>();

  /** Returns what drops this registration (not another one of the same listener on the path). */
  add(kind: 'data' | 'child', path: string, listener: WatchListener): () => void {
    const map = kind === 'data' ? this.data : this.child;
    const registration = { listener };
    const registrations = map.get(path);
    if (registrations) registrations.push(registration);
    else map.set(path, [registration]);
    return () => drop(map, path, (r) => r === registration);
  }

  remove(path: string, listener: WatchListener): void {
    drop(this.data, path, (r) => r.listener === listener);
    drop(this.child, path, (r) => r.listener === listener);
  }

  /** The listeners `type` on `path` fires, taken out (ZooKeeper drops the watch the same way). */
  take(type: WatchEventType, path: string): WatchListener[] {
    if (type === 'child') return takeAll(this.child, path);
    if (type === 'deleted') return [...takeAll(this.data, path), ...takeAll(this.child, path)];
    if (type === 'created' || type === 'changed') return takeAll(this.data, path);
    return []; // session events: the connection's state covers them
  }

  clear(): void {
    this.data.clear();
    this.child.clear();
  }
}

/** One listener's watch on one path: its own entry, so that dropping it spares others of the same listener. */
interface Registration {
  listener: WatchListener;
}

/**
 * API error codes (-100 and below) are the server's answers, except these, which the C client
 * makes up itself (an expired or closing handle, failed auth, a watch it does not have).
 */
const CLIENT_SIDE_CODES = new Set<number>([ZkCode.SESSIONEXPIRED, ZkCode.AUTHFAILED, ZkCode.CLOSING, -117 /* NOTHING */, -121 /* NOWATCHER */]);

/** Whether a request's code is the server's answer (not made up by the client, e.g. on connection loss). */
export function answeredByServer(code: number): boolean {
  return code === ZkCode.OK || (code <= -100 && !CLIENT_SIDE_CODES.has(code));
}

/** ZooKeeper's default tickTime: the lost signal assumes none longer unless told (serverTickTimeMs). */
export const DEFAULT_SERVER_TICK_MS = 2000;
/** Room for a follower's reply to the leader's ping to come late (scheduling, network). */
const REPORT_JITTER_MS = 100;

/**
 * How long after a request reaches a follower the leader may still not know of it: a follower
 * tells the leader which sessions it heard from only in its replies to the leader's pings, every
 * tickTime/2. The tickTime is taken as at most `serverTickTimeMs` and at most half the session
 * timeout (the server's default minimum session timeout is two ticks).
 */
export function reportLagMs(serverTickTimeMs: number, sessionTimeoutMs: number): number {
  return Math.min(serverTickTimeMs, sessionTimeoutMs / 2) / 2 + REPORT_JITTER_MS;
}

/**
 * When the leader, which expires sessions, last heard of a session, from its requests
 * (`lastAnsweredSentAt`, a lower bound; see ZkSession), and how long the oldest unanswered
 * request has waited.
 *
 * A follower answers reads and pings from its own copy, also while cut off from the leader; only
 * a write or a sync goes through the leader. And even that answer does not show that the leader
 * heard of the session then: the follower reports the sessions it heard from in its replies to
 * the leader's pings, every tickTime/2, on the same stream on which it forwards our writes and
 * syncs. So when a write or sync R sent at s on a link is answered, the leader had heard of every
 * request Q of that link that the server had already answered `reportLag` or more before s: the
 * follower had Q by Q's answer, and R no sooner than s, so a ping reply naming us went ahead of R.
 * The newest send time of such a Q is the bound. Answer times, not send times: a request can wait
 * on its way (a stalled link, a batch held back) and reach the server together with a later one.
 */
export class RequestClock {
  lastAnsweredSentAt: number;
  /**
   * The shortest timeout any handshake of this session negotiated (Infinity before the first): a
   * server touches the session with its connection's timeout, and the leader's expiry follows the
   * latest touch, earlier or later (ExpiryQueue.update), so a touch reported late from an older
   * link with a shorter timeout can bring the expiry forward.
   */
  private shortestTimeoutMs = Infinity;
  /** Requests still waiting for their answer, oldest first (a Set keeps insertion order). */
  private readonly pending = new Set<{ sentAt: number; link: number }>();
  /** This link's answered requests: when each answer came, and the newest send time answered by then. */
  private answers: { answeredAt: number; newestSentAt: number }[] = [];
  private head = 0;
  private link = 0;

  constructor(
    private readonly reportLag: () => number = () => reportLagMs(DEFAULT_SERVER_TICK_MS, Infinity),
    private readonly clock: Clock = systemClock,
  ) {
    this.lastAnsweredSentAt = clock.now();
  }

  /**
   * The earliest moment the leader may expire the session: the latest time it surely heard of it
   * plus the shortest timeout negotiated. Before the first handshake, with `fallbackTimeoutMs`.
   */
  deadline(fallbackTimeoutMs: number): number {
    return this.lastAnsweredSentAt + (this.shortestTimeoutMs === Infinity ? fallbackTimeoutMs : this.shortestTimeoutMs);
  }

  /**
   * A handshake was answered with `timeoutMs`. `connectRequestSentAt`, where the client knows it:
   * when its ConnectRequest went out. The server opened the session (the leader's createSession)
   * or re-attached it (the leader's revalidation touches it with `timeoutMs`) after that moment,
   * so the leader heard of the session no sooner; the answer's arrival says nothing more: it may
   * have waited on a slow link or a stalled event loop. Without it (the C client writes its
   * ConnectRequest out of our sight) the bound stays what the answers showed.
   */
  negotiated(timeoutMs: number, connectRequestSentAt?: number): void {
    this.shortestTimeoutMs = Math.min(this.shortestTimeoutMs, timeoutMs);
    if (connectRequestSentAt !== undefined && connectRequestSentAt > this.lastAnsweredSentAt) this.lastAnsweredSentAt = connectRequestSentAt;
  }

  /** A new connection to a server: what earlier ones carried says nothing about this one's reports. */
  newLink(): void {
    this.link++;
    this.answers = [];
    this.head = 0;
  }

  /**
   * A request is sent (no sooner than now): returns what to call with its answer's code, which
   * tells whether the answer came from the server. `viaLeader`: a write or a sync, whose answer
   * moves `lastAnsweredSentAt` (see the class).
   */
  sent(viaLeader: boolean): (code: number) => boolean {
    const request = { sentAt: this.clock.now(), link: this.link };
    this.pending.add(request);
    return (code) => {
      this.pending.delete(request);
      const fromServer = answeredByServer(code);
      if (!fromServer || request.link !== this.link) return fromServer;
      if (viaLeader) {
        const heard = this.newestAnsweredBy(request.sentAt - this.reportLag());
        if (heard !== undefined && heard > this.lastAnsweredSentAt) this.lastAnsweredSentAt = heard;
      }
      this.remember(request.sentAt);
      return fromServer;
    };
  }

  unansweredForMs(): number {
    const oldest = this.pending.values().next().value;
    return oldest ? this.clock.now() - oldest.sentAt : 0;
  }

  /** The newest send time among this link's requests answered at or before `time`. */
  private newestAnsweredBy(time: number): number | undefined {
    let low = this.head;
    let high = this.answers.length - 1;
    let found: number | undefined;
    while (low <= high) {
      const mid = (low + high) >> 1;
      if (this.answers[mid]!.answeredAt <= time) {
        found = this.answers[mid]!.newestSentAt;
        low = mid + 1;
      } else high = mid - 1;
    }
    return found;
  }

  /** Records an answer now; keeps the newest entry an answer still to come could use, and all after it. */
  private remember(sentAt: number): void {
    const now = this.clock.now();
    const last = this.answers[this.answers.length - 1];
    this.answers.push({ answeredAt: now, newestSentAt: Math.max(sentAt, last?.newestSentAt ?? -Infinity) });
    const oldest = this.pending.values().next().value;
    const bound = (oldest?.sentAt ?? now) - this.reportLag();
    while (this.head + 1 < this.answers.length && this.answers[this.head + 1]!.answeredAt <= bound) this.head++;
    if (this.head > 1024 && this.head * 2 > this.answers.length) {
      this.answers = this.answers.slice(this.head);
      this.head = 0;
    }
  }
}

/** Drops the newest registration on `path` that `matches`. */
function drop(map: Map<string, Registration[]>, path: string, matches: (registration: Registration) => boolean): void {
  const registrations = map.get(path);
  if (!registrations) return;
  const index = registrations.findLastIndex(matches);
  if (index >= 0) registrations.splice(index, 1);
  if (registrations.length === 0) map.delete(path);
}

function takeAll(map: Map<string, Registration[]>, path: string): WatchListener[] {
  const registrations = map.get(path) ?? [];
  map.delete(path);
  return registrations.map((r) => r.listener);
}

/**
 * Requests a follower forwards to the leader (writes, sync): only their answers show the leader,
 * which expires sessions, heard of ours. Reads and auth are answered by the server we talk to.
 */
export const VIA_LEADER: ReadonlySet<string> = new Set(['create', 'delete', 'setData', 'setAcl', 'sync']);

/** The in-flight window's bounds: enough to keep the server busy, little enough to answer within a tick. */
export const MIN_IN_FLIGHT = 64;
export const MAX_IN_FLIGHT = 1000;

/** A session's in-flight window after an answer that took `roundTripMs`: one more while answers are quick, half when they are slow. */
export function nextWindow(window: number, roundTripMs: number, timeoutMs: number): number {
  if (roundTripMs < timeoutMs / 16) return Math.min(MAX_IN_FLIGHT, window + 1);
  if (roundTripMs > timeoutMs / 8) return Math.max(MIN_IN_FLIGHT, window >> 1);
  return window;
}
