// In-process coalescing of mutexes against a real ZooKeeper: the callers of one process (one
// engine) wait in memory behind ONE node and hand it over locally; `maxLocalHandoffs` bounds the
// handoffs once another process waits; every local holder has its own lease (signal, leaseMs,
// fencing token); giving up, lost sessions, deleted nodes and shutdown leave nothing behind.
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { ConnectionClosedError, InvalidOptionError, LockLostError } from '../../../lib/core/errors.js';
import { HANDOFF_BITS } from '../../../lib/core/paths.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { delay, nameOf, nodesOf, notAcquired, untilChildCount, untilWatching, within, whenAborted } from '../../support/lock-test-helpers.js';

// Many tests open several sessions: close them after each test so they do not pile up.
afterEach(closeAll);
afterAll(closeAll);

/** One turn of the event loop (a macrotask), so a non-atomic read-modify-write spans real time. */
const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Resolves with the signal's reason once it aborts. */
/** The parent's cversion: it grows with every child created or deleted under `path`. */
async function cversionOf(observer: ZkConnection, path: string): Promise<number> {
  const stat = await observer.session!.exists(path);
  if (!stat) throw new Error(`${path} does not exist`);
  return stat.cversion;
}

/** Samples the number of children of `path` until stopped; resolves with the largest seen. */
function sampleChildren(observer: ZkConnection, path: string): { stop(): Promise<number> } {
  let sampling = true;
  let max = 0;
  const run = (async () => {
    while (sampling) max = Math.max(max, (await childrenOf(observer, path)).length);
  })();
  return {
    async stop() {
      sampling = false;
      await run;
      return max;
    },
  };
}

interface Grant {
  who: string;
  path: string;
  token: bigint;
}

/**
 * `count` callers of one mutex looping acquire → hold → release until stopped (one engine: one
 * "process"). Every grant goes to `log`; exclusion and a non-atomic counter are checked across them.
 */
function loopers(mutex: Mutex, count: number, log: Grant[], hold: () => Promise<unknown>) {
  let running = true;
  let failure: unknown;
  const state = { inside: 0, maxInside: 0, counter: 0 };
  const loop = async (i: number) => {
    try {
      while (running) {
        await mutex.withLock(async (lease) => {
          state.inside++;
          state.maxInside = Math.max(state.maxInside, state.inside);
          log.push({ who: `A${i}`, path: lease.path, token: lease.fencingToken });
          const read = state.counter;
          await hold();
          state.counter = read + 1;
          state.inside--;
        });
      }
    } catch (error) {
      failure ??= error;
      running = false;
    }
  };
  const done = Promise.all(Array.from({ length: count }, (_, i) => loop(i)));
  return {
    state,
    /** Stops without waiting (e.g. when the test failed: closeAll ends the waits). */
    halt() {
      running = false;
    },
    async stop() {
      running = false;
      await within(done, 20_000, 'loopers stopping');
      if (failure) throw failure;
    },
  };
}

/**
 * Lists `path` back to back until it has two children (a busy process keeps at most one node:
 * the second is another process's); returns how many grants `log` had by then. The server sends
 * the busy process its watch event for that node when it makes the node visible, so the grants
 * after this point are those the busy process made after it could know.
 */
async function grantsWhenSecondNodeAppears(observer: ZkConnection, path: string, log: Grant[]): Promise<number> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const children = await childrenOf(observer, path);
    if (children.length >= 2) return log.length;
    if (Date.now() > deadline) throw new Error(`no second node under ${path} within 20 s (children: ${children.join(', ')})`);
  }
}

function expectIncreasing(tokens: bigint[]): void {
  for (let i = 1; i < tokens.length; i++) {
    if (!(tokens[i]! > tokens[i - 1]!)) throw new Error(`fencing token #${i} (${tokens[i]}) is not above #${i - 1} (${tokens[i - 1]})`);
  }
}

describe('Mutex in-process coalescing (real ZooKeeper)', () => {
  describe('one node per process', () => {
    it('callers of one engine share ONE node, hold one at a time in arrival order, with fencing tokens one above each other', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('coalesce');
      const mutex = new Mutex(e, 'co', path);
      // 4 x 4 = 16 acquisitions = 15 local handoffs: within the default bound (16) even before the
      // first handoff's queue listing returns, so all of them must stay on the first node.
      const callers = 4;
      const rounds = 4;
      const grants: { caller: number; path: string; token: bigint }[] = [];
      let counter = 0;
      let inside = 0;
      let maxInside = 0;
      let openGate!: () => void;
      const gate = new Promise<void>((resolve) => (openGate = resolve));
      let firstIn!: () => void;
      const firstHolds = new Promise<void>((resolve) => (firstIn = resolve));
      let lastCversion: number | undefined;

      const worker = async (caller: number) => {
        for (let round = 0; round < rounds; round++) {
          await mutex.withLock(async (lease) => {
            inside++;
            maxInside = Math.max(maxInside, inside);
            grants.push({ caller, path: lease.path, token: lease.fencingToken });
            if (grants.length === 1) {
              firstIn();
              await gate;
            }
            const read = counter;
            await tick();
            await tick();
            counter = read + 1;
            if (grants.length === callers * rounds) lastCversion = await cversionOf(observer, path);
            inside--;
          });
        }
      };
      // All callers arrive now, in order 0..3 (each queues synchronously on arrival).
      const workers = Array.from({ length: callers }, (_, i) => worker(i));
      await within(firstHolds, 20_000, 'first holder');
      const before = await cversionOf(observer, path);
      // The first holds, three wait: still one node of ours on ZooKeeper, one local queue.
      const children = await childrenOf(observer, path);
      expect(children).toHaveLength(1);
      expect(`${path}/${children[0]}`).toBe(grants[0]!.path);
      expect(e.localQueueCount).toBe(1);

      const sampler = sampleChildren(observer, path);
      openGate();
      await within(Promise.all(workers), 20_000, 'workers');
      const maxChildren = await sampler.stop();

      expect(counter).toBe(callers * rounds);
      expect(maxInside).toBe(1);
      expect(maxChildren).toBeLessThanOrEqual(1);
      // FIFO: the waiters in arrival order, and a caller that comes back queues at the tail.
      expect(grants.map((g) => g.caller)).toEqual(Array.from({ length: callers * rounds }, (_, i) => i % callers));
      // One node throughout, handed over locally: its token has the handoff bits clear, then +1 per holder.
      expect(new Set(grants.map((g) => g.path))).toEqual(new Set([grants[0]!.path]));
      expect(grants[0]!.token % (1n << BigInt(HANDOFF_BITS))).toBe(0n);
      expectIncreasing(grants.map((g) => g.token));
      expect(grants.map((g) => g.token - grants[0]!.token)).toEqual(grants.map((_, i) => BigInt(i)));
      // From the first hold to the last, no child was created or deleted (no second node came and went).
      expect(lastCversion).toBe(before);

      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });

    it('distinct Mutex objects of one engine on one path share the node too', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('coalesce-objects');
      const first = await new Mutex(e, 'one', path).acquire();
      const second = new Mutex(e, 'two', path).acquire({ waitMs: 20_000 });
      const third = new Mutex(e, 'three', path).acquire({ waitMs: 20_000 });
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(first)]);
      expect(e.localQueueCount).toBe(1);

      await first.release();
      const b = await second;
      expect(b.name).toBe('two');
      expect(b.path).toBe(first.path);
      expect(b.fencingToken).toBe(first.fencingToken + 1n);
      await b.release();
      const c = await third;
      expect(c.path).toBe(first.path);
      expect(c.fencingToken).toBe(first.fencingToken + 2n);
      await c.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });
  });

  describe('coalesce: false', () => {
    async function expectOneNodePerCaller(e: LockEngine, mutex: Mutex, observer: ZkConnection, path: string): Promise<void> {
      const first = await mutex.acquire();
      const waiting = [0, 1, 2].map(() => mutex.acquire({ waitMs: 20_000 }));
      const children = await untilChildCount(observer, path, 4);
      expect(e.localQueueCount).toBe(0);
      await first.release();
      const leases: Lease[] = [];
      for (const next of waiting) {
        const lease = await within(next, 20_000, 'queued caller');
        leases.push(lease);
        expect(children).toContain(nameOf(lease));
        await lease.release();
      }
      expect(new Set([first, ...leases].map((l) => l.path)).size).toBe(4);
      expectIncreasing([first, ...leases].map((l) => l.fencingToken));
      expect(await childrenOf(observer, path)).toEqual([]);
    }

    it('on the mutex: every waiting caller queues its own node (N callers, N children)', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('no-coalesce');
      await expectOneNodePerCaller(e, new Mutex(e, 'nc', path, { coalesce: false }), observer, path);
    });

    it('as the engine default: one node per caller; a mutex can still opt in with coalesce: true', async () => {
      const e = await engine({}, { coalesce: false });
      const observer = await connect();
      const path = uniquePath('no-coalesce-engine');
      await expectOneNodePerCaller(e, new Mutex(e, 'nce', path), observer, path);

      const optIn = uniquePath('opt-in');
      const mutex = new Mutex(e, 'in', optIn, { coalesce: true });
      const first = await mutex.acquire();
      const waiting = [0, 1, 2].map(() => mutex.acquire({ waitMs: 20_000 }));
      await e.drain();
      expect(await childrenOf(observer, optIn)).toEqual([nameOf(first)]);
      await first.release();
      for (const next of waiting) await (await next).release();
      expect(await childrenOf(observer, optIn)).toEqual([]);
    });
  });

  describe('fairness across processes (maxLocalHandoffs)', () => {
    it('another process waits at most maxLocalHandoffs (+1 in flight) holders of a busy process', async () => {
      const a = await engine();
      const b = await engine();
      const observer = await connect();
      const path = uniquePath('fair');
      const k = 3;
      const log: Grant[] = [];
      // Holds long next to the time the news of B's node takes to reach A on a busy machine (the
      // observer that counts from its arrival listens on another socket).
      const workers = loopers(new Mutex(a, 'fair', path, { maxLocalHandoffs: k }), 3, log, () => delay(30));
      try {
        await eventually(() => log.length >= 30, 20_000, 10);
        expect(await childrenOf(observer, path)).toHaveLength(1);
        const aNodeBefore = log[log.length - 1]!.path;

        const bAcquiring = new Mutex(b, 'fair', path).acquire({ waitMs: 20_000 });
        bAcquiring.catch(() => undefined);
        const seenAt = await grantsWhenSecondNodeAppears(observer, path, log);
        const bNode = (await nodesOf(observer, path, b.connection.sessionId!))[0];
        const bLease = await within(bAcquiring, 20_000, 'B acquiring');
        log.push({ who: 'B', path: bLease.path, token: bLease.fencingToken });
        const aWhileBWaited = log.slice(seenAt, -1);
        expect(bNode).toBeDefined();
        expect(`${path}/${bNode}`).toBe(bLease.path);
        // k handoffs after A saw B's node, plus the holder (or a handoff) in flight when it appeared.
        expect(aWhileBWaited.length).toBeLessThanOrEqual(k + 2);
        // A gave its node up and queues a new one behind B (one node for all of A's callers).
        let aNodes: string[] = [];
        await eventually(async () => (aNodes = await nodesOf(observer, path, a.connection.sessionId!)).length === 1, 20_000, 5);
        expect(`${path}/${aNodes[0]}`).not.toBe(aNodeBefore);
        expect(Number(aNodes[0]!.slice(-10))).toBeGreaterThan(Number(bNode!.slice(-10)));
        expect(bLease.isHeld).toBe(true);
        expect(await childrenOf(observer, path)).toHaveLength(2);
        await bLease.release();

        const bIndex = log.length - 1;
        await eventually(() => log.length >= bIndex + 10, 20_000, 10);
        await workers.stop();
        const afterB = log.slice(bIndex + 1);
        expect(afterB.every((g) => g.path !== aNodeBefore && g.path !== bLease.path)).toBe(true);
        // Fencing tokens rise across both processes in the order they held.
        expectIncreasing(log.map((g) => g.token));
        expect(workers.state.maxInside).toBe(1);
        expect(workers.state.counter).toBe(log.length - 1);
        await a.drain();
        expect(await childrenOf(observer, path)).toEqual([]);
        expect(a.localQueueCount).toBe(0);
      } finally {
        workers.halt();
      }
    });

    it('maxLocalHandoffs: 0 never hands over locally: every holder of the busy process gets a new node', async () => {
      const a = await engine();
      const b = await engine();
      const observer = await connect();
      const path = uniquePath('fair0');
      const log: Grant[] = [];
      const workers = loopers(new Mutex(a, 'fair0', path, { maxLocalHandoffs: 0 }), 3, log, () => delay(2));
      try {
        await eventually(() => log.length >= 10, 20_000, 10);
        const bAcquiring = new Mutex(b, 'fair0', path).acquire({ waitMs: 20_000 });
        bAcquiring.catch(() => undefined);
        const seenAt = await grantsWhenSecondNodeAppears(observer, path, log);
        const bNode = (await nodesOf(observer, path, b.connection.sessionId!))[0];
        const bLease = await within(bAcquiring, 20_000, 'B acquiring');
        log.push({ who: 'B', path: bLease.path, token: bLease.fencingToken });
        const aWhileBWaited = log.slice(seenAt, -1);
        expect(aWhileBWaited.length).toBeLessThanOrEqual(2);
        await bLease.release();
        const bIndex = log.length - 1;
        await eventually(() => log.length >= bIndex + 10, 20_000, 10);
        await workers.stop();

        // Never a local handoff: A's node is re-created between any two of A's holders.
        const aPaths = log.filter((g) => g.who !== 'B').map((g) => g.path);
        expect(new Set(aPaths).size).toBe(aPaths.length);
        expectIncreasing(log.map((g) => g.token));
        expect(workers.state.maxInside).toBe(1);
        await a.drain();
        expect(await childrenOf(observer, path)).toEqual([]);
        expect(a.localQueueCount).toBe(0);
      } finally {
        workers.halt();
      }
    });

    it('maxLocalHandoffs: 0 as the engine default never hands over locally either', async () => {
      const e = await engine({}, { maxLocalHandoffs: 0 });
      const observer = await connect();
      const path = uniquePath('engine0');
      const mutex = new Mutex(e, 'e0', path);
      const first = await mutex.acquire();
      const second = mutex.acquire({ waitMs: 20_000 });
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(first)]); // still one node per process
      await first.release();
      const next = await second;
      expect(next.path).not.toBe(first.path);
      expect(next.fencingToken > first.fencingToken).toBe(true);
      await next.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('while no other process waits, local handoffs are not limited (200 holders, one node)', async () => {
      const a = await engine();
      const observer = await connect();
      const path = uniquePath('alone');
      const log: Grant[] = [];
      const workers = loopers(new Mutex(a, 'alone', path, { maxLocalHandoffs: 3 }), 3, log, async () => {
        await tick();
        await tick();
      });
      try {
        await eventually(() => log.length >= 1, 20_000, 5);
        const sampler = sampleChildren(observer, path);
        await eventually(() => log.length >= 200, 20_000, 5);
        await workers.stop();
        const maxChildren = await sampler.stop();
        const paths = new Set(log.map((g) => g.path));
        // The bound applies until the first handoff's listing of the queue returns: allow a
        // couple of nodes for that, not one per 3 holders (that would be > 60).
        expect(paths.size).toBeLessThanOrEqual(3);
        expect(maxChildren).toBeLessThanOrEqual(1);
        expect(workers.state.maxInside).toBe(1);
        expect(workers.state.counter).toBe(log.length);
        expectIncreasing(log.map((g) => g.token));
        await a.drain();
        expect(await childrenOf(observer, path)).toEqual([]);
        expect(a.localQueueCount).toBe(0);
      } finally {
        workers.halt();
      }
    });
  });

  describe('giving up', () => {
    it('a local waiter whose waitMs runs out gets "timeout" while the others keep waiting', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-timeout');
      const mutex = new Mutex(e, 'cot', path);
      const holder = await mutex.acquire();
      const started = Date.now();
      const impatient = mutex.acquire({ waitMs: 300 });
      const patient = mutex.acquire({ waitMs: 20_000 });
      patient.catch(() => undefined);

      const error = await notAcquired(impatient);
      expect(error.reason).toBe('timeout');
      expect(error.lockName).toBe('cot');
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(Date.now() - started).toBeLessThan(5000);
      expect(holder.isHeld).toBe(true);
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      expect(e.localQueueCount).toBe(1);

      await holder.release();
      const next = await within(patient, 20_000, 'patient waiter');
      expect(next.path).toBe(holder.path);
      expect(next.fencingToken).toBe(holder.fencingToken + 1n);
      await next.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });

    it('a local waiter whose signal aborts gets "aborted" (with the reason as cause) while the others keep waiting', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-abort');
      const mutex = new Mutex(e, 'coa', path);
      const holder = await mutex.acquire();
      const controller = new AbortController();
      const aborting = mutex.acquire({ signal: controller.signal });
      const patient = mutex.acquire({ waitMs: 20_000 });
      patient.catch(() => undefined);

      const why = new Error('caller gave up');
      controller.abort(why);
      const error = await notAcquired(aborting);
      expect(error.reason).toBe('aborted');
      expect(error.cause).toBe(why);
      expect(holder.isHeld).toBe(true);
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);

      await holder.release();
      const next = await within(patient, 20_000, 'patient waiter');
      expect(next.path).toBe(holder.path);
      await next.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });

    it('try-once while a local caller holds (or waits) answers at once and creates no node', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-try');
      const mutex = new Mutex(e, 'cotry', path);
      const holder = await mutex.acquire();
      const before = await cversionOf(observer, path);

      let started = Date.now();
      expect(await mutex.tryAcquire()).toBeNull();
      expect(Date.now() - started).toBeLessThan(5000);
      started = Date.now();
      const error = await notAcquired(mutex.acquire({ waitMs: 0 }));
      expect(error.reason).toBe('timeout');
      expect(Date.now() - started).toBeLessThan(5000);
      // Another Mutex object of the same engine and path, with a local waiter queued too.
      const waiting = mutex.acquire({ waitMs: 20_000 });
      waiting.catch(() => undefined);
      started = Date.now();
      expect(await new Mutex(e, 'cotry-2', path).tryAcquire()).toBeNull();
      expect(Date.now() - started).toBeLessThan(5000);

      await e.drain();
      expect(await cversionOf(observer, path)).toBe(before); // no child was created (or deleted)
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);

      await holder.release();
      await (await within(waiting, 20_000, 'waiter')).release();
      // Free again: try-once takes it.
      const free = await mutex.tryAcquire();
      expect(free).not.toBeNull();
      await free!.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });

    it('when every local caller gives up while our node queues behind another process, the node is deleted', async () => {
      const x = await engine();
      const a = await engine();
      const observer = await connect();
      const path = uniquePath('co-giveup');
      const other = await new Mutex(x, 'gu', path).acquire();
      const mutex = new Mutex(a, 'gu', path);
      const controller = new AbortController();
      const timingOut = mutex.acquire({ waitMs: 2500 }); // gives up last
      const aborting = mutex.acquire({ signal: controller.signal });
      timingOut.catch(() => undefined);
      aborting.catch(() => undefined);
      const tryingOnce = mutex.tryAcquire(); // the process's node is busy queueing: at once
      const started = Date.now();
      expect(await tryingOnce).toBeNull();
      expect(Date.now() - started).toBeLessThan(1000);

      const children = await untilChildCount(observer, path, 2);
      const ours = await nodesOf(observer, path, a.connection.sessionId!);
      expect(ours).toHaveLength(1); // one node for both waiters
      expect(children).toContain(nameOf(other));
      expect(a.localQueueCount).toBe(1);

      controller.abort();
      expect((await notAcquired(aborting)).reason).toBe('aborted');
      await a.drain();
      expect(await nodesOf(observer, path, a.connection.sessionId!)).toEqual(ours); // still queued for the other waiter

      expect((await notAcquired(timingOut)).reason).toBe('timeout');
      await eventually(async () => (await childrenOf(observer, path)).join() === nameOf(other), 20_000, 20);
      await eventually(() => a.localQueueCount === 0, 20_000, 20);
      expect(other.isHeld).toBe(true);
      await other.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('losing the lock', () => {
    let proxy: TcpProxy | undefined;
    afterEach(async () => {
      await proxy?.close();
      proxy = undefined;
    });

    it('an expired session aborts the local holder; the local waiters get the lock in the new session with higher tokens', async () => {
      proxy = await TcpProxy.start(zkConnectString());
      const observer = await connect();
      const path = uniquePath('co-expire');
      const a = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const mutex = new Mutex(a, 'cx', path);
      const holder = await mutex.acquire();
      const signal = holder.signal;
      const oldSession = a.connection.sessionId!;
      await untilWatching(holder.path, oldSession); // the holder's watch on the node is armed
      const waiting = mutex.acquire({ waitMs: 30_000 });
      const waiting2 = mutex.acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      waiting2.catch(() => undefined);
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);

      const suspended = nextEvent(a.connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(oldSession, a.connection.session!.password);
      const lost = nextEvent(a.connection, 'lost');
      const connected = nextEvent(a.connection, 'connected');
      proxy.restore();
      expect((await lost)[0]).toBe('session-expired');
      const reason = await whenAborted(signal);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'session-expired', lockName: 'cx' });
      expect(holder.isHeld).toBe(false);
      const [newSession] = await connected;
      expect(newSession).not.toBe(oldSession);

      const next = await within(waiting, 20_000, 'local waiter after the session loss');
      expect(next.sessionId).toBe(newSession);
      expect(next.sessionId).not.toBe(holder.sessionId);
      expect(next.path).not.toBe(holder.path);
      expect(next.fencingToken > holder.fencingToken).toBe(true);
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await holder.release(); // a no-op for a lost lease: must not hand anything over
      expect(next.isHeld).toBe(true);

      await next.release();
      const third = await within(waiting2, 20_000, 'second local waiter');
      expect(third.sessionId).toBe(newSession);
      expect(third.path).toBe(next.path); // handed over locally in the new session
      expect(third.fencingToken).toBe(next.fencingToken + 1n);
      await third.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(a.localQueueCount).toBe(0);
    });

    it('the shared node deleted by someone aborts the current local holder ("node-deleted"); the next waiter gets a fresh node', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-deleted');
      const mutex = new Mutex(e, 'cd', path);
      const first = await mutex.acquire();
      const firstSignal = first.signal;
      const second = mutex.acquire({ waitMs: 20_000 });
      const third = mutex.acquire({ waitMs: 20_000 });
      third.catch(() => undefined);

      await first.release();
      const holder = await within(second, 20_000, 'second');
      expect(holder.path).toBe(first.path); // handed over locally
      const signal = holder.signal;
      await untilWatching(holder.path, e.connection.sessionId!);
      await observer.session!.delete(holder.path);

      const reason = await whenAborted(signal);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'node-deleted', lockName: 'cd' });
      expect(holder.isHeld).toBe(false);
      expect(firstSignal.aborted).toBe(false); // the earlier holder had released: not its loss

      const next = await within(third, 20_000, 'third');
      expect(next.path).not.toBe(holder.path);
      expect(next.fencingToken > holder.fencingToken).toBe(true);
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await holder.release(); // no-op
      expect(next.isHeld).toBe(true);
      await next.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });

    it('a node deleted while no holder looks at its signal is not handed to a local waiter while another process holds', async () => {
      // Beyond "the holder's signal aborts": a caller that is granted the lock after the node was
      // deleted must not share the lock with the process that legitimately took it meanwhile.
      const a = await engine();
      const b = await engine();
      const observer = await connect();
      const path = uniquePath('co-deleted-unwatched');
      const mutex = new Mutex(a, 'cdu', path);
      const holder = await mutex.acquire(); // nobody reads holder.signal
      let waiterGot: Lease | undefined;
      const waiting = mutex.acquire({ waitMs: 20_000 });
      waiting.then(
        (lease) => (waiterGot = lease),
        () => undefined,
      );

      await observer.session!.delete(holder.path); // someone breaks the lock
      // Both the local waiter (on a new node, if it heard of the deletion first) and another
      // process queue now; whoever is first, the two never hold at once and nobody gets the
      // deleted node.
      const otherWaiting = new Mutex(b, 'cdu', path).acquire({ waitMs: 20_000 });
      const first = await within(Promise.race([waiting, otherWaiting]), 20_000, 'first holder');
      expect(first.path).not.toBe(holder.path);
      await tick();
      await tick();
      if (first === waiterGot) {
        // A new node of ours was ahead of the other process's.
        const children = await childrenOf(observer, path);
        expect(children).not.toContain(nameOf(holder));
        await first.release();
        const other = await within(otherWaiting, 20_000, 'other process');
        expect(other.fencingToken > first.fencingToken).toBe(true);
        await holder.release(); // lost already: a no-op
        await other.release();
        expect(await childrenOf(observer, path)).toEqual([]);
        return;
      }
      const other = first;
      const children = await childrenOf(observer, path);
      expect(children).toContain(nameOf(other));
      expect(children).not.toContain(nameOf(holder));

      await holder.release();
      await tick();
      await tick();
      // A local handoff is synchronous: had the waiter been given the deleted node, it would hold by now.
      const granted = waiterGot as Lease | undefined;
      expect(
        granted && {
          heldWhileOtherProcessHolds: granted.isHeld && other.isHeld,
          onTheDeletedNode: granted.path === holder.path,
          tokenBelowOtherProcess: granted.fencingToken < other.fencingToken,
        },
      ).toBeUndefined();

      await other.release();
      const next = await within(waiting, 20_000, 'local waiter');
      expect(next.path).not.toBe(holder.path);
      expect(next.fencingToken > other.fencingToken).toBe(true);
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await next.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('leaseMs: each local holder has its own; when it runs out its signal aborts ("lease-expired") and the next local waiter holds', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-lease');
      const leaseMs = 600;
      const mutex = new Mutex(e, 'cl', path, { leaseMs });
      const first = await mutex.acquire();
      const firstAt = Date.now();
      const second = mutex.acquire({ waitMs: 20_000 });
      const third = mutex.acquire({ waitMs: 20_000 });
      third.catch(() => undefined);

      const reason = await whenAborted(first.signal);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'lease-expired', lockName: 'cl' });
      expect(Date.now() - firstAt).toBeGreaterThanOrEqual(leaseMs - 50);
      expect(first.isHeld).toBe(false);

      const next = await within(second, 20_000, 'second');
      const nextAt = Date.now();
      expect(next.path).toBe(first.path); // handed over locally
      expect(next.fencingToken).toBe(first.fencingToken + 1n);
      expect(next.isHeld).toBe(true);
      // Its own leaseMs, counted from its own grant.
      const nextReason = await whenAborted(next.signal);
      expect(nextReason).toMatchObject({ reason: 'lease-expired' });
      expect(Date.now() - nextAt).toBeGreaterThanOrEqual(leaseMs - 50);

      const last = await within(third, 20_000, 'third');
      expect(last.fencingToken > next.fencingToken).toBe(true);
      await first.release(); // no-ops for expired leases: must not free the current holder's node
      await next.release();
      expect(last.isHeld).toBe(true);
      expect(await childrenOf(observer, path)).toEqual([nameOf(last)]);
      await last.release();
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });
  });

  describe('engine shutdown', () => {
    it('rejects local waiters with "connection", ends the local holder (signal: "shutdown") and deletes the node', async () => {
      const e = await engine({}, { shutdownGraceMs: 100 });
      const observer = await connect();
      const path = uniquePath('co-shutdown');
      const mutex = new Mutex(e, 'cs', path);
      const holder = await mutex.acquire();
      const waiting = [mutex.acquire(), mutex.acquire({ waitMs: 20_000 })];
      for (const w of waiting) w.catch(() => undefined);
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);

      await within(e.shutdown(), 20_000, 'shutdown');
      for (const w of waiting) {
        const error = await notAcquired(w);
        expect(error.reason).toBe('connection');
        expect(error.cause).toBeInstanceOf(ConnectionClosedError);
      }
      expect(holder.isHeld).toBe(false);
      expect(holder.signal.reason).toMatchObject({ reason: 'shutdown' });
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
      expect((await notAcquired(mutex.acquire())).reason).toBe('connection');
    });

    it('rejects local waiters whose node still queues behind another process, and deletes that node', async () => {
      const x = await engine();
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-shutdown-queued');
      const other = await new Mutex(x, 'csq', path).acquire();
      const mutex = new Mutex(e, 'csq', path);
      const waiting = [mutex.acquire(), mutex.acquire({ waitMs: 20_000 })];
      for (const w of waiting) w.catch(() => undefined);
      await untilChildCount(observer, path, 2);

      await within(e.shutdown(), 20_000, 'shutdown');
      for (const w of waiting) expect((await notAcquired(w)).reason).toBe('connection');
      await eventually(async () => (await childrenOf(observer, path)).join() === nameOf(other), 20_000, 20);
      await eventually(() => e.localQueueCount === 0, 20_000, 20);
      await other.release();
    });
  });

  describe('re-entrancy', () => {
    it('re-enters inside withLock without a second node, while another async chain waits in memory', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('co-reentrant');
      const mutex = new Mutex(e, 're', path);
      const sameLock = new Mutex(e, 're-again', path);
      const events: string[] = [];
      let letGo!: () => void;
      const gate = new Promise<void>((resolve) => (letGo = resolve));
      let entered!: () => void;
      const inOuter = new Promise<void>((resolve) => (entered = resolve));

      const outer = mutex.withLock(async (lease) => {
        events.push('outer-in');
        entered();
        await gate;
        // A local waiter is queued: a nested try-once must still re-enter, not answer "taken".
        const inner = await mutex.acquire({ waitMs: 0 });
        expect(inner.path).toBe(lease.path);
        expect(inner.fencingToken).toBe(lease.fencingToken);
        const nested = await sameLock.withLock(async (n) => n.path, { waitMs: 0 });
        expect(nested).toBe(lease.path);
        await inner.release();
        expect(inner.isHeld).toBe(false);
        expect(lease.isHeld).toBe(true);
        expect(await childrenOf(observer, path)).toEqual([nameOf(lease)]);
        events.push('outer-out');
        return lease;
      });
      await within(inOuter, 20_000, 'outer');
      const before = await cversionOf(observer, path);
      let otherCversion: number | undefined;
      const other = mutex.withLock(async (lease) => {
        events.push('other-in');
        otherCversion = await cversionOf(observer, path);
        return lease;
      });
      expect(e.localQueueCount).toBe(1);
      letGo();
      const [o, t] = await within(Promise.all([outer, other]), 20_000, 'both chains');
      expect(events).toEqual(['outer-in', 'outer-out', 'other-in']);
      expect(t.path).toBe(o.path); // the waiting chain got the same node, handed over locally
      expect(t.fencingToken).toBe(o.fencingToken + 1n);
      // No child was created or deleted from the outer hold until the other chain held: no second node came and went.
      expect(otherCversion).toBe(before);
      expect(await childrenOf(observer, path)).toEqual([]);
      expect(e.localQueueCount).toBe(0);
    });
  });

  describe('option validation', () => {
    it.each([-1, 1.5, 70_000, '3', Number.NaN])('rejects maxLocalHandoffs: %p (mutex and engine)', async (value) => {
      const connection = await connect();
      const e = new LockEngine(connection);
      const path = uniquePath('opts');
      let thrown: unknown;
      try {
        new Mutex(e, 'opts', path, { maxLocalHandoffs: value as number });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidOptionError);
      expect(thrown).toMatchObject({ option: 'maxLocalHandoffs' });
      expect(() => new LockEngine(connection, { maxLocalHandoffs: value as number })).toThrow(InvalidOptionError);
    });

    it('rejects coalesce: "yes" (mutex and engine); accepts maxLocalHandoffs 0 and 65535', async () => {
      const connection = await connect();
      const e = new LockEngine(connection);
      const path = uniquePath('opts');
      let thrown: unknown;
      try {
        new Mutex(e, 'opts', path, { coalesce: 'yes' as unknown as boolean });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidOptionError);
      expect(thrown).toMatchObject({ option: 'coalesce' });
      expect(() => new LockEngine(connection, { coalesce: 'yes' as unknown as boolean })).toThrow(InvalidOptionError);

      expect(() => new Mutex(e, 'opts', path, { maxLocalHandoffs: 0 })).not.toThrow();
      expect(() => new Mutex(e, 'opts', path, { maxLocalHandoffs: 65_535 })).not.toThrow();
      expect(() => new LockEngine(connection, { maxLocalHandoffs: 65_535 })).not.toThrow();
    });
  });
});
