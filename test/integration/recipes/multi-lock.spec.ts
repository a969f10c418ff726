// MultiLock against a real ZooKeeper: canonical order (no deadlock between multi-locks over
// overlapping sets given in opposite orders), mixed member kinds, all-or-nothing with roll-back,
// one deadline for the whole set, and releases that go on past a failing member. Ports Curator's
// TestInterProcessMultiMutex (testSomeReleasesFail, testSomeLocksFailToLock).
import { MultiLock } from '../../../lib/core/recipes/multi-lock.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { LockNotAcquiredError, LockUsageError } from '../../../lib/core/errors.js';
import type { Lockable } from '../../../lib/core/recipes/lock-recipe.js';
import type { AcquireOptions } from '../../../lib/core/queue/acquire-options.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { LeaseGroup } from '../../../lib/core/leases/multi-lease.js';
import { LockContext } from '../../../lib/core/leases/lock-context.js';
import { overlaps, trackMaxChildren, stopChildCountTrackers } from '../../support/recipe-workers.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, uniquePath } from '../../support/helpers.js';
import { nameOf, notAcquired, within, untilChildCount, untilWatching, delay, sessionsWatching, sessionIdOf } from '../../support/lock-test-helpers.js';

const untilWatchedBy = (lease: Lease) => untilWatching(lease.path, lease.sessionId);

afterEach(closeAll);
afterEach(stopChildCountTrackers);
afterAll(closeAll);

/**
 * A member wrapping a real Mutex whose leases refuse to release (they throw, and keep the node),
 * or, with `failAcquire`, whose acquire throws after the mutex was taken and given back.
 */
class FaultyMember implements Lockable {
  readonly kind = 'faulty';

  constructor(
    private readonly inner: Mutex,
    private readonly fault: 'release' | 'acquire',
    /** Runs inside acquire, before it fails (to look at what the multi-lock holds by then). */
    private readonly beforeFailing: () => Promise<void> = async () => undefined,
  ) {}

  get name(): string {
    return this.inner.name;
  }
  get path(): string {
    return this.inner.path;
  }

  /** The inner leases handed out, to clean up what the faulty release left behind. */
  readonly innerLeases: Lease[] = [];
  acquireAttempts = 0;

  async acquire(options?: AcquireOptions): Promise<Lease> {
    this.acquireAttempts++;
    const inner = await this.inner.acquire(options);
    if (this.fault === 'acquire') {
      await this.beforeFailing();
      await inner.release();
      throw new Error(`acquire of ${this.path} failed`);
    }
    this.innerLeases.push(inner);
    const path = this.path;
    return {
      get name() {
        return inner.name;
      },
      get path() {
        return inner.path;
      },
      get fencingToken() {
        return inner.fencingToken;
      },
      get signal() {
        return inner.signal;
      },
      get sessionId() {
        return inner.sessionId;
      },
      get isHeld() {
        return inner.isHeld;
      },
      release: async () => {
        throw new Error(`release of ${path} failed`);
      },
      [Symbol.asyncDispose]: async () => {
        throw new Error(`release of ${path} failed`);
      },
    };
  }

  async tryAcquire(): Promise<Lease | null> {
    return this.acquire({ waitMs: 0 }).catch(() => null);
  }

  async withLock<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    const lease = await this.acquire(options);
    try {
      return await fn(lease);
    } finally {
      await lease.release();
    }
  }

  runHolding<T>(_lease: Lease, fn: () => T): T {
    return fn();
  }
}

describe('MultiLock against a real ZooKeeper', () => {
  describe('canonical order', () => {
    it('two multi-locks over overlapping sets, given in opposite orders on two connections, never deadlock and exclude each other (30 rounds each)', async () => {
      const [e1, e2] = await Promise.all([engine(), engine()]);
      const base = uniquePath('multi-order');
      const [p1, p2, p3] = [`${base}/one`, `${base}/two`, `${base}/three`];
      const forward = new MultiLock([new Mutex(e1, 'one', p1), new Mutex(e1, 'two', p2), new Mutex(e1, 'three', p3)]);
      const backward = new MultiLock([new Mutex(e2, 'three', p3), new Mutex(e2, 'two', p2)]);
      let inside = 0;
      let overlaps = 0;
      let rounds = 0;
      const loop = async (multi: MultiLock) => {
        for (let i = 0; i < 30; i++) {
          const lease = await multi.acquire();
          if (++inside > 1) overlaps++;
          rounds++;
          await delay(Math.random() * 3);
          inside--;
          await lease.release();
        }
      };
      await within(Promise.all([loop(forward), loop(backward)]), 90_000, 'both multi-lock loops (a deadlock never ends)');
      expect(rounds).toBe(60);
      expect(overlaps).toBe(0);
    }, 120_000);

    it('takes members in path order whatever order they are given in (the lease group lists them so)', async () => {
      const e = await engine();
      const base = uniquePath('multi-sorted');
      const multi = new MultiLock([new Mutex(e, 'c', `${base}/c`), new Mutex(e, 'a', `${base}/a`), new Mutex(e, 'b', `${base}/b`)]);
      expect(multi.members.map((m) => m.path)).toEqual([`${base}/a`, `${base}/b`, `${base}/c`]);
      const group = (await multi.acquire()) as LeaseGroup;
      expect(group.leases.map((l) => l.path.slice(0, l.path.lastIndexOf('/')))).toEqual([`${base}/a`, `${base}/b`, `${base}/c`]);
      await group.release();
    });
  });

  describe('mixed members', () => {
    it('acquires a mutex, a write lock and a semaphore lease together, and one release() frees them all', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const base = uniquePath('multi-mixed');
      const [mutexPath, rwPath, semPath] = [`${base}/m`, `${base}/rw`, `${base}/s`];
      const multi = new MultiLock([
        new Semaphore(e, 'sem', semPath, { permits: 2 }),
        new ReadWriteLock(e, 'rw', rwPath).write,
        new Mutex(e, 'mutex', mutexPath),
      ]);
      const group = (await multi.acquire({ waitMs: 10_000 })) as LeaseGroup;
      expect(group).toBeInstanceOf(LeaseGroup);
      expect(group.leases).toHaveLength(3);
      expect(await childrenOf(observer, mutexPath)).toHaveLength(1);
      expect(await childrenOf(observer, rwPath)).toEqual([expect.stringMatching(/-__WRIT__\d{10}$/)]);
      expect(await childrenOf(observer, `${semPath}/leases`)).toHaveLength(1);

      // Held as each kind is held: the mutex and the write lock are taken, one permit is left.
      expect(await new Mutex(other, 'mutex', mutexPath).tryAcquire()).toBeNull();
      expect(await new ReadWriteLock(other, 'rw', rwPath).read.tryAcquire()).toBeNull();
      const permit = await new Semaphore(other, 'sem', semPath, { permits: 2 }).tryAcquire();
      expect(permit).not.toBeNull();
      await permit!.release();
      await other.drain();

      await group.release();
      expect(group.isHeld).toBe(false);
      expect(await childrenOf(observer, mutexPath)).toEqual([]);
      expect(await childrenOf(observer, rwPath)).toEqual([]);
      expect(await childrenOf(observer, `${semPath}/leases`)).toEqual([]);
    });

    it('inside multi.withLock each re-entrant member counts as held by the call chain (a nested acquire re-enters)', async () => {
      const e = await engine();
      const observer = await connect();
      const base = uniquePath('multi-reenter');
      const mutex = new Mutex(e, 'm', `${base}/m`);
      const rw = new ReadWriteLock(e, 'rw', `${base}/rw`);
      await new MultiLock([mutex, rw.write]).withLock(async (group) => {
        const nested = await mutex.acquire({ waitMs: 2000 });
        expect(nested.path).toBe((group as LeaseGroup).leases[0]!.path);
        await nested.release();
        const read = await rw.read.acquire({ waitMs: 2000 }); // a downgrade: the write lock is ours
        expect(nameOf(read).slice(-10)).toBe(nameOf((group as LeaseGroup).leases[1]!).slice(-10));
        await read.release();
        expect(await childrenOf(observer, `${base}/m`)).toHaveLength(1);
      });
      expect(await childrenOf(observer, `${base}/m`)).toEqual([]);
      expect(await childrenOf(observer, `${base}/rw`)).toEqual([]);
    });
  });

  describe('all or nothing', () => {
    it('when a later member is held elsewhere, the acquire times out and gives back the member it had taken', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const base = uniquePath('multi-rollback');
      const [pathA, pathB] = [`${base}/a`, `${base}/b`];
      const heldB = await new Mutex(other, 'b', pathB).acquire();
      const multi = new MultiLock([new Mutex(e, 'b', pathB), new Mutex(e, 'a', pathA)]);

      const nodesOfA = trackMaxChildren(observer, pathA);
      const started = Date.now();
      const error = await notAcquired(multi.acquire({ waitMs: 500 }));
      const waited = Date.now() - started;
      expect(error.reason).toBe('timeout');
      expect(error.lockName).toBe('b');
      expect(waited).toBeGreaterThanOrEqual(450);
      expect(waited).toBeLessThan(5000);
      expect(await nodesOfA.stop()).toBe(1); // A was taken while B was awaited
      await e.drain();
      expect(await childrenOf(observer, pathA)).toEqual([]);
      expect(await childrenOf(observer, pathB)).toEqual([nameOf(heldB)]);
      await heldB.release();
    });

    it('testSomeLocksFailToLock: a member whose acquire throws fails the whole acquire, and the member taken before it is given back', async () => {
      const e = await engine();
      const observer = await connect();
      const base = uniquePath('multi-acquire-throws');
      let nodesOfAWhenBFailed: string[] | undefined;
      const bad = new FaultyMember(new Mutex(e, 'b', `${base}/b`), 'acquire', async () => {
        nodesOfAWhenBFailed = await childrenOf(observer, `${base}/a`);
      });
      const multi = new MultiLock([bad, new Mutex(e, 'a', `${base}/a`)]);
      await expect(multi.acquire({ waitMs: 5000 })).rejects.toThrow(`acquire of ${base}/b failed`);
      expect(bad.acquireAttempts).toBe(1);
      expect(nodesOfAWhenBFailed).toHaveLength(1); // A was held when B was tried
      await e.drain();
      expect(await childrenOf(observer, `${base}/a`)).toEqual([]);
      expect(await childrenOf(observer, `${base}/b`)).toEqual([]);
    });

    it('tryAcquire() returns null when one member is held elsewhere, and leaves no node', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const base = uniquePath('multi-try');
      const heldB = await new Mutex(other, 'b', `${base}/b`).acquire();
      const multi = new MultiLock([new Mutex(e, 'a', `${base}/a`), new Mutex(e, 'b', `${base}/b`), new Mutex(e, 'c', `${base}/c`)]);
      const started = Date.now();
      expect(await multi.tryAcquire()).toBeNull();
      expect(Date.now() - started).toBeLessThan(2000);
      await e.drain();
      expect(await childrenOf(observer, `${base}/a`)).toEqual([]);
      expect(await childrenOf(observer, `${base}/b`)).toEqual([nameOf(heldB)]);
      expect(await childrenOf(observer, `${base}/c`)).toEqual([]);
      await heldB.release();
    });

    it('aborting while waiting for a later member rejects with "aborted" and gives back the members taken', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const base = uniquePath('multi-abort');
      const heldB = await new Mutex(other, 'b', `${base}/b`).acquire();
      const multi = new MultiLock([new Mutex(e, 'a', `${base}/a`), new Mutex(e, 'b', `${base}/b`)]);
      const controller = new AbortController();
      const waiting = multi.acquire({ signal: controller.signal });
      waiting.catch(() => undefined);
      await untilChildCount(observer, `${base}/b`, 2); // A taken, queued on B
      controller.abort(new Error('caller gave up'));
      const error = await notAcquired(waiting);
      expect(error.reason).toBe('aborted');
      await e.drain();
      expect(await childrenOf(observer, `${base}/a`)).toEqual([]);
      expect(await childrenOf(observer, `${base}/b`)).toEqual([nameOf(heldB)]);
      await heldB.release();
    });
  });

  describe('one deadline for the whole set', () => {
    it('members freed at 400 ms and 1200 ms: an acquire with waitMs 1000 fails at about 1000 ms (each member does not get its own 1000 ms)', async () => {
      const e = await engine();
      const other = await engine();
      const observer = await connect();
      const base = uniquePath('multi-deadline');
      const [pathA, pathB] = [`${base}/a`, `${base}/b`];
      const heldA = await new Mutex(other, 'a', pathA).acquire();
      const heldB = await new Mutex(other, 'b', pathB).acquire();
      const multi = new MultiLock([new Mutex(e, 'a', pathA), new Mutex(e, 'b', pathB)]);

      const started = Date.now();
      // The other client's schedule: A at 400 ms, B at 1200 ms.
      const releaseA = delay(400).then(() => heldA.release());
      const releaseB = delay(1200).then(() => heldB.release());
      const error = await notAcquired(multi.acquire({ waitMs: 1000 }));
      const waited = Date.now() - started;
      expect(error.reason).toBe('timeout');
      expect(waited).toBeGreaterThan(900);
      expect(waited).toBeLessThan(1000 + 800); // well before 400 + 1000 (a fresh wait per member)
      await Promise.all([releaseA, releaseB]);
      await e.drain();
      expect(await childrenOf(observer, pathA)).toEqual([]);
      expect(await childrenOf(observer, pathB)).toEqual([]);
    });
  });

  describe('release', () => {
    it('testSomeReleasesFail: a member whose release throws does not stop the others; release() rejects with its error', async () => {
      const e = await engine();
      const observer = await connect();
      const base = uniquePath('multi-release-fails');
      const bad = new FaultyMember(new Mutex(e, 'b', `${base}/b`), 'release');
      const multi = new MultiLock([new Mutex(e, 'c', `${base}/c`), bad, new Mutex(e, 'a', `${base}/a`)]);
      const group = (await multi.acquire({ waitMs: 5000 })) as LeaseGroup;
      expect(group.leases).toHaveLength(3);

      await expect(group.release()).rejects.toThrow(`release of ${base}/b failed`);
      expect(await childrenOf(observer, `${base}/a`)).toEqual([]);
      expect(await childrenOf(observer, `${base}/c`)).toEqual([]);
      // The faulty member kept its node, as its release said.
      expect(await childrenOf(observer, `${base}/b`)).toEqual([nameOf(bad.innerLeases[0]!)]);
      await bad.innerLeases[0]!.release();
    });

    it('withLock surfaces the release failure too, after releasing the other members', async () => {
      const e = await engine();
      const observer = await connect();
      const base = uniquePath('multi-withlock-release-fails');
      const bad = new FaultyMember(new Mutex(e, 'b', `${base}/b`), 'release');
      const multi = new MultiLock([new Mutex(e, 'a', `${base}/a`), bad]);
      await expect(multi.withLock(() => 'done', { waitMs: 5000 })).rejects.toThrow(`release of ${base}/b failed`);
      expect(await childrenOf(observer, `${base}/a`)).toEqual([]);
      await bad.innerLeases[0]!.release();
      expect(await exists(observer, bad.innerLeases[0]!.path)).toBe(false);
    });
  });

  describe('one member lost', () => {
    it('the group is no longer held once one member is lost: isHeld false, signal aborted', async () => {
      const e = await engine();
      const observer = await connect();
      const base = uniquePath('multi-member-lost');
      const multi = new MultiLock([new Mutex(e, 'a', `${base}/a`, { coalesce: false }), new Mutex(e, 'b', `${base}/b`, { coalesce: false })]);
      const group = (await multi.acquire()) as LeaseGroup;
      const signal = group.signal;
      const [a, b] = group.leases;
      await eventually(async () => (await observer.session!.exists(b!.path)) !== null, 5000, 20);
      await untilWatchedBy(b!);
      await observer.session!.delete(b!.path);
      await eventually(() => signal.aborted, 10_000, 20);
      expect({ group: group.isHeld, a: a!.isHeld, b: b!.isHeld }).toEqual({ group: false, a: true, b: false });
      await group.release();
      expect(await childrenOf(observer, `${base}/a`)).toEqual([]);
    });

    /**
     * A is taken, B is awaited (held by `other`); meanwhile A's node is deleted by a foreign client
     * and a third client takes A. Then B is let go.
     */
    async function loseFirstWhileWaitingForSecond(label: string) {
      const [e, other, thief] = await Promise.all([engine(), engine(), engine()]);
      const observer = await connect();
      const base = uniquePath(label);
      const [pathA, pathB] = [`${base}/a`, `${base}/b`];
      const heldB = await new Mutex(other, 'b', pathB, { coalesce: false }).acquire();
      const multi = new MultiLock([new Mutex(e, 'a', pathA, { coalesce: false }), new Mutex(e, 'b', pathB, { coalesce: false })]);
      return {
        multi,
        observer,
        pathA,
        async loseA(): Promise<{ thiefLease: Lease; deleted: string }> {
          const [nodeA] = await untilChildCount(observer, pathA, 1);
          await untilChildCount(observer, pathB, 2); // A taken, queued on B
          // Give the group a moment to arm its watch on A (the old code never does).
          await eventually(async () => (await sessionsWatching(`${pathA}/${nodeA}`)).has(sessionIdOf(e.connection.sessionId!)), 2000, 20).catch(() => undefined);
          await observer.session!.delete(`${pathA}/${nodeA}`);
          const thiefLease = await new Mutex(thief, 'a', pathA, { coalesce: false }).acquire({ waitMs: 10_000 });
          await heldB.release();
          return { thiefLease, deleted: nodeA! };
        },
      };
    }

    it('a member lost while a later one is awaited: the acquire does not resolve with it, waits for it again, and resolves once every member is held', async () => {
      const { multi, observer, loseA } = await loseFirstWhileWaitingForSecond('multi-lost-while-waiting');
      let settled = false;
      const acquiring = multi.acquire({ waitMs: 30_000 }).finally(() => (settled = true));
      acquiring.catch(() => undefined);
      const { thiefLease, deleted } = await loseA();
      await delay(1500);
      expect(settled).toBe(false); // A is another client's now
      await thiefLease.release();
      const group = (await within(acquiring, 20_000, 'the group once A is free')) as LeaseGroup;
      expect(group.isHeld).toBe(true);
      expect(nameOf(group.leases[0]!)).not.toBe(deleted);
      for (const lease of group.leases) expect(await exists(observer, lease.path)).toBe(true);
      await group.release();
    });

    it('a member lost while a later one is awaited, and not free again before the deadline: rejects with LockNotAcquiredError and gives back what it took', async () => {
      const { multi, observer, loseA, pathA } = await loseFirstWhileWaitingForSecond('multi-lost-deadline');
      const acquiring = multi.acquire({ waitMs: 4000 });
      acquiring.catch(() => undefined);
      const { thiefLease } = await loseA();
      const error = await notAcquired(acquiring);
      expect(error.reason).toBe('timeout');
      expect(await childrenOf(observer, pathA)).toEqual([nameOf(thiefLease)]);
      await thiefLease.release();
    });

    it('withLock does not run the function with a group whose member was lost while a later one was awaited', async () => {
      const { multi, observer, loseA } = await loseFirstWhileWaitingForSecond('multi-lost-withlock');
      const runs: { held: boolean[]; nodes: boolean[] }[] = [];
      const running = multi.withLock(
        async (group) => {
          const leases = (group as LeaseGroup).leases;
          runs.push({ held: leases.map((l) => l.isHeld), nodes: await Promise.all(leases.map((l) => exists(observer, l.path))) });
        },
        { waitMs: 30_000 },
      );
      running.catch(() => undefined);
      const { thiefLease } = await loseA();
      await delay(1500);
      expect(runs).toEqual([]); // A is another client's now
      await thiefLease.release();
      await within(running, 20_000, 'withLock once A is free');
      expect(runs).toEqual([{ held: [true, true], nodes: [true, true] }]);
    });

    it('LockContext.current() inside withLock is the group: its name, signal and first member\'s fencing token', async () => {
      const e = await engine();
      const base = uniquePath('multi-context');
      const multi = new MultiLock([new Mutex(e, 'b', `${base}/b`), new Mutex(e, 'a', `${base}/a`)]);
      const seen = await multi.withLock((group) => {
        const current = LockContext.current()!;
        return { name: current.name, token: current.fencingToken, same: current === group, first: (group as LeaseGroup).leases[0]!.path };
      });
      expect(seen).toEqual({ name: 'a + b', token: expect.any(BigInt), same: true, first: expect.stringContaining(`${base}/a/`) });
    });
  });

  describe('usage errors', () => {
    it('refuses an empty member list with LockUsageError', async () => {
      expect(() => new MultiLock([])).toThrow(LockUsageError);
      expect(() => new MultiLock(undefined as never)).toThrow(LockUsageError);
    });

    it('refuses a path given twice with LockUsageError (two mutexes, or both halves of one read-write lock)', async () => {
      const [e1, e2] = await Promise.all([engine(), engine()]);
      const path = uniquePath('multi-dup');
      expect(() => new MultiLock([new Mutex(e1, 'x', path), new Mutex(e2, 'x', path)])).toThrow(LockUsageError);
      const rw = new ReadWriteLock(e1, 'rw', `${path}-rw`);
      expect(() => new MultiLock([rw.read, rw.write])).toThrow(LockUsageError);
      expect(() => new MultiLock([new Mutex(e1, 'x', path), new Semaphore(e1, 'x', path, { permits: 2 })])).toThrow(LockUsageError);
    });
  });
});
