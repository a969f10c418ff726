import { onLeaseEnd, type Lease } from './lease.js';

/**
 * Re-entrancy: one underlying lease shared by nested acquisitions of the same call chain. Each
 * acquisition gets its own handle; the node is released when the last handle is.
 */
export class CountedLease {
  private count = 0;

  constructor(private readonly root: Lease) {}

  handle(): ReentrantHandle {
    this.count++;
    return new ReentrantHandle(this.root, this);
  }

  /** @internal */
  releaseOne(): Promise<void> {
    this.count--;
    return this.count === 0 ? this.root.release() : Promise.resolve();
  }
}

export class ReentrantHandle implements Lease {
  private released = false;

  constructor(
    /** @internal The lease shared by the nested acquisitions. */
    readonly root: Lease,
    private readonly counter: CountedLease,
  ) {}

  get name() {
    return this.root.name;
  }
  get path() {
    return this.root.path;
  }
  get fencingToken() {
    return this.root.fencingToken;
  }
  get signal() {
    return this.root.signal;
  }
  get sessionId() {
    return this.root.sessionId;
  }
  get isHeld() {
    return !this.released && this.root.isHeld;
  }

  /** Another handle on the same hold, for a nested acquisition. */
  reenter(): ReentrantHandle {
    return this.counter.handle();
  }

  release(): Promise<void> {
    if (this.released) return Promise.resolve();
    this.released = true;
    const listeners = this.endListeners;
    this.endListeners = undefined;
    for (const listener of listeners ?? []) listener();
    return this.counter.releaseOne();
  }

  private endListeners: Set<() => void> | undefined;

  /** @internal Calls `listener` when this handle is released or its hold ends (see onLeaseEnd). */
  whenEnded(listener: () => void): () => void {
    if (this.released) {
      listener();
      return () => undefined;
    }
    (this.endListeners ??= new Set()).add(listener);
    const offRoot = onLeaseEnd(this.root, listener);
    return () => {
      this.endListeners?.delete(listener);
      offRoot();
    };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
