import { parentOf } from '../paths.js';
import { systemClock, type Clock } from '../clock.js';
import { ZkCode } from './zk-error.js';
import { answeredByServer } from './session-bookkeeping.js';

/** ZooKeeper's op codes for the writes a batch can carry. */
export const MultiOpType = { CREATE: 1, DELETE: 2 } as const;

/** One write as ZooKeeper's multi request carries it (the addon's `a_multi` ops). */
export type MultiOp =
  | { type: typeof MultiOpType.CREATE; path: string; data: Buffer; flags: number; acl?: { perm: number; scheme: string; auth: string }[] }
  | { type: typeof MultiOpType.DELETE; path: string; version: number };

export type MultiCall = (ops: MultiOp[], cb: (rc: number, err: string, results: { rc: number; path?: string }[]) => void) => number;

type Done = (rc: number, value?: unknown) => void;

/** A request handed to the batcher: sent as it is, or (a write) inside a multi. */
export interface QueuedRequest {
  /** Sends it on its own, answering `done`; returns the addon's code (non-zero: not sent, no answer will come). */
  send(done: Done): number;
  /** For a write that may share a multi: the op. */
  write?: MultiOp;
  /** For a read (getChildren, exists, getData): its path; it may go after writes that cannot change what it reads. */
  reads?: string;
  /** Where its answer goes. */
  done: Done;
}

/** Ops per multi at most: a failed op fails its whole batch (the others are sent again by their callers). */
const MAX_BATCH = 64;
/**
 * Bytes per multi at most (about): the server drops the connection on a packet over its
 * jute.maxbuffer (1 MiB by default), and the writes sent again after that would make the same
 * packet again. A write alone over it is refused as it would be without batching.
 */
const MAX_BATCH_BYTES = 256 * 1024;

/** ZooKeeper's sequential flag (CreateMode PERSISTENT_SEQUENTIAL 2, EPHEMERAL_SEQUENTIAL 3). */
function isSequentialCreate(op: MultiOp): boolean {
  return op.type === MultiOpType.CREATE && (op.flags & 2) !== 0;
}

/** About what an op takes in the request. */
function sizeOf(op: MultiOp): number {
  let bytes = 32 + Buffer.byteLength(op.path);
  if (op.type === MultiOpType.CREATE) {
    bytes += op.data.length;
    for (const entry of op.acl ?? []) bytes += 12 + Buffer.byteLength(entry.scheme) + Buffer.byteLength(entry.auth);
  }
  return bytes;
}

/**
 * Sends the lock-node writes of a session as ZooKeeper multi requests: one request, one reply
 * and one transaction at the server for many writes (a release's delete and the next acquire's
 * create; many keys' creates and deletes at once), instead of one each.
 *
 * Group commit: while a batch of writes is unanswered, new writes wait here, and they go together
 * when its answer comes (at the end of the task that handled it, so that the writes asked for by
 * everyone that answer woke go too). With nothing in flight a write waits only for the end of the
 * task it was asked for in (its synchronous code and the promise continuations it started): a
 * lone write goes in the same turn of the event loop, writes asked for together go as one multi.
 * Only while more answers are read and waiting for their own tasks (`answersQueued`) does the
 * flush wait for the next turn, so that the writes all of them wake go together. A request of
 * another kind asked for while writes wait queues behind them, so nothing overtakes a write: a
 * multi request is applied at its place in the session's order, and its writes in their order.
 *
 * A multi is applied all or none: when one op fails (its path was deleted, the node was not
 * there) that op gets its own error and every other one NOT_APPLIED ("through no fault of its
 * own"): the callers that ask for batchable writes (protected create, guaranteed delete) send it
 * again. (ZooKeeper itself answers OK for the ops before the failed one, though none was applied.)
 * A lost reply fails every op with the connection error, as separate requests would.
 */
export class WriteBatcher {
  private queue: QueuedRequest[] = [];
  /** Requests carrying batchable writes, sent and not answered (a batch, or one write alone). */
  private writesInFlight = 0;
  private flushScheduled = false;
  /** Set while a flush sends: a request asked for meanwhile (by an answer that came at once) waits its turn. */
  private flushing = false;

  constructor(
    private readonly multi: MultiCall | undefined,
    /** The code every waiting request fails with once the session is closed (undefined while open). */
    private readonly closedCode: () => number | undefined,
    /** Where the next-turn flush is scheduled (the session's clock). */
    private readonly clock: Pick<Clock, 'setImmediate'> = systemClock,
    /** Answers read and waiting for their tasks: the flush waits for the next turn, after them. */
    private readonly answersQueued: () => boolean = () => false,
  ) {}

  submit(request: QueuedRequest): void {
    // An addon without a_multi: every request goes alone, as it comes.
    if (!this.multi || (this.queue.length === 0 && !this.flushing && !request.write)) return sendAlone(request);
    this.queue.push(request);
    this.schedule();
  }

  /** The session closed: what waits here fails now. */
  failQueued(code: number): void {
    const queue = this.queue;
    this.queue = [];
    for (const request of queue) request.done(code);
  }

  private schedule(): void {
    if (this.flushScheduled || this.writesInFlight > 0 || this.queue.length === 0) return;
    this.flushScheduled = true;
    if (this.answersQueued()) this.clock.setImmediate(this.scheduledFlush);
    // After the promise continuations queued so far (the microtask, then the tick after them):
    // the writes of one task go together, without waiting for another turn of the event loop.
    else queueMicrotask(this.afterContinuations);
  }

  private readonly afterContinuations = (): void => void process.nextTick(this.scheduledFlush);

  private readonly scheduledFlush = (): void => {
    this.flushScheduled = false;
    this.flush();
  };

  private flush(): void {
    const closed = this.closedCode();
    if (closed !== undefined) return this.failQueued(closed);
    const queue = this.queue;
    this.queue = [];
    this.flushing = true;
    try {
      this.sendInOrder(queue);
    } finally {
      this.flushing = false;
      this.schedule();
    }
  }

  private sendInOrder(queue: QueuedRequest[]): void {
    // The common case, a write alone (an uncontended acquire's create, a release's delete): as itself.
    if (queue.length === 1 && queue[0]!.write) return this.sendBatch(queue);
    let writes: QueuedRequest[] = [];
    let bytes = 0;
    /**
     * Reads asked for between those writes, sent after them: only while no later write of the
     * batch can change what they read (the node read, or one of its children), so moving them is
     * not observable: they answer, and set their watches, as if sent where they were asked.
     */
    let reads: QueuedRequest[] = [];
    const readPaths = new Set<string>();
    /**
     * A path written twice goes in two batches: in a multi refused at the second write, ZooKeeper
     * answers it as if the first had been applied (a delete's NONODE would read as "gone").
     */
    const writePaths = new Set<string>();
    const send = () => {
      if (writes.length > 0) this.sendBatch(writes);
      for (const read of reads) sendAlone(read);
      writes = [];
      reads = [];
      readPaths.clear();
      writePaths.clear();
      bytes = 0;
    };
    for (const request of queue) {
      const { write } = request;
      if (write) {
        const size = sizeOf(write);
        const touchesRead = readPaths.has(write.path) || readPaths.has(parentOf(write.path));
        // Sequential creates of one path make distinct nodes.
        const sameNode = !isSequentialCreate(write) && writePaths.has(write.path);
        if (writes.length >= MAX_BATCH || bytes + size > MAX_BATCH_BYTES || touchesRead || sameNode) send();
        writes.push(request);
        if (!isSequentialCreate(write)) writePaths.add(write.path);
        bytes += size;
      } else if (request.reads !== undefined && writes.length > 0) {
        reads.push(request);
        readPaths.add(request.reads);
      } else {
        send();
        sendAlone(request);
      }
    }
    send();
  }

  /** One write goes as itself; more as one multi request. */
  private sendBatch(batch: QueuedRequest[]): void {
    this.writesInFlight++;
    let answered = false;
    const settle = () => {
      if (answered) return false;
      answered = true;
      this.writesInFlight--;
      return true;
    };
    if (batch.length === 1) {
      const [request] = batch as [QueuedRequest];
      const rc = guarded(() =>
        request.send((code, value) => {
          if (settle()) this.schedule();
          request.done(code, value);
        }),
      );
      if (rc !== ZkCode.OK && settle()) {
        request.done(rc);
        this.schedule();
      }
      return;
    }
    const rc = guarded(() => this.multi!(
      batch.map((request) => request.write!),
      (rc, _err, results) => {
        if (!settle()) return;
        // Not this batch's answer (a result missing, a create without its path): the outcome is
        // unknown, as for a lost reply (the sessions drop such a reply's link before it gets here).
        const code = rc === ZkCode.OK && !answersBatch(batch, results) ? ZkCode.RUNTIMEINCONSISTENCY : rc;
        batch.forEach((request, i) => {
          const own = results[i]?.rc ?? code;
          if (code === ZkCode.OK) request.done(own, results[i]?.path);
          // No answer (connection lost): the outcome is unknown, as for separate requests.
          else if (!answeredByServer(code)) request.done(code);
          // Refused as a whole: the op that failed has its own code, the rest were not applied
          // (ZooKeeper says OK for those before it, RUNTIMEINCONSISTENCY for those after).
          else request.done(own === ZkCode.OK || own === ZkCode.RUNTIMEINCONSISTENCY ? ZkCode.NOT_APPLIED : own);
        });
        this.schedule();
      },
    ));
    if (rc !== ZkCode.OK) {
      settle();
      for (const request of batch) request.done(rc);
      this.schedule();
    }
  }
}

function answersBatch(batch: QueuedRequest[], results: { rc: number; path?: string }[]): boolean {
  return results.length === batch.length && batch.every((request, i) => request.write!.type !== MultiOpType.CREATE || results[i]!.rc !== ZkCode.OK || results[i]!.path !== undefined);
}

/** A send that throws (a bad argument the addon rejects) fails its request, not the batcher. */
function guarded(send: () => number): number {
  try {
    return send();
  } catch {
    return ZkCode.BADARGUMENTS;
  }
}

function sendAlone(request: QueuedRequest): void {
  const rc = guarded(() => request.send(request.done));
  // A non-zero return means the request was never queued, and its callback will never run.
  if (rc !== ZkCode.OK) request.done(rc);
}
