import type { Listing } from './zk-operations.js';
import type { WatchListener, ZkSession } from './zk-session.js';

/** Lock paths remembered at most (beyond it the oldest are forgotten, their watches dropped). */
const MAX_PATHS = 20_000;

/** The parent watch a shortcut relies on: set on one incarnation of the lock path (its czxid). */
interface ParentWatch {
  /** From the `exists` reply; undefined until it came (or when the path was missing). */
  czxid: number | undefined;
  /** Fired, failed, or dropped: it no longer tells us of the path's deletion. */
  spent: boolean;
  listener: WatchListener;
}

/** What we know of one lock path where our node was last the only one. */
interface AloneRecord {
  session: ZkSession;
  watch: ParentWatch | undefined;
  /** Set when that node's delete was sent: the path's czxid and the sequence number the next create there gets if nobody else creates a node first. */
  parentCzxid: number;
  nextSequence: number | undefined;
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
  watch: ParentWatch;
  parentCzxid: number;
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
 * (a key that comes back), one `exists` per path and incarnation; a deletion tells LockPaths the
 * path is gone, so the next acquire makes it in the same round trip as its node.
 *
 * Our own release is covered by the order of a session's requests: the record is made when our
 * delete is sent, so any create that reads it goes after that delete. The records and watches
 * belong to one session and are dropped by the engine on any disconnection (not needed for the
 * proof: the C client sets its watches again, first thing on the new connection, and the server
 * then reports a changed or deleted path) and at its shutdown.
 */
export class SequenceShortcut {
  private readonly records = new Map<string, AloneRecord>();

  constructor(
    /** The path's deletion was heard of. */
    private readonly onParentDeleted: (path: string) => void,
  ) {}

  /** Before a sequential create in `parentPath`: what its number must be for the shortcut, if it applies. */
  expect(session: ZkSession, parentPath: string): Expectation | undefined {
    const record = this.records.get(parentPath);
    if (!record || record.session !== session || record.nextSequence === undefined) return undefined;
    const watch = record.watch;
    if (!watch || watch.spent || watch.czxid !== record.parentCzxid) return undefined;
    return { record, watch, parentCzxid: record.parentCzxid, sequence: record.nextSequence, list: record.missed };
  }

  /** After the create: the listing its number proves (our node alone), or undefined (list to know). */
  confirm(expected: Expectation, name: string, sequence: number | undefined): Listing | undefined {
    const { record, watch } = expected;
    if (record.nextSequence === expected.sequence) record.nextSequence = undefined; // one create can match it
    if (watch.spent || watch.czxid !== expected.parentCzxid) return undefined;
    record.missed = sequence !== expected.sequence;
    return record.missed ? undefined : { children: [name], parentCzxid: expected.parentCzxid };
  }

  /**
   * We hold, and the listing that says so showed our node alone. On a path we were alone in
   * before (a key that comes back), watch the path, now that our node keeps it from being deleted.
   */
  heldAlone(session: ZkSession, parentPath: string): void {
    const record = this.records.get(parentPath);
    if (!record || record.session !== session || (record.watch && !record.watch.spent)) return;
    const watch: ParentWatch = {
      czxid: undefined,
      spent: false,
      // The record stays (the key comes back): the next hold alone watches the path again.
      listener: (event) => {
        watch.spent = true;
        if (event.type === 'deleted') this.onParentDeleted(parentPath);
      },
    };
    record.watch = watch;
    session.exists(parentPath, watch.listener).then(
      (stat) => (stat ? (watch.czxid = stat.czxid) : (watch.spent = true)),
      () => (watch.spent = true),
    );
  }

  /** The delete of our node, alone in `parentPath` when we took it, was just sent. */
  released(session: ZkSession, parentPath: string, parentCzxid: number, nextSequence: number): void {
    if (session.isClosed) return;
    let record = this.records.get(parentPath);
    if (record && record.session !== session) {
      this.forget(parentPath, record);
      record = undefined;
    }
    if (record) {
      this.records.delete(parentPath); // to the end of the order
    } else {
      record = { session, watch: undefined, parentCzxid, nextSequence, missed: false };
      if (this.records.size >= MAX_PATHS) {
        const [oldestPath, oldest] = this.records.entries().next().value!;
        this.forget(oldestPath, oldest);
      }
    }
    record.parentCzxid = parentCzxid;
    record.nextSequence = nextSequence;
    this.records.set(parentPath, record);
  }

  /** That delete was refused for good: our old node stays, so nothing is known any more. */
  releaseFailed(session: ZkSession, parentPath: string): void {
    const record = this.records.get(parentPath);
    if (record?.session === session) this.forget(parentPath, record);
  }

  private forget(parentPath: string, record: AloneRecord): void {
    this.records.delete(parentPath);
    const watch = record.watch;
    if (!watch) return;
    watch.spent = true;
    record.session.unwatch(parentPath, watch.listener);
  }

  /** On any disconnection (the engine calls it), and when the engine shuts down. */
  forgetAll(): void {
    for (const [path, record] of [...this.records]) this.forget(path, record);
  }
}
