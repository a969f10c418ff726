import { hostname } from 'node:os';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { LockContext } from '../../../lib/core/leases/lock-context.js';
import { ConnectionClosedError, LockLostError, LockNotAcquiredError } from '../../../lib/core/errors.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { fourLetter } from '../../support/zk-server.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, uniquePath, zkConnectString } from '../../support/helpers.js';
import { nameOf, notAcquired, sessionIdOf, sessionsWatching, delay, whenAborted } from '../../support/lock-test-helpers.js';

// Many tests open several sessions: close them after each test so they do not pile up.
afterEach(closeAll);
afterAll(closeAll);

/** `_c_` + a v4 UUID (36 characters) + `-lock-` + the server's 10-digit sequence. */
const NODE_NAME = /^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-\d{10}$/;

/** Resolves with the signal's reason once it aborts. */
/** Polls the children of `path` until there are `count` of them; returns them. */
async function untilChildCount(observer: ZkConnection, path: string, count: number): Promise<string[]> {
  let children: string[] = [];
  await eventually(async () => (children = await childrenOf(observer, path)).length === count, 20_000, 20);
  return children;
}

describe('Mutex against a real ZooKeeper', () => {
  describe('uncontended', () => {
    it('acquires a Curator-layout node holding JSON holder info, and deletes it on release', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('mutex');
      const mutex = new Mutex(e, 'orders', path);

      const before = Date.now();
      const lease = await mutex.acquire();
      expect(lease.name).toBe('orders');
      expect(lease.path.startsWith(`${path}/`)).toBe(true);
      expect(nameOf(lease)).toMatch(NODE_NAME);
      expect(lease.isHeld).toBe(true);
      expect(lease.sessionId).toBe(e.connection.sessionId);
      expect(typeof lease.fencingToken).toBe('bigint');
      expect(await childrenOf(observer, path)).toEqual([nameOf(lease)]);

      const { data, stat } = await observer.session!.getData(lease.path);
      expect(sessionIdOf(stat.ephemeralOwner)).toBe(sessionIdOf(e.connection.sessionId!));
      const info = JSON.parse(data.toString('utf8')) as Record<string, unknown>;
      expect(info).toMatchObject({ host: hostname(), pid: process.pid, app: 'jest' });
      expect(typeof info.createdAt).toBe('string');
      const createdAt = Date.parse(info.createdAt as string);
      expect(createdAt).toBeGreaterThanOrEqual(before - 1000);
      expect(createdAt).toBeLessThanOrEqual(Date.now() + 1000);

      await lease.release();
      expect(lease.isHeld).toBe(false);
      expect(await exists(observer, lease.path)).toBe(false);
      expect(await childrenOf(observer, path)).toEqual([]);

      // Releasing twice is a no-op, and the lock is free for the next acquire.
      await expect(lease.release()).resolves.toBeUndefined();
      const again = await mutex.acquire({ waitMs: 0 });
      expect(again.path).not.toBe(lease.path);
      await again.release();
    });

    it('releases when disposed (Symbol.asyncDispose), and at the end of an `await using` block', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('using');
      const mutex = new Mutex(e, 'using', path);

      // Jest's vm realm on Node 20 has no Symbol.asyncDispose (Node's main realm does): the library
      // and this test share the realm, so index with whatever the realm has.
      const lease = await mutex.acquire();
      const dispose = (lease as unknown as Record<PropertyKey, unknown>)[Symbol.asyncDispose as PropertyKey];
      expect(typeof dispose).toBe('function');
      await (dispose as () => Promise<void>).call(lease);
      expect(lease.isHeld).toBe(false);
      expect(await exists(observer, lease.path)).toBe(false);

      if (typeof Symbol.asyncDispose === 'symbol') {
        let held: Lease | undefined;
        {
          await using scoped = await mutex.acquire();
          held = scoped;
          expect(await exists(observer, scoped.path)).toBe(true);
        }
        expect(held.isHeld).toBe(false);
        expect(await exists(observer, held.path)).toBe(false);
      }
    });
  });

  describe('try-once, timeout and abort', () => {
    it('tryAcquire() on a held lock returns null promptly and leaves no node', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('try');
      const holder = await new Mutex(holderEngine, 'try', path).acquire();

      const started = Date.now();
      expect(await new Mutex(other, 'try', path).tryAcquire()).toBeNull();
      expect(Date.now() - started).toBeLessThan(2000);
      await other.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      await holder.release();
    });

    it('acquire({ waitMs: 0 }) on a held lock throws LockNotAcquiredError(timeout) promptly and leaves no node', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('try0');
      const holder = await new Mutex(holderEngine, 'try0', path).acquire();

      const started = Date.now();
      const error = await notAcquired(new Mutex(other, 'try0', path).acquire({ waitMs: 0 }));
      expect(Date.now() - started).toBeLessThan(2000);
      expect(error.reason).toBe('timeout');
      expect(error.lockName).toBe('try0');
      await other.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      await holder.release();
    });

    it('gives up after waitMs with reason "timeout" and deletes its node', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('timeout');
      const holder = await new Mutex(holderEngine, 'timeout', path).acquire();

      const started = Date.now();
      const error = await notAcquired(new Mutex(other, 'timeout', path).acquire({ waitMs: 500 }));
      const waited = Date.now() - started;
      expect(error.reason).toBe('timeout');
      expect(waited).toBeGreaterThanOrEqual(450);
      expect(waited).toBeLessThan(5000);
      await other.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      await holder.release();
    });

    it('gives up with reason "aborted" when the signal aborts while waiting, and deletes its node', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('abort');
      const holder = await new Mutex(holderEngine, 'abort', path).acquire();

      const controller = new AbortController();
      const waiting = new Mutex(other, 'abort', path).acquire({ signal: controller.signal });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2); // the waiter is queued
      const why = new Error('caller gave up');
      controller.abort(why);
      const error = await notAcquired(waiting);
      expect(error.reason).toBe('aborted');
      expect(error.cause).toBe(why);
      await other.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      await holder.release();
    });

    it('rejects at once with reason "aborted" for an already-aborted signal, creating nothing', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('preaborted');
      const error = await notAcquired(new Mutex(e, 'pre', path).acquire({ signal: AbortSignal.abort() }));
      expect(error.reason).toBe('aborted');
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('ordering and exclusion', () => {
    it('hands the lock to queued contenders strictly in arrival order (kazoo test_lock)', async () => {
      const observer = await connect();
      const path = uniquePath('fifo');
      const holder = await new Mutex(await engine(), 'fifo', path).acquire();

      const order: number[] = [];
      const nodes: string[] = [];
      const pending: Promise<Lease>[] = [];
      for (let i = 0; i < 5; i++) {
        const before = new Set(await childrenOf(observer, path));
        const acquiring = new Mutex(await engine(), 'fifo', path).acquire();
        acquiring.then(
          () => order.push(i),
          () => undefined,
        );
        pending.push(acquiring);
        const after = await untilChildCount(observer, path, i + 2);
        nodes.push(after.find((c) => !before.has(c))!);
      }
      // The queue, sorted by sequence, is the holder then the contenders in arrival order.
      const sequences = nodes.map((n) => Number(n.slice(-10)));
      expect([...sequences].sort((a, b) => a - b)).toEqual(sequences);
      expect(order).toEqual([]);

      await holder.release();
      for (let i = 0; i < 5; i++) {
        const lease = await pending[i]!;
        expect(order).toEqual([...Array(i + 1).keys()]);
        expect(nameOf(lease)).toBe(nodes[i]);
        expect(await childrenOf(observer, path)).toHaveLength(5 - i);
        await lease.release();
      }
      expect(order).toEqual([0, 1, 2, 3, 4]);
    });

    it('lets exactly one of 20 concurrent tryAcquire calls on separate connections win', async () => {
      const observer = await connect();
      const path = uniquePath('many');
      const engines = await Promise.all(Array.from({ length: 20 }, () => engine()));
      const results = await Promise.all(engines.map((e) => new Mutex(e, 'many', path).tryAcquire()));
      const winners = results.filter((r): r is Lease => r !== null);
      expect(winners).toHaveLength(1);
      await Promise.all(engines.map((e) => e.drain()));
      expect(await childrenOf(observer, path)).toEqual([nameOf(winners[0]!)]);
      await winners[0]!.release();
    });

    it('lets exactly one of 20 concurrent tryAcquire calls on ONE engine win', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('many1');
      const mutex = new Mutex(e, 'many1', path);
      const results = await Promise.all(Array.from({ length: 20 }, () => mutex.tryAcquire()));
      const winners = results.filter((r): r is Lease => r !== null);
      expect(winners).toHaveLength(1);
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(winners[0]!)]);
      await winners[0]!.release();
    });

    it('keeps mutual exclusion: 4 connections x 5 workers x 10 iterations', async () => {
      const path = uniquePath('excl');
      const engines = await Promise.all(Array.from({ length: 4 }, () => engine()));
      let inside = 0;
      let maxInside = 0;
      let count = 0;
      const worker = async (mutex: Mutex) => {
        for (let i = 0; i < 10; i++) {
          await mutex.withLock(async () => {
            inside++;
            maxInside = Math.max(maxInside, inside);
            await new Promise((r) => setImmediate(r));
            count++;
            inside--;
          });
        }
      };
      await Promise.all(engines.flatMap((e) => Array.from({ length: 5 }, () => worker(new Mutex(e, 'excl', path)))));
      expect(maxInside).toBe(1);
      expect(count).toBe(4 * 5 * 10);
      const observer = await connect();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('re-entrancy and LockContext', () => {
    it('re-enters at once inside withLock (acquire, withLock, another Mutex object), keeping the node until the outer release', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('reentrant');
      const mutex = new Mutex(e, 'r', path);
      const sameLock = new Mutex(e, 'r-again', path);

      let outerPath = '';
      await mutex.withLock(async (outer) => {
        outerPath = outer.path;
        const inner = await mutex.acquire({ waitMs: 0 });
        expect(inner.path).toBe(outer.path);
        const viaOther = await sameLock.tryAcquire();
        expect(viaOther?.path).toBe(outer.path);
        const nested = await mutex.withLock(async (n) => n.path, { waitMs: 0 });
        expect(nested).toBe(outer.path);

        await inner.release();
        await viaOther!.release();
        expect(inner.isHeld).toBe(false);
        expect(outer.isHeld).toBe(true);
        expect(await childrenOf(observer, path)).toEqual([nameOf(outer)]);
      });
      expect(await exists(observer, outerPath)).toBe(false);
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('does not re-enter a lock with the same path on another connection (another chroot, so another lock)', async () => {
      const root = await connect();
      const chroot = uniquePath('chroot');
      await root.session!.create('/it', Buffer.alloc(0), CreateMode.CONTAINER).catch(() => undefined);
      await root.session!.create(chroot, Buffer.alloc(0), CreateMode.CONTAINER); // reaped once the locks inside are gone
      const a = await engine();
      const b = await engine({ chroot });
      const path = '/it/same-path';
      const thirdParty = await engine({ chroot });

      await new Mutex(a, 'on-a', path).withLock(async () => {
        const onB = await new Mutex(b, 'on-b', path).acquire({ waitMs: 2000 });
        try {
          // A hold on connection A says nothing about the lock inside B's chroot.
          expect(onB.sessionId).toBe(b.connection.sessionId);
          expect(await childrenOf(root, `${chroot}${path}`)).toHaveLength(1);
          expect(await new Mutex(thirdParty, 'on-b', path).tryAcquire()).toBeNull();
        } finally {
          await onB.release();
        }
      });
    });

    it('makes two concurrent withLock calls from separate async chains of one process exclude each other', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('chains');
      // One node per caller (the coalesced case is in coalescing.spec.ts).
      const mutex = new Mutex(e, 'chains', path, { coalesce: false });
      const events: string[] = [];
      let letFirstGo!: () => void;
      const gate = new Promise<void>((r) => (letFirstGo = r));

      const first = mutex.withLock(async () => {
        events.push('first-in');
        await gate;
        events.push('first-out');
      });
      await eventually(() => events.includes('first-in'), 10_000, 10);
      const second = mutex.withLock(async () => {
        events.push('second-in');
      });
      await untilChildCount(observer, path, 2); // the second chain queued its own node
      expect(events).toEqual(['first-in']);
      letFirstGo();
      await Promise.all([first, second]);
      expect(events).toEqual(['first-in', 'first-out', 'second-in']);
    });

    it('with { reentrant: false } a nested acquire queues behind itself and times out', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('nonreentrant');
      const mutex = new Mutex(e, 'nr', path, { reentrant: false });
      await mutex.withLock(async (outer) => {
        const error = await notAcquired(mutex.acquire({ waitMs: 300 }));
        expect(error.reason).toBe('timeout');
        await e.drain();
        expect(await childrenOf(observer, path)).toEqual([nameOf(outer)]);
        expect(outer.isHeld).toBe(true);
      });
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('exposes the held lock through LockContext.current() inside withLock only', async () => {
      const e = await engine();
      const path = uniquePath('ctx');
      const innerPath = uniquePath('ctx-inner');
      expect(LockContext.current()).toBeUndefined();
      await new Mutex(e, 'ctx-lock', path).withLock(async (lease) => {
        const check = () => {
          const ctx = LockContext.current();
          expect(ctx).toBeDefined();
          expect(ctx!.name).toBe('ctx-lock');
          expect(ctx!.path).toBe(lease.path);
          expect(ctx!.fencingToken).toBe(lease.fencingToken);
          expect(ctx!.signal).toBe(lease.signal);
          expect(ctx!.signal.aborted).toBe(false);
        };
        check();
        await delay(5);
        check(); // still there after an await
        await new Mutex(e, 'ctx-inner', innerPath).withLock(async (inner) => {
          expect(LockContext.current()?.path).toBe(inner.path);
          expect(LockContext.current()?.name).toBe('ctx-inner');
        });
        check(); // the innermost is the outer lock again
      });
      expect(LockContext.current()).toBeUndefined();
    });
  });

  describe('fencing tokens and container parents', () => {
    it('issues strictly increasing fencing tokens across holders, also after the empty lock path was removed and re-created', async () => {
      const observer = await connect();
      const path = uniquePath('fence');
      const engines = await Promise.all(Array.from({ length: 3 }, () => engine()));
      const mutexes = engines.map((e) => new Mutex(e, 'fence', path));
      const tokens: bigint[] = [];

      // Successive holders, one connection after the other.
      for (let round = 0; round < 3; round++) {
        for (const mutex of mutexes) {
          const lease = await mutex.acquire();
          tokens.push(lease.fencingToken);
          await lease.release();
        }
      }
      // Contended: tokens recorded inside the critical section, in the order holders got it.
      await Promise.all(
        mutexes.flatMap((mutex) =>
          [0, 1, 2].map(() =>
            mutex.withLock(async (lease) => {
              tokens.push(lease.fencingToken);
              await new Promise((r) => setImmediate(r));
            }),
          ),
        ),
      );
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);

      // The empty lock path goes (ZooKeeper's container reaper does it, as the next test checks;
      // here the observer deletes it as the reaper would, so the test does not wait behind the
      // reaper's backlog of a whole suite's paths, at most 10 000 a minute). A node left behind
      // would make it NOTEMPTY. A new path gets a higher czxid.
      await eventually(async () => (await childrenOf(observer, path)).length === 0, 10_000, 50);
      await observer.session!.delete(path, -1).catch((error: { codeName?: string }) => {
        if (error.codeName !== 'NONODE') throw error; // the reaper was quicker
      });
      const after = await mutexes[0]!.acquire();
      expect(after.fencingToken > tokens[tokens.length - 1]!).toBe(true);
      expect(after.fencingToken >> 48n > tokens[0]! >> 48n).toBe(true); // a new parent (czxid)
      await after.release();
    });

    it('creates the lock path and its missing ancestors as containers that ZooKeeper reaps after use', async () => {
      const e = await engine();
      const observer = await connect();
      const base = uniquePath('ctr');
      const path = `${base}/a/b`;
      const lease = await new Mutex(e, 'ctr', path).acquire();
      expect(await exists(observer, base)).toBe(true);
      expect(await exists(observer, `${base}/a`)).toBe(true);
      await lease.release();

      await eventually(async () => !(await exists(observer, path)), 30_000, 200);
      await eventually(async () => !(await exists(observer, base)), 30_000, 200);
      expect(await childrenOf(observer, '/it')).not.toContain(base.slice('/it/'.length));
    });
  });

  describe('losing a held lock', () => {
    it('aborts lease.signal with "node-deleted" when someone else deletes the node', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('deleted');
      const lease = await new Mutex(e, 'deleted', path).acquire();
      const signal = lease.signal; // arms the watch on our own node
      const waiting = new Mutex(other, 'deleted', path).acquire({ waitMs: 20_000 });
      await untilChildCount(observer, path, 2);

      await observer.session!.delete(lease.path);
      const reason = await whenAborted(signal);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'node-deleted', lockName: 'deleted' });
      expect(lease.isHeld).toBe(false);
      await expect(lease.release()).resolves.toBeUndefined();

      const next = await waiting;
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await next.release();
    });

    it('with { leaseMs: 300 } releases itself: the signal aborts with "lease-expired" and a contender acquires', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('leasems');
      const started = Date.now();
      const lease = await new Mutex(e, 'leasems', path, { leaseMs: 300 }).acquire();
      const waiting = new Mutex(other, 'leasems', path).acquire({ waitMs: 20_000 });

      const reason = await whenAborted(lease.signal);
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'lease-expired' });
      expect(lease.isHeld).toBe(false);

      const next = await waiting;
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await expect(lease.release()).resolves.toBeUndefined();
      await next.release();
    });
  });

  describe('non-fair mode ({ fair: false })', () => {
    describe('under contention: 4 connections x 5 workers x 10 iterations', () => {
      const racers = 4 * 5;
      const iterations = 10;
      const deadlineMs = 20_000; // fair mode needs about 1 s for the same work
      const run = { inside: 0, maxInside: 0, count: 0, maxChildren: 0, maxSequence: 0, ms: 0, leftover: [] as string[] };

      beforeAll(async () => {
        const path = uniquePath('unfair');
        const observer = await connect();
        const engines = await Promise.all(Array.from({ length: 4 }, () => engine()));
        const deadline = AbortSignal.timeout(deadlineMs);
        let sampling = true;
        const sampler = (async () => {
          while (sampling) {
            run.maxChildren = Math.max(run.maxChildren, (await childrenOf(observer, path)).length);
            await delay(5);
          }
        })();
        const worker = async (mutex: Mutex) => {
          for (let i = 0; i < iterations && !deadline.aborted; i++) {
            await mutex
              .withLock(
                async (lease) => {
                  run.inside++;
                  run.maxInside = Math.max(run.maxInside, run.inside);
                  run.maxSequence = Math.max(run.maxSequence, Number(lease.path.slice(-10)));
                  await new Promise((r) => setImmediate(r));
                  run.count++;
                  run.inside--;
                },
                { signal: deadline },
              )
              .catch((error: unknown) => {
                if (!(error instanceof LockNotAcquiredError && error.reason === 'aborted')) throw error;
              });
          }
        };
        const started = Date.now();
        await Promise.all(engines.flatMap((e) => Array.from({ length: 5 }, () => worker(new Mutex(e, 'unfair', path, { fair: false })))));
        run.ms = Date.now() - started;
        sampling = false;
        await sampler;
        await Promise.all(engines.map((e) => e.drain()));
        run.leftover = await childrenOf(observer, path);
        await closeAll();
      }, deadlineMs + 30_000);

      it('keeps mutual exclusion, and waiters keep at most one transient node each', () => {
        expect(run.maxInside).toBe(1);
        expect(run.maxChildren).toBeLessThanOrEqual(racers);
        expect(run.leftover).toEqual([]);
      });

      it(`completes all acquisitions within ${deadlineMs / 1000} s, without churning through nodes`, () => {
        // A release wakes each other racer at most once (a herd of racers - 1 creates); allow slack
        // for retries. Sequence numbers count every node created under the path.
        const createsPerAcquisition = Math.round((run.maxSequence + 1) / Math.max(run.count, 1));
        expect({ acquisitions: run.count, createsPerAcquisitionWithinBound: createsPerAcquisition <= 2 * racers }).toEqual({
          acquisitions: racers * iterations,
          createsPerAcquisitionWithinBound: true,
        });
      });
    });

    it('waiters keep no node while they wait, and all of them get the lock in the end', async () => {
      const observer = await connect();
      const path = uniquePath('unfair-wait');
      const holder = await new Mutex(await engine(), 'uw', path).acquire();
      const waiterEngines = await Promise.all(Array.from({ length: 5 }, () => engine()));
      const waiterSessions = waiterEngines.map((e) => sessionIdOf(e.connection.sessionId!));
      const acquired: string[] = [];
      let inside = 0;
      let maxInside = 0;
      const done = waiterEngines.map((e) =>
        new Mutex(e, 'uw', path, { fair: false }).withLock(async (lease) => {
          inside++;
          maxInside = Math.max(maxInside, inside);
          acquired.push(lease.sessionId);
          await delay(10);
          inside--;
        }),
      );
      // Every waiter has stepped out of the queue and watches the holder's node.
      await eventually(async () => {
        const watching = await sessionsWatching(holder.path);
        return waiterSessions.every((s) => watching.has(s));
      }, 20_000, 50);
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);

      await holder.release();
      await Promise.all(done);
      expect(maxInside).toBe(1);
      expect(new Set(acquired.map(sessionIdOf))).toEqual(new Set(waiterSessions));
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('foreign children in the lock directory (Curator-compatible, CURATOR-43)', () => {
    it('is not blocked by a child "zzz" (sorts last) but is blocked by a child "0" (sorts first)', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('foreign');
      const mutex = new Mutex(e, 'foreign', path);
      const session = observer.session!;

      const first = await mutex.acquire(); // makes the lock directory
      await session.create(`${path}/zzz`, Buffer.alloc(0), CreateMode.PERSISTENT);
      await first.release();
      try {
        const withZzz = await mutex.acquire({ waitMs: 2000 });
        await session.create(`${path}/0`, Buffer.alloc(0), CreateMode.PERSISTENT);
        await withZzz.release();

        const error = await notAcquired(mutex.acquire({ waitMs: 500 }));
        expect(error.reason).toBe('timeout');
        await e.drain();
        expect((await childrenOf(observer, path)).sort()).toEqual(['0', 'zzz']);
      } finally {
        await session.delete(`${path}/0`).catch(() => undefined);
        await session.delete(`${path}/zzz`).catch(() => undefined);
      }
    });
  });

  describe('closing the connection', () => {
    it('rejects a waiting acquire with reason "connection" and removes its node', async () => {
      const observer = await connect();
      const path = uniquePath('close-wait');
      const holder = await new Mutex(await engine(), 'cw', path).acquire();
      const e = await engine();
      const waiting = new Mutex(e, 'cw', path).acquire();
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);

      await e.connection.close();
      const error = await notAcquired(waiting);
      expect(error.reason).toBe('connection');
      expect(error.cause).toBeInstanceOf(ConnectionClosedError);
      await untilChildCount(observer, path, 1);
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      await holder.release();
    });

    it('refuses an acquire on a closed connection with reason "connection" (and no unhandled rejection)', async () => {
      const e = await engine();
      await e.connection.close();
      const error = await notAcquired(new Mutex(e, 'closed', uniquePath('closed')).acquire());
      expect(error.reason).toBe('connection');
      expect(await new Mutex(e, 'closed', uniquePath('closed')).tryAcquire().catch((x: unknown) => x)).toBeInstanceOf(LockNotAcquiredError);
      await delay(50); // let a stray rejection surface inside this test
    });

    it('aborts a held lease\'s signal with "connection-closed"', async () => {
      const observer = await connect();
      const path = uniquePath('close-held');
      const e = await engine();
      const lease = await new Mutex(e, 'ch', path).acquire();
      const signal = lease.signal;

      await e.connection.close();
      const reason = await whenAborted(signal);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'connection-closed' });
      expect(lease.isHeld).toBe(false);
      await expect(lease.release()).resolves.toBeUndefined();
      await untilChildCount(observer, path, 0);
    });
  });
});
