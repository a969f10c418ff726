import { isZkCode, ZkCode, ZkError } from '../client/zk-error.js';
import type { WatchEventType, ZkSession } from '../client/session.js';

/**
 * Watches one node of ours until it is deleted, for whoever relies on "my node still exists"
 * (a held lease, a waiter about to take the "predecessor was head" shortcut). A ZooKeeper watch
 * fires once, for whatever comes first: a data change (someone's `set`, Curator's revocation
 * marker) spends it, so any event other than the deletion arms it again. A request that fails
 * on a connection error sets no watch either: it is re-armed on the next link, before that link
 * is confirmed (so the connection reports connected only once this watch is known again).
 * `armed` is true only while the watch is known to be set on the existing node.
 * With `onData` (a revocable holder), each arming reads the node's data too (one request either
 * way), so every change of it is seen.
 */
export class NodeWatch {
  armed = false;
  gone = false;
  /** The first arming's outcome: true once set on the existing node. */
  readonly ready: Promise<boolean>;
  private stopped = false;

  constructor(
    private readonly session: ZkSession,
    private readonly path: string,
    private readonly onDeleted: () => void,
    /**
     * Calls its argument when `session`'s link is back, ahead of the sync that confirms it (see
     * ZkConnection.onLinkUp); never if the session is gone.
     */
    private readonly onLinkUp: (session: ZkSession, run: () => void) => void,
    /** Read the data at each arming; `unreadable`: refused (an ACL without READ): deletion only, from then on. */
    private data?: { onData: (data: Buffer) => void; unreadable: (error: unknown) => void },
  ) {
    this.ready = this.arm();
  }

  stop(): void {
    this.stopped = true;
    this.armed = false;
    this.session.unwatch(this.path, this.listener);
  }

  private readonly listener = (event: { type: WatchEventType }): void => {
    this.armed = false;
    if (this.stopped) return;
    if (event.type === 'deleted') this.deleted();
    else void this.arm();
  };

  private arm(): Promise<boolean> {
    const data = this.data;
    const read: Promise<boolean> = data
      ? this.session.getData(this.path, this.listener).then(({ data: bytes }) => (this.stopped || this.gone ? undefined : data.onData(bytes), true))
      : this.session.exists(this.path, this.listener).then((stat) => stat !== null);
    return read.then(
      (exists) => {
        if (this.stopped || this.gone) return false;
        if (!exists) {
          this.deleted();
          return false;
        }
        this.armed = true;
        return true;
      },
      (error: unknown) => {
        if (isZkCode(error, ZkCode.NONODE)) {
          if (!this.stopped) this.deleted();
          return false;
        }
        if (this.stopped) return false;
        if (error instanceof ZkError && error.isConnectionError) {
          // Set it again on the next link before that link counts as connected: a deletion of
          // our node while we were away must be heard of first.
          this.onLinkUp(this.session, () => void (!this.stopped && !this.gone && this.arm()));
          return false;
        }
        if (error instanceof ZkError && error.isSessionGone) return false; // its loss is reported elsewhere
        if (data) {
          // Refused by the server (e.g. NOAUTH): retrying would only spin. Watch for deletion alone.
          this.data = undefined;
          data.unreadable(error);
          return this.arm();
        }
        return false;
      },
    );
  }

  private deleted(): void {
    if (this.gone) return;
    this.gone = true;
    this.armed = false;
    this.onDeleted();
  }
}
