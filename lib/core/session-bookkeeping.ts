import { ZkCode } from './zk-error.js';

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

/**
 * When the leader last heard from a session, from its requests: the send time of the newest one
 * answered that went through the leader (a lower bound, see ZkSession.lastAnsweredSentAt), and how
 * long the oldest unanswered request has waited.
 */
export class RequestClock {
  lastAnsweredSentAt = performance.now();
  /** Requests still waiting for their answer, oldest first (a Set keeps insertion order). */
  private readonly pending = new Set<{ sentAt: number }>();

  /**
   * A request is sent (no sooner than now): returns what to call with its answer's code, which
   * tells whether the answer came from the server. Only an answer that passed through the leader
   * (`viaLeader`: a write or a sync) moves `lastAnsweredSentAt`: the leader expires sessions, and
   * a follower cut off from it still answers reads (and pings) from its own copy.
   */
  sent(viaLeader: boolean): (code: number) => boolean {
    const request = { sentAt: performance.now() };
    this.pending.add(request);
    return (code) => {
      this.pending.delete(request);
      const fromServer = answeredByServer(code);
      if (viaLeader && fromServer && request.sentAt > this.lastAnsweredSentAt) this.lastAnsweredSentAt = request.sentAt;
      return fromServer;
    };
  }

  unansweredForMs(): number {
    const oldest = this.pending.values().next().value;
    return oldest ? performance.now() - oldest.sentAt : 0;
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
