import { jest } from '@jest/globals';
// FakeLockService (nestjs-zk-lock/testing): the in-memory LockService for users' unit tests must
// keep the real one's semantics within one process. These tests pin them down.
import diagnostics_channel from 'node:diagnostics_channel';
import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  InvalidLockNameError,
  InvalidOptionError,
  LockLostError,
  LockNotAcquiredError,
  LockUsageError,
} from '../../../lib/core/errors.js';
import { LockChannels } from '../../../lib/core/diagnostics.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { LockContext } from '../../../lib/core/leases/lock-context.js';
import { LeaseGroup } from '../../../lib/core/leases/multi-lease.js';
import { LockService } from '../../../lib/nest/lock.service.js';
import { WithLock } from '../../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../../lib/nest/zk-lock.module.js';
import { FakeLockService, FakeLockStore, ZkLockTestingModule } from '../../../lib/testing/index.js';

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Lets pending promise callbacks run. */
const settle = () => delay(0);

async function rejection(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    (value) => {
      throw new Error(`expected a rejection, got ${String(value)}`);
    },
    (error: unknown) => error,
  );
}

async function notAcquired(work: Promise<unknown>): Promise<LockNotAcquiredError> {
  const error = await rejection(work);
  expect(error).toBeInstanceOf(LockNotAcquiredError);
  return error as LockNotAcquiredError;
}

describe('FakeLockService', () => {
  let locks: FakeLockService;
  beforeEach(() => {
    locks = new FakeLockService();
  });

  it('is a LockService with the same path rules', () => {
    expect(locks).toBeInstanceOf(LockService);
    expect(locks.pathOf('orders')).toBe('/locks/orders');
    expect(locks.pathOf('/curator/x')).toBe('/curator/x');
    expect(new FakeLockService({ basePath: '/apps/a' }).pathOf('x')).toBe('/apps/a/x');
    expect(() => locks.mutex('')).toThrow(InvalidLockNameError);
    expect(() => locks.mutex('a//b')).toThrow(InvalidLockNameError);
    expect(() => new FakeLockService({ basePath: 'relative' })).toThrow(InvalidOptionError);
    expect(locks.state).toBe('connected');
  });

  describe('mutex', () => {
    it('excludes concurrent holders and serves waiters first come, first served', async () => {
      const order: string[] = [];
      const first = await locks.mutex('m').acquire();
      const waiters = ['a', 'b', 'c'].map((id) =>
        locks.withLock('m', async () => {
          order.push(`${id} in`);
          await delay(5);
          order.push(`${id} out`);
        }),
      );
      await settle();
      expect(order).toEqual([]);
      expect(locks.isLocked('m')).toBe(true);
      await first.release();
      await Promise.all(waiters);
      expect(order).toEqual(['a in', 'a out', 'b in', 'b out', 'c in', 'c out']);
      expect(locks.isLocked('m')).toBe(false);
    });

    it('gives strictly increasing fencing tokens to successive holders, also after the lock path went away', async () => {
      const tokens: bigint[] = [];
      // Each of these empties the lock path (a reaped container in ZooKeeper) before the next.
      for (let i = 0; i < 3; i++) tokens.push(await locks.withLock('fenced', (lease) => lease.fencingToken));
      const holder = await locks.mutex('fenced').acquire();
      const next = locks.mutex('fenced').acquire();
      await holder.release();
      const successor = await next;
      tokens.push(holder.fencingToken, successor.fencingToken);
      await successor.release();
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    });

    it('re-enters within withLock (same lease, counted) and excludes another call chain', async () => {
      await locks.withLock('r', async (outer) => {
        const inner = await locks.mutex('r').acquire({ waitMs: 0 });
        expect(inner.fencingToken).toBe(outer.fencingToken);
        expect(inner.path).toBe(outer.path);
        await inner.release();
        expect(outer.isHeld).toBe(true); // counted: the outer hold survives the inner release
        expect(locks.isLocked('r')).toBe(true);
      });
      expect(locks.isLocked('r')).toBe(false);
      // Two concurrent requests in one process exclude each other.
      const held = await locks.mutex('r').acquire();
      await notAcquired(locks.mutex('r').acquire({ waitMs: 0 }));
      await held.release();
    });

    it('does not re-enter with reentrant: false (a nested acquire waits like anyone)', async () => {
      await locks.mutex('nr', { reentrant: false }).withLock(async () => {
        const error = await notAcquired(locks.mutex('nr', { reentrant: false }).acquire({ waitMs: 0 }));
        expect(error.reason).toBe('timeout');
      });
    });

    it('times out, tries once, and gives up on abort with the real reasons and messages', async () => {
      const held = await locks.mutex('t').acquire();
      const timedOut = await notAcquired(locks.mutex('t').acquire({ waitMs: 20 }));
      expect(timedOut).toMatchObject({ reason: 'timeout', lockName: 't', message: 'Timed out waiting for lock "t"' });
      const once = await notAcquired(locks.mutex('t').acquire({ waitMs: 0 }));
      expect(once).toMatchObject({ reason: 'timeout', message: 'Lock "t" is held by another owner' });
      await expect(locks.mutex('t').tryAcquire()).resolves.toBeNull();

      const controller = new AbortController();
      const aborted = locks.mutex('t').acquire({ signal: controller.signal });
      controller.abort(new Error('client went away'));
      const error = await notAcquired(aborted);
      expect(error.reason).toBe('aborted');
      expect((error.cause as Error).message).toBe('client went away');

      // Nobody who gave up kept a place: the next acquirer gets the lock at once on release.
      await held.release();
      const next = await locks.mutex('t').tryAcquire();
      expect(next).not.toBeNull();
      await next!.release();
      // An already aborted signal fails even when the lock is free (as the real queue does).
      expect((await notAcquired(locks.mutex('t').acquire({ signal: AbortSignal.abort() }))).reason).toBe('aborted');
    });

    it('validates options like the real recipes', async () => {
      expect(() => locks.mutex('o', { leaseMs: 0 })).toThrow(InvalidOptionError);
      const bad = await rejection(locks.mutex('o').acquire({ waitMs: -1 }));
      expect(bad).toBeInstanceOf(InvalidOptionError);
      expect((bad as InvalidOptionError).option).toBe('waitMs');
      expect(await rejection(locks.mutex('o').acquire({ signal: 'x' as never }))).toBeInstanceOf(InvalidOptionError);
    });
  });

  describe('leases', () => {
    it('release is idempotent; await using releases; LockContext sees the lease', async () => {
      const lease = await locks.mutex('l').acquire();
      expect(lease.isHeld).toBe(true);
      expect(lease.path).toMatch(/^\/locks\/l\/_c_[0-9a-f-]{36}-lock-\d{10}$/);
      expect(lease.sessionId).toBe(locks.sessionId);
      await lease.release();
      await lease.release();
      expect(lease.isHeld).toBe(false);
      // Jest's vm realm on Node 20 has no Symbol.asyncDispose (Node's main realm does): index with
      // whatever the realm has, and use `await using` only where it exists.
      const disposable = await locks.mutex('l').acquire();
      await (disposable as unknown as Record<PropertyKey, () => Promise<void>>)[Symbol.asyncDispose as PropertyKey]!.call(disposable);
      expect(disposable.isHeld).toBe(false);
      if (typeof Symbol.asyncDispose === 'symbol') {
        {
          await using held = await locks.mutex('l').acquire();
          expect(held.isHeld).toBe(true);
          expect(locks.isLocked('l')).toBe(true);
        }
        expect(locks.isLocked('l')).toBe(false);
      }
      await locks.withLock('l', async (outer) => {
        const context = LockContext.current()!;
        expect(context).toMatchObject({ name: 'l', path: outer.path, fencingToken: outer.fencingToken });
        expect(context.signal.aborted).toBe(false);
      });
      expect(LockContext.current()).toBeUndefined();
    });

    it('leaseMs: the lease releases itself, its signal aborts with lease-expired and the next waiter gets the lock', async () => {
      const lease = await locks.mutex('lm', { leaseMs: 30 }).acquire();
      const next = locks.mutex('lm').acquire({ waitMs: 2000 });
      const reason = await new Promise<unknown>((resolve) => lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)));
      expect(reason).toBeInstanceOf(LockLostError);
      expect((reason as LockLostError).reason).toBe('lease-expired');
      expect(lease.isHeld).toBe(false);
      await (await next).release();
      await lease.release(); // no-op after the loss
    });

    it('expireSession: held leases are lost (session-expired), waiters get the lock', async () => {
      const lease = await locks.mutex('e').acquire();
      const other = new FakeLockService({ store: locks.store });
      const waiting = other.mutex('e').acquire();
      await locks.expireSession();
      expect(lease.signal.aborted).toBe(true);
      expect((lease.signal.reason as LockLostError).reason).toBe('session-expired');
      const got = await waiting;
      expect(got.sessionId).toBe(other.sessionId);
      await got.release();
    });
  });

  describe('semaphore', () => {
    it('lets `permits` holders in, queues the rest in order, and takes several permits all or none', async () => {
      const pool = locks.semaphore('pool', { permits: 2 });
      expect(pool.permits).toBe(2);
      const a = await pool.acquire();
      const b = await pool.acquire();
      expect(await notAcquired(pool.acquire({ waitMs: 0 }))).toMatchObject({ reason: 'timeout', lockName: 'pool' });
      const order: string[] = [];
      const c = pool.acquire().then((l) => (order.push('c'), l));
      const d = pool.acquire().then((l) => (order.push('d'), l));
      await a.release();
      await settle();
      expect(order).toEqual(['c']);
      await b.release();
      await settle();
      expect(order).toEqual(['c', 'd']);
      await (await c).release();
      await (await d).release();

      // Two permits at once; a third for 2 more times out and returns what it took.
      const two = await pool.acquire({ permits: 2 });
      expect(two).toBeInstanceOf(LeaseGroup);
      expect((two as LeaseGroup).leases).toHaveLength(2);
      expect(two.path).toMatch(/^\/locks\/pool\/leases\/_c_[0-9a-f-]{36}-lease-\d{10}$/);
      await two.release();
      const one = await pool.acquire();
      expect(await notAcquired(pool.acquire({ permits: 2, waitMs: 30 }))).toMatchObject({ reason: 'timeout' });
      const other = await pool.acquire({ waitMs: 0 }); // the partial lease was given back
      await other.release();
      await one.release();
      expect(locks.isLocked('pool')).toBe(false);
    });

    it('validates permits like the real semaphore and is not reentrant', async () => {
      expect(() => locks.semaphore('s', undefined as never)).toThrow(InvalidOptionError);
      expect(() => locks.semaphore('s', {} as never)).toThrow(InvalidOptionError);
      expect(() => locks.semaphore('s', { permits: 0 })).toThrow(InvalidOptionError);
      const bad = await rejection(locks.semaphore('s', { permits: 2 }).acquire({ permits: 3 }));
      expect((bad as InvalidOptionError).option).toBe('permits');
      const mutexLike = locks.semaphore('s1', { permits: 1 });
      await mutexLike.withLock(async () => {
        expect(await notAcquired(mutexLike.acquire({ waitMs: 0 }))).toMatchObject({ reason: 'timeout' });
      });
    });
  });

  describe('read-write lock', () => {
    it('readers share, a writer excludes everyone, and a reader queues behind a waiting writer', async () => {
      const rw = locks.readWriteLock('catalog');
      const r1 = await rw.read.acquire();
      const r2 = await rw.read.acquire({ waitMs: 0 }); // another chain: shares
      const events: string[] = [];
      const w = rw.write.acquire().then((l) => (events.push('writer'), l));
      await settle();
      const r3 = rw.read.acquire().then((l) => (events.push('late reader'), l));
      await settle();
      expect(events).toEqual([]);
      expect(await notAcquired(rw.read.acquire({ waitMs: 0 }))).toMatchObject({ reason: 'timeout' }); // no writer starvation
      await r1.release();
      await r2.release();
      const writer = await w;
      await settle();
      expect(events).toEqual(['writer']);
      await writer.release();
      await (await r3).release();
      expect(events).toEqual(['writer', 'late reader']);
    });

    it('allows a downgrade (ahead of queued writers) and refuses an upgrade with LockUsageError', async () => {
      const rw = locks.readWriteLock('doc');
      const trace: string[] = [];
      const otherProcess = new FakeLockService({ store: locks.store }).readWriteLock('doc');
      let queuedWriter: Promise<Lease> | undefined;
      await rw.write.withLock(async (writeLease) => {
        queuedWriter = otherProcess.write.acquire().then((l) => (trace.push('other writer'), l));
        await settle();
        await rw.read.withLock(async (readLease) => {
          expect(readLease.path.slice(-10)).toBe(writeLease.path.slice(-10)); // the writer's sequence
          trace.push('downgraded');
        });
      });
      await (await queuedWriter!).release();
      expect(trace).toEqual(['downgraded', 'other writer']);

      await rw.read.withLock(async () => {
        const error = await rejection(rw.write.acquire());
        expect(error).toBeInstanceOf(LockUsageError);
        expect((error as Error).message).toMatch(/upgrading would deadlock/);
      });
    });

    it('keeps the downgraded reader holding after the writer releases; a queued writer waits for it', async () => {
      const rw = locks.readWriteLock('doc2');
      const otherProcess = new FakeLockService({ store: locks.store }).readWriteLock('doc2');
      const write = await rw.write.acquire();
      const read = await rw.write.runHolding(write, () => rw.read.acquire());
      const queued = otherProcess.write.acquire();
      await write.release();
      await settle();
      expect(await notAcquired(otherProcess.write.acquire({ waitMs: 0 }))).toMatchObject({ reason: 'timeout' });
      expect(await notAcquired(otherProcess.read.acquire({ waitMs: 0 }))).toMatchObject({ reason: 'timeout' }); // behind the queued writer
      await read.release();
      await (await queued).release();
    });
  });

  describe('multi-lock', () => {
    it('takes all or none under one deadline, and releases what it took on failure', async () => {
      const both = locks.multiLock(['account:2', 'account:1']);
      expect(both.members.map((m) => m.path)).toEqual(['/locks/account:1', '/locks/account:2']);
      await both.withLock(async () => {
        expect(locks.isLocked('account:1') && locks.isLocked('account:2')).toBe(true);
      });
      const blocker = await new FakeLockService({ store: locks.store }).mutex('account:2').acquire();
      expect(await notAcquired(both.acquire({ waitMs: 20 }))).toMatchObject({ reason: 'timeout' });
      expect(locks.isLocked('account:1')).toBe(false); // given back
      await blocker.release();
      const rw = locks.readWriteLock('ledger');
      const pool = locks.semaphore('workers', { permits: 1 });
      const group = await locks.multiLock(['account:1', rw.write, pool]).acquire({ waitMs: 0 });
      expect(locks.isLocked('ledger') && locks.isLocked('workers')).toBe(true);
      await group.release();
      expect(locks.isLocked('ledger') || locks.isLocked('workers') || locks.isLocked('account:1')).toBe(false);
    });
  });

  describe('several fakes on one store (several instances of an application)', () => {
    it('exclude each other, and re-entrancy does not cross them', async () => {
      const store = new FakeLockStore();
      const one = new FakeLockService({ store, instance: 'one' });
      const two = new FakeLockService({ store, instance: 'two' });
      await one.withLock('job', async () => {
        expect(await notAcquired(two.mutex('job').acquire({ waitMs: 0 }))).toMatchObject({ reason: 'timeout' });
        const info = (await two.inspect('job'))!;
        expect(info.kind).toBe('mutex');
        expect(info.holders.map((h) => h.holder.instance)).toEqual(['one']);
        expect(info.holders[0]!.sessionId).toBe(one.sessionId);
      });
      expect(await two.inspect('job')).toBeNull();
    });

    it('a service cut off (disconnect) keeps its lock until its session expires, then another takes over', async () => {
      const one = new FakeLockService({ store: locks.store, sessionTimeoutMs: 1000 });
      const two = new FakeLockService({ store: locks.store });
      const lease = await one.mutex('cut').acquire();
      const waiting = two.mutex('cut').acquire({ waitMs: 10_000 });
      one.disconnect();
      // Its lease's signal aborts before the server may expire the session (the real rule).
      await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }));
      expect(lease.signal.reason).toMatchObject({ reason: 'session-timeout' });
      const got = await waiting;
      expect(got.sessionId).toBe(two.sessionId);
      await got.release();
      one.reconnect(); // too late: it learns the session expired and opens a new one
      await expect(one.withLock('cut', () => 'again', { waitMs: 5000 })).resolves.toBe('again');
    });

    it('runs leader elections too (the real recipe): an expired leader is followed by the next', async () => {
      const one = new FakeLockService({ store: locks.store }).leadership('jobs').start();
      const two = new FakeLockService({ store: locks.store }).leadership('jobs');
      const term = await one.whenLeader();
      two.start();
      while ((await two.participants()).length < 2) await settle(); // queued behind the leader
      const next = two.whenLeader();
      locks.store.expire(term.sessionId);
      await next;
      expect(term.signal.aborted).toBe(true);
      await Promise.all([one.close(), two.close()]);
    });

    it('a partitioned service opens no new session until reconnect(): it stays unavailable, then works', async () => {
      const one = new FakeLockService({ store: locks.store, sessionTimeoutMs: 1000 });
      const lease = await one.mutex('part').acquire();
      one.disconnect();
      await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }));
      await delay(300); // past the loss: a real partitioned client could not connect again
      expect(one.state).not.toBe('connected');
      expect((await notAcquired(one.mutex('part').acquire({ waitMs: 0 }))).reason).toBe('connection');
      one.reconnect();
      await expect(one.withLock('part', () => 'back', { waitMs: 5000 })).resolves.toBe('back');
    });

    it("keeps its leases through Jest's fake timers, even when they jump past the session timeout", async () => {
      jest.useFakeTimers();
      try {
        const one = new FakeLockService({ store: locks.store });
        const lease = await one.mutex('clock').acquire();
        jest.runOnlyPendingTimers();
        jest.advanceTimersByTime(60_000);
        expect(lease.isHeld).toBe(true);
        await lease.release();
      } finally {
        jest.useRealTimers();
      }
    });

    it('a short disconnect keeps the session and the lock', async () => {
      const one = new FakeLockService({ store: locks.store });
      const lease = await one.mutex('blip').acquire();
      one.disconnect();
      await settle();
      expect(one.state).toBe('suspended');
      one.reconnect();
      await settle();
      expect(one.state).toBe('connected');
      expect(lease.isHeld).toBe(true);
      expect(one.isLocked('blip')).toBe(true);
      await lease.release();
    });

    it('inspect lists what is held and waited for under the base path', async () => {
      const held = await locks.mutex('a').acquire();
      // Another instance waits (this one's own callers would queue in memory behind its node).
      const waiting = new FakeLockService({ store: locks.store }).mutex('a').acquire();
      await settle();
      const reader = await locks.readWriteLock('b').read.acquire();
      const lease = await locks.semaphore('c', { permits: 3 }).acquire({ permits: 2 });
      const outside = await locks.mutex('/elsewhere').acquire();
      const all = await locks.inspect();
      expect(all.map((l) => [l.path, l.kind, l.holders.length, l.waiting.length])).toEqual([
        ['/locks/a', 'mutex', 1, 1],
        ['/locks/b', 'read-write', 1, 0],
        ['/locks/c', 'semaphore', 2, 0],
      ]);
      for (const l of [held, reader, lease, outside]) await l.release();
      await (await waiting).release();
      expect(await locks.inspect()).toEqual([]);
    });
  });

  it('publishes the diagnostics channel events (so metrics work in tests too)', async () => {
    const seen: string[] = [];
    const on = (label: string) => (message: unknown) => seen.push(`${label}:${(message as { name: string }).name}`);
    const subscriptions = [
      [LockChannels.acquireStart, on('start')],
      [LockChannels.acquired, on('acquired')],
      [LockChannels.contended, on('contended')],
      [LockChannels.notAcquired, on('not-acquired')],
      [LockChannels.released, on('released')],
    ] as const;
    for (const [channel, fn] of subscriptions) channel.subscribe(fn);
    try {
      const lease = await locks.mutex('d').acquire();
      await notAcquired(locks.mutex('d').acquire({ waitMs: 5 }));
      await lease.release();
    } finally {
      for (const [channel, fn] of subscriptions) channel.unsubscribe(fn);
    }
    expect(seen).toEqual(['start:d', 'acquired:d', 'start:d', 'contended:d', 'not-acquired:d', 'released:d']);
    expect(diagnostics_channel.hasSubscribers('nestjs-zk-lock:acquired')).toBe(false);
  });

  it('on shutdown gives up waits (reason connection), ends leases (signal: shutdown) and refuses new acquires', async () => {
    const held = await locks.mutex('s').acquire();
    const waiting = notAcquired(locks.mutex('s').acquire());
    await settle();
    await locks.onApplicationShutdown();
    expect((await waiting).reason).toBe('connection');
    expect(held.isHeld).toBe(false);
    expect(held.signal.reason).toMatchObject({ reason: 'shutdown' });
    expect((await notAcquired(locks.mutex('s').acquire())).reason).toBe('connection');
    expect(locks.state).toBe('closed');
  });
});

describe('ZkLockTestingModule and @WithLock', () => {
  const gate = { open: (): void => undefined };

  @Injectable()
  class ReportJob {
    runs = 0;
    @WithLock('report', { onLocked: 'skip' })
    async rebuild(): Promise<string> {
      this.runs++;
      await new Promise<void>((resolve) => (gate.open = resolve));
      return String(LockContext.current()!.fencingToken);
    }

    @WithLock((id: string) => `order:${id}`, { waitMs: 0 })
    async pay(id: string): Promise<string> {
      return `paid ${id} under ${LockContext.current()!.name}`;
    }
  }

  @Module({ providers: [ReportJob] })
  class JobsModule {}

  it('runs @WithLock methods under the fake: one at a time, the other call skipped', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot({ app: 'unit' }), JobsModule] }).compile();
    moduleRef.useLogger(false);
    const app = await moduleRef.init();
    const job = app.get(ReportJob);
    expect(app.get(LockService)).toBeInstanceOf(FakeLockService);
    expect(app.get(LockService)).toBe(app.get(FakeLockService));

    const first = job.rebuild();
    await settle();
    await expect(job.rebuild()).resolves.toBeUndefined(); // skipped: the lock is held
    expect(app.get(FakeLockService).isLocked('report')).toBe(true);
    gate.open();
    await expect(first).resolves.toMatch(/^\d+$/);
    expect(job.runs).toBe(1);
    await expect(job.pay('7')).resolves.toBe('paid 7 under order:7');
    await app.close();
    expect(app.get(FakeLockService).state).toBe('closed');
  });

  it('replaces ZkLockModule through overrideModule (no ZooKeeper needed)', async () => {
    const zkLock = ZkLockModule.forRoot({ connectString: '127.0.0.1:1', connectTimeoutMs: 100 });
    @Module({ imports: [zkLock], providers: [ReportJob] })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
      .overrideModule(zkLock)
      .useModule(ZkLockTestingModule.forRoot())
      .compile();
    moduleRef.useLogger(false);
    const app = await moduleRef.init();
    await expect(app.get(ReportJob).pay('1')).resolves.toBe('paid 1 under order:1');
    await app.close();
  });

  it('rejects an invalid static @WithLock name at startup, like the real module', async () => {
    @Injectable()
    class Bad {
      @WithLock('a//b')
      async run(): Promise<void> {}
    }
    const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot()], providers: [Bad] }).compile();
    moduleRef.useLogger(false);
    await expect(moduleRef.init()).rejects.toBeInstanceOf(InvalidLockNameError);
  });
});
