import type { Listing } from './zk-operations.js';
import type { WatchListener, ZkSession } from '../client/session.js';

/** Lock paths remembered at most (beyond it the oldest are forgotten). */
const MAX_PATHS = 20_000;
/**
 * Path bytes the shortcut's watches may take in one session. A client keeps a watch until it fires
 * (it cannot forget one) and sends them again when it reconnects; the C client (client: 'addon')
 * sends them all in one packet, which over the server's jute.maxbuffer (1 MiB by default) is refused
 * on every try, and the session is lost. Half of that leaves room for the other watches (held
 * leases, waiters).
 */
const WATCH_BUDGET_BYTES = 512 * 1024;

/** The watch on one lock path, as the session's client holds it until it fires. */
interface PathWatch {
  /** The path's czxid from the latest `exists` reply (undefined until it came, or if missing). */
  czxid: number | undefined;
  /** Known to be set on that incarnation and not fired since (false after a disconnection). */
  armed: boolean;
  /** Bytes it takes in a reconnect's packet. */
  cost: number;
  listener: WatchListener;
  /** The engines' shortcuts that rely on it, told when it fires. */
  onFired: Set<(path: string, watch: PathWatch, deleted: boolean) => void>;
}

/** The path watches of one session: shared by the engines on it, outliving any of them. */
interface SessionWatches {
  bytes: number;
  byPath: Map<string, PathWatch>;
}

const watchesBySession = new WeakMap<ZkSession, SessionWatches>();

/** @internal The shortcut's path watches in `session` (for tests). */
export function watchesOf(session: ZkSession): SessionWatches {
  let watches = watchesBySession.get(session);
  if (!watches) watchesBySession.set(session, (watches = { bytes: 0, byPath: new Map() }));
  return watches;
}

/** One release of our node alone in a path: what the next create there must be numbered. */
interface AloneRelease {
  parentCzxid: number;
  nextSequence: number;
  /** Its delete succeeded (its reply comes before any later create's; see `settled`). */
  deleted: boolean;
  /**
   * Settles once the delete's outcome is known. The reply comes first, but its handlers may run
   * after the create's when both answers come together (one multi request, or one read).
   */
  settled: Promise<unknown>;
}

/** What we know of one lock path where our node was last the only one. */
interface AloneRecord {
  session: ZkSession;
  release: AloneRelease | undefined;
  /**
   * The last create with an expectation here found another number (another process uses the
   * key too): the next one goes with its listing as usual, so a miss does not cost a round trip
   * each time; its number still says whether the shortcut would have held.
   */
  missed: boolean;
}

/** What a create sent with the shortcut expects; see `SequenceShortcut.confirm`. */
export interface Expectation {
  record: AloneRecord;
  release: AloneRelease;
  watch: PathWatch;
  sequence: number;
  /** Send the listing with the create anyway (see AloneRecord.missed). */
  list: boolean;
}

/**
 * Holding without a listing. ZooKeeper names a sequential node after the number of children ever
 * created under its parent, so when our node was the only one at our last look and we deleted it,
 * a new create of ours whose number is the next one proves that nobody created a node there in
 * between: the queue holds our node alone, and the listing (one request of three per
 * uncontended acquisition) would only say so. A number that is off means someone came: list.
 *
 * The proof needs the parent to be the same node: an empty lock path can be deleted (ZooKeeper's
 * container reaper, an idle sweep) and made again, and a new one numbers from 0. So the shortcut
 * is taken only under an `exists` watch on the path, set while our node was in it (so on the same
 * incarnation; its czxid is checked too) and not fired since. ZooKeeper sends a session the watch
 * event of a change before the reply to any request it processes after that change, and the
 * client delivers both in that order: a create whose reply comes with the watch unfired was
 * processed while that parent still existed. The watch is set at the second hold alone on a path
 * in one incarnation (a key that comes back before its path is reaped), one `exists` per path and
 * incarnation, within a byte budget per
 * session (WATCH_BUDGET_BYTES); a deletion tells LockPaths the path is gone, so the next acquire
 * makes it in the same round trip as its node.
 *
 * Our own release is covered by the order of a session's requests: the record is made when our
 * delete is sent, so any create that reads it goes after that delete, and it proves nothing until
 * that delete succeeded. The records belong to one session and are dropped by the engine on any
 * disconnection (not needed for the proof: the session sets its watches again, first thing on
 * the new connection, and the server then reports a changed or deleted path; the watches count
 * as unarmed until set again) and at its shutdown.
 */
export class SequenceShortcut {
  private readonly records = new Map<string, AloneRecord>();
  /** Watches that tell us when they fire (until they do, or we stop). */
  private readonly subscribed = new Set<PathWatch>();
  private readonly fired = (path: string, watch: PathWatch, deleted: boolean): void => {
    this.subscribed.delete(watch);
    if (!deleted) return;
    // The path's next incarnation starts over: a key whose path is reaped between two uses (used
    // less than once per reaper interval) would pay an `exists` per use and never gain from it.
    this.records.delete(path);
    this.onParentDeleted(path);
  };

  constructor(
    /** The path's deletion was heard of. */
    private readonly onParentDeleted: (path: string) => void,
  ) {}

  /** Before a sequential create in `parentPath`: what its number must be for the shortcut, if it applies. */
  expect(session: ZkSession, parentPath: string): Expectation | undefined {
    const record = this.records.get(parentPath);
    const release = record?.release;
    if (!record || !release || record.session !== session) return undefined;
    const watch = watchesOf(session).byPath.get(parentPath);
    if (!watch?.armed || watch.czxid !== release.parentCzxid) return undefined;
    return { record, release, watch, sequence: release.nextSequence, list: record.missed };
  }

  /** After the create: the listing its number proves (our node alone), or undefined (list to know). */
  confirm(expected: Expectation, name: string, sequence: number | undefined): Listing | undefined {
    const { record, release, watch } = expected;
    if (record.release === release) record.release = undefined; // one create can match it
    if (!watch.armed || watch.czxid !== release.parentCzxid || !release.deleted) return undefined;
    record.missed = sequence !== expected.sequence;
    return record.missed ? undefined : { children: [name], parentCzxid: release.parentCzxid };
  }

  /**
   * We hold, and the listing that says so showed our node alone. On a path we were alone in
   * before (a key that comes back), watch the path, now that our node keeps it from being deleted.
   */
  heldAlone(session: ZkSession, parentPath: string): void {
    const record = this.records.get(parentPath);
    if (!record || record.session !== session) return;
    const watches = watchesOf(session);
    let watch = watches.byPath.get(parentPath);
    if (watch) {
      this.subscribe(watch);
      if (watch.armed) return;
      session.unwatch(parentPath, watch.listener); // set again below, with the same listener
    } else {
      const cost = Buffer.byteLength(parentPath) + 4;
      if (watches.bytes + cost > WATCH_BUDGET_BYTES) return;
      const made: PathWatch = {
        czxid: undefined,
        armed: false,
        cost,
        onFired: new Set(),
        // Refers to the session's table only: an engine that shut down is not kept by it.
        listener: (event) => {
          made.armed = false;
          if (watches.byPath.get(parentPath) === made) {
            watches.byPath.delete(parentPath);
            watches.bytes -= made.cost;
          }
          for (const tell of made.onFired) tell(parentPath, made, event.type === 'deleted');
        },
      };
      watch = made;
      watches.byPath.set(parentPath, watch);
      watches.bytes += cost;
      this.subscribe(watch);
    }
    const armed = watch;
    session.exists(parentPath, armed.listener).then(
      (stat) => {
        if (watches.byPath.get(parentPath) !== armed) return; // fired meanwhile
        armed.czxid = stat?.czxid;
        armed.armed = stat !== null;
      },
      () => (armed.armed = false),
    );
  }

  /** The delete of our node, alone in `parentPath` when we took it, was just sent. */
  released(session: ZkSession, parentPath: string, parentCzxid: number, nextSequence: number, settled: Promise<unknown>): AloneRelease | undefined {
    if (session.isClosed) return undefined;
    let record = this.records.get(parentPath);
    if (record && record.session !== session) record = undefined;
    this.records.delete(parentPath); // to the end of the order
    if (!record) {
      record = { session, release: undefined, missed: false };
      if (this.records.size >= MAX_PATHS) this.records.delete(this.records.keys().next().value!);
    }
    record.release = { parentCzxid, nextSequence, deleted: false, settled };
    this.records.set(parentPath, record);
    return record.release;
  }

  /** That delete was refused for good: our old node stays, so nothing is known any more. */
  releaseFailed(session: ZkSession, parentPath: string): void {
    if (this.records.get(parentPath)?.session === session) this.records.delete(parentPath);
  }

  /** On any disconnection of `session` (ZkOperations, its owner, calls it): its watches are unarmed until set again. */
  forgetAll(session: ZkSession | undefined): void {
    this.records.clear();
    if (session) for (const watch of watchesOf(session).byPath.values()) watch.armed = false;
  }

  /** The engine shut down: nothing of it stays reachable from the session's watches. */
  stop(): void {
    this.records.clear();
    for (const watch of this.subscribed) watch.onFired.delete(this.fired);
    this.subscribed.clear();
  }

  private subscribe(watch: PathWatch): void {
    watch.onFired.add(this.fired);
    this.subscribed.add(watch);
  }
}
