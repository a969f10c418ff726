// Virtual time for the session simulation: one queue of events ordered by (time, due, sequence).
// Two kinds of events: the model's (ZooKeeper servers and the network: plain synchronous code)
// and the client's (the library's timers and what its sockets receive). A client stall (its event
// loop blocked) defers the client's events to the stall's end, in the order they were due, while
// the model's run on time: the servers do not wait for a stalled client.

/**
 * @typedef {object} VirtualTimer
 * @property {() => VirtualTimer} unref
 * @property {() => VirtualTimer} ref
 * @property {boolean} cancelled
 */

/** @typedef {{ time: number, due: number, seq: number, client: boolean, run: () => void, timer?: VirtualTimer }} QueuedEvent */

export class VirtualClock {
  now = 0;
  /** The client's event loop is blocked until then. */
  stalledUntil = 0;
  /** @private */
  seq = 0;
  /** @private @type {QueuedEvent[]} a binary heap */
  heap = [];

  /**
   * @param {() => number} random the schedule's PRNG (jitter drawn by the client comes from it too)
   */
  constructor(random) {
    this.random = random;
  }

  /** The Clock the library under test is given (lib/core/clock.ts). */
  clientClock() {
    /** @param {() => void} run @param {number} ms */
    const timer = (run, ms, every = 0) => {
      /** @type {VirtualTimer} */
      const handle = { unref: () => handle, ref: () => handle, cancelled: false };
      const fire = () => {
        if (handle.cancelled) return;
        if (every > 0) this.at(this.now + every, fire, true, handle);
        run();
      };
      this.at(this.now + Math.max(0, ms || 0), fire, true, handle);
      return handle;
    };
    /** @param {VirtualTimer | undefined} handle */
    const cancel = (handle) => {
      if (handle) handle.cancelled = true;
    };
    return {
      now: () => this.now,
      /** @param {() => void} run @param {number} ms */
      setTimeout: (run, ms) => timer(run, ms),
      clearTimeout: cancel,
      /** @param {() => void} run @param {number} ms */
      setInterval: (run, ms) => timer(run, ms, Math.max(1, ms)),
      clearInterval: cancel,
      /** @param {() => void} run */
      setImmediate: (run) => void this.at(this.now, run, true),
      random: () => this.random(),
    };
  }

  /**
   * Runs `run` at `time` (the model's event unless `client`).
   * @param {number} time
   * @param {() => void} run
   * @param {boolean} [client]
   * @param {VirtualTimer} [timer]
   */
  at(time, run, client = false, timer) {
    const t = Math.max(time, this.now);
    this.push({ time: t, due: t, seq: this.seq++, client, run, timer });
  }

  /** @param {number} ms @param {() => void} run */
  after(ms, run) {
    this.at(this.now + ms, run);
  }

  /** Blocks the client's event loop from now for `ms` (the model goes on). */
  stallClient(ms) {
    this.stalledUntil = Math.max(this.stalledUntil, this.now + ms);
  }

  get clientStalled() {
    return this.now < this.stalledUntil;
  }

  /**
   * The next event to run, with the clock moved to its time; undefined when none is due by `until`.
   * A client event due while the client is stalled moves to the stall's end, keeping its place
   * among the others that were due before it.
   * @param {number} until
   * @returns {QueuedEvent | undefined}
   */
  next(until) {
    for (;;) {
      const event = this.heap[0];
      if (!event || event.time > until) return undefined;
      this.pop();
      if (event.timer?.cancelled) continue;
      if (event.client && event.time < this.stalledUntil) {
        this.push({ ...event, time: this.stalledUntil });
        continue;
      }
      this.now = event.time;
      return event;
    }
  }

  /** @private @param {QueuedEvent} a @param {QueuedEvent} b */
  before(a, b) {
    return a.time !== b.time ? a.time < b.time : a.due !== b.due ? a.due < b.due : a.seq < b.seq;
  }

  /** @private @param {QueuedEvent} event */
  push(event) {
    const heap = this.heap;
    heap.push(event);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(heap[i], heap[parent])) break;
      [heap[i], heap[parent]] = [heap[parent], heap[i]];
      i = parent;
    }
  }

  /** @private */
  pop() {
    const heap = this.heap;
    const top = heap[0];
    const last = /** @type {QueuedEvent} */ (heap.pop());
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && this.before(heap[l], heap[m])) m = l;
        if (r < heap.length && this.before(heap[r], heap[m])) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m], heap[i]];
        i = m;
      }
    }
    return top;
  }
}
