// Virtual time for the session simulation: one queue of events ordered by (time, due, sequence).
// Two kinds of events: the model's (ZooKeeper servers and the network: plain synchronous code)
// and each client's (the library's timers and what its sockets receive; a client is a process,
// numbered). A client's stall (its event loop blocked) defers that client's events to the stall's
// end, in the order they were due, while the model's and the other clients' run on time.

/**
 * @typedef {object} VirtualTimer
 * @property {() => VirtualTimer} unref
 * @property {() => VirtualTimer} ref
 * @property {boolean} cancelled
 */

/** @typedef {{ time: number, due: number, seq: number, client: number | undefined, run: () => void, timer?: VirtualTimer }} QueuedEvent */

export class VirtualClock {
  now = 0;
  /** Until when each client's event loop is blocked. @private @type {Map<number, number>} */
  stalls = new Map();
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

  /** The Clock client `client` (a process) is given (lib/core/clock.ts). */
  clientClock(client = 0) {
    /** @param {() => void} run @param {number} ms */
    const timer = (run, ms, every = 0) => {
      /** @type {VirtualTimer} */
      const handle = { unref: () => handle, ref: () => handle, cancelled: false };
      const fire = () => {
        if (handle.cancelled) return;
        if (every > 0) this.at(this.now + every, fire, client, handle);
        run();
      };
      this.at(this.now + Math.max(0, ms || 0), fire, client, handle);
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
      setImmediate: (run) => void this.at(this.now, run, client),
      random: () => this.random(),
    };
  }

  /**
   * Runs `run` at `time`: the model's event, or client `client`'s.
   * @param {number} time
   * @param {() => void} run
   * @param {number} [client]
   * @param {VirtualTimer} [timer]
   */
  at(time, run, client, timer) {
    const t = Math.max(time, this.now);
    this.push({ time: t, due: t, seq: this.seq++, client, run, timer });
  }

  /** @param {number} ms @param {() => void} run */
  after(ms, run) {
    this.at(this.now + ms, run);
  }

  /** Blocks client `client`'s event loop from now for `ms` (the model and the others go on). @param {number} client @param {number} ms */
  stallClient(client, ms) {
    this.stalls.set(client, Math.max(this.stalledUntil(client), this.now + ms));
  }

  /** @param {number} client */
  stalledUntil(client) {
    return this.stalls.get(client) ?? 0;
  }

  /** @param {number} client */
  clientStalled(client) {
    return this.now < this.stalledUntil(client);
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
      if (event.client !== undefined && event.time < this.stalledUntil(event.client)) {
        this.push({ ...event, time: this.stalledUntil(event.client) });
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
