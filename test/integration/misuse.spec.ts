// Misuse against a real ZooKeeper: bad input must not touch the tree, leases used the wrong way
// (twice, by someone else, after close), acquiring during shutdown or after close, a read → write
// upgrade, closing the connection under waiting callers, and foreign children in a lock directory.
import { ConnectionClosedError, InvalidLockNameError, InvalidOptionError, LockLostError, LockNotAcquiredError, LockUsageError } from '../../lib/core/errors.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import type { LockEngine } from '../../lib/core/lock-engine.js';
import { resolveLockPath } from '../../lib/core/paths.js';
import { MultiLock } from '../../lib/core/recipes/multi-lock.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { CreateMode } from '../../lib/core/client/session.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, uniquePath } from '../support/helpers.js';
import { delay } from '../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);

/** What `work` settled with: { value } or { error }, within `timeoutMs` (else { pending: true }). */
async function outcome<T>(work: Promise<T>, timeoutMs = 10_000): Promise<{ value?: T; error?: unknown; pending?: true }> {
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    work.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    ),
    new Promise<{ pending: true }>((resolve) => (timer = setTimeout(() => resolve({ pending: true }), timeoutMs))),
  ]);
  clearTimeout(timer);
  return result;
}

/** The rejection of `work`, which must be a LockNotAcquiredError with `reason`. */
async function notAcquired(work: Promise<unknown>, reason: string, timeoutMs = 10_000): Promise<LockNotAcquiredError> {
  const result = await outcome(work, timeoutMs);
  if (result.pending) throw new Error(`still pending after ${timeoutMs} ms (expected LockNotAcquiredError(${reason}))`);
  if (!('error' in result)) throw new Error(`expected LockNotAcquiredError(${reason}), got a lease`);
  const error = result.error as LockNotAcquiredError;
  expect({ type: (error as Error)?.constructor?.name, reason: error?.reason }).toEqual({ type: 'LockNotAcquiredError', reason });
  return error;
}

interface NodeSnapshot {
  ephemeralOwner: string;
  version: number;
  cversion: number;
  pzxid: number;
  numChildren: number;
}

/** Every node under `path` (inclusive) with the stat fields that change when anything is created or deleted below it. */
async function snapshot(connection: ZkConnection, path: string): Promise<Record<string, NodeSnapshot>> {
  const out: Record<string, NodeSnapshot> = {};
  const session = connection.session!;
  await session.sync(path);
  async function walk(p: string): Promise<void> {
    const { children, stat } = await session.getChildren(p);
    out[p] = { ephemeralOwner: stat.ephemeralOwner, version: stat.version, cversion: stat.cversion, pzxid: stat.pzxid, numChildren: stat.numChildren };
    for (const child of children.sort()) await walk(`${p}/${child}`);
  }
  await walk(path);
  return out;
}

async function createPersistent(connection: ZkConnection, path: string): Promise<void> {
  const session = connection.session!;
  const parts = path.split('/').filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    await session.create(`/${parts.slice(0, i).join('/')}`, Buffer.alloc(0), CreateMode.PERSISTENT).catch((error: unknown) => {
      if ((error as { codeName?: string }).codeName !== 'NODEEXISTS') throw error;
    });
  }
}

async function deleteTree(connection: ZkConnection, path: string): Promise<void> {
  for (const child of await childrenOf(connection, path)) await deleteTree(connection, `${path}/${child}`);
  await connection.session!.delete(path).catch(() => undefined);
}

const nameOf = (lease: Lease) => lease.path.slice(lease.path.lastIndexOf('/') + 1);

describe('bad input leaves the ZooKeeper tree unchanged', () => {
  let base: string;
  let observer: ZkConnection;
  let e: LockEngine;
  let locks: LockService;

  beforeEach(async () => {
    observer = await connect();
    base = uniquePath('misuse-tree');
    // Something to compare: a lock directory in use and a plain node.
    await createPersistent(observer, `${base}/plain`);
    e = await engine({}, { basePath: base });
    locks = new LockService(e, e.connection);
  });

  afterEach(async () => {
    await deleteTree(observer, base);
  });

  const BAD_NAMES: readonly unknown[] = [
    '',
    '   ',
    '\t',
    '/',
    'a/',
    'a//b',
    '.',
    '..',
    'a/../plain',
    '../escape',
    'x\u0000y',
    'x\u001fy',
    'x\u007fy',
    'x\u0085y',
    'x\ud800y',
    'x\ue000y',
    'x\uf8ffy',
    'x\ufff0y',
    'x\uffffy',
    'emoji🔒',
    '/zookeeper',
    '/zookeeper/quota',
    'x'.repeat(5000),
    42,
    null,
    undefined,
    {},
    ['a'],
  ];

  it('refuses bad lock names with InvalidLockNameError for every recipe, creating nothing', async () => {
    const before = await snapshot(observer, base);
    const problems: string[] = [];
    for (const name of BAD_NAMES) {
      const attempts: [string, () => unknown][] = [
        ['mutex', () => locks.mutex(name as string)],
        ['semaphore', () => locks.semaphore(name as string, { permits: 2 })],
        ['readWriteLock', () => locks.readWriteLock(name as string)],
        ['multiLock', () => locks.multiLock(['fine', name as string])],
        ['pathOf', () => locks.pathOf(name as string)],
      ];
      for (const [what, attempt] of attempts) {
        let error: unknown;
        try {
          attempt();
        } catch (thrown) {
          error = thrown;
        }
        // A multi-lock member that is not a string is not a name at all: LockUsageError is right too.
        const typed = error instanceof InvalidLockNameError || (what === 'multiLock' && typeof name !== 'string' && error instanceof LockUsageError);
        if (!typed) problems.push(`${what}(${JSON.stringify(name)?.slice(0, 40)}): ${error === undefined ? 'accepted' : String(error)}`);
      }
      // (Thrown synchronously or as a rejection: see the next test for which.)
      const viaWithLock = await outcome(Promise.resolve().then(() => locks.withLock(name as string, () => 'ran')), 5000);
      if (!(viaWithLock.error instanceof InvalidLockNameError)) problems.push(`withLock(${JSON.stringify(name)?.slice(0, 40)}): ${JSON.stringify(viaWithLock)}`);
    }
    expect(problems).toEqual([]);
    await e.drain();
    expect(await snapshot(observer, base)).toEqual(before);
  });

  it('LockService.withLock with a bad name rejects its promise instead of throwing synchronously', async () => {
    // A promise-returning API that throws synchronously escapes `.catch()` chains and `void` calls.
    let thrownSynchronously: unknown;
    let returned: Promise<unknown> | undefined;
    try {
      returned = locks.withLock('a//b', () => 'ran');
    } catch (error) {
      thrownSynchronously = error;
    }
    returned?.catch(() => undefined);
    expect(thrownSynchronously === undefined ? 'rejected promise' : `threw ${(thrownSynchronously as Error).constructor.name} synchronously`).toBe('rejected promise');
    expect((await outcome(returned!)).error).toBeInstanceOf(InvalidLockNameError);
  });

  it('refuses a recipe made directly (core API) on an invalid path, creating nothing', async () => {
    const before = await snapshot(observer, base);
    for (const path of [`${base}/a\u0000b`, `${base}/x/`, `${base}//y`, `${base}/./z`, 'relative/path', '', '/']) {
      for (const make of [() => new Mutex(e, 'x', path), () => new Semaphore(e, 'x', path, { permits: 1 }), () => new ReadWriteLock(e, 'x', path)]) {
        let error: unknown;
        try {
          make();
        } catch (thrown) {
          error = thrown;
        }
        expect({ path, typed: error instanceof InvalidLockNameError || error instanceof InvalidOptionError }).toEqual({ path, typed: true });
      }
    }
    expect(await snapshot(observer, base)).toEqual(before);
    expect(await exists(observer, `${base}/a`)).toBe(false);
  });

  it('refuses bad acquire and recipe options with InvalidOptionError before creating the lock path', async () => {
    const before = await snapshot(observer, base);
    const mutex = locks.mutex('valid');
    const semaphore = locks.semaphore('valid-sem', { permits: 2 });
    const rw = locks.readWriteLock('valid-rw');
    const multi = locks.multiLock(['valid', rw.write]);
    const attempts: [string, () => Promise<unknown>, string][] = [
      ['mutex waitMs -1', () => mutex.acquire({ waitMs: -1 }), 'waitMs'],
      ['mutex waitMs NaN', () => mutex.acquire({ waitMs: Number.NaN }), 'waitMs'],
      ['mutex waitMs 2^31', () => mutex.acquire({ waitMs: 2 ** 31 }), 'waitMs'],
      ['mutex waitMs "100"', () => mutex.acquire({ waitMs: '100' as never }), 'waitMs'],
      ['mutex signal {}', () => mutex.acquire({ signal: {} as never }), 'signal'],
      ['mutex options null', () => mutex.acquire(null as never), 'options'],
      ['withLock waitMs 1.5', () => mutex.withLock(() => 'ran', { waitMs: 1.5 }), 'waitMs'],
      ['semaphore permits 0', () => semaphore.acquire({ permits: 0 }), 'permits'],
      ['semaphore permits 3 of 2', () => semaphore.acquire({ permits: 3 }), 'permits'],
      ['semaphore permits "1"', () => semaphore.acquire({ permits: '1' as never }), 'permits'],
      ['semaphore waitMs -5', () => semaphore.acquire({ waitMs: -5 }), 'waitMs'],
      ['read waitMs Infinity', () => rw.read.acquire({ waitMs: Number.POSITIVE_INFINITY }), 'waitMs'],
      ['write signal "x"', () => rw.write.acquire({ signal: 'x' as never }), 'signal'],
      ['multi waitMs -1', () => multi.acquire({ waitMs: -1 }), 'waitMs'],
      ['service withLock waitMs -1', () => locks.withLock('valid', () => 'ran', { waitMs: -1 }), 'waitMs'],
    ];
    const problems: string[] = [];
    for (const [label, attempt, option] of attempts) {
      const result = await outcome(attempt(), 5000);
      const error = result.error as InvalidOptionError | undefined;
      if (!(error instanceof InvalidOptionError) || error.option !== option) problems.push(`${label}: ${result.pending ? 'pending' : String(result.error ?? 'acquired')}`);
    }
    for (const [label, make, option] of [
      ['mutex leaseMs 0', () => locks.mutex('valid', { leaseMs: 0 }), 'leaseMs'],
      ['mutex fair "false"', () => locks.mutex('valid', { fair: 'false' as never }), 'fair'],
      ['semaphore permits -1', () => locks.semaphore('valid-sem', { permits: -1 }), 'permits'],
      ['semaphore permits NaN', () => locks.semaphore('valid-sem', { permits: Number.NaN }), 'permits'],
      ['rw leaseMs -1', () => locks.readWriteLock('valid-rw', { leaseMs: -1 }), 'leaseMs'],
    ] as [string, () => unknown, string][]) {
      try {
        make();
        problems.push(`${label}: accepted`);
      } catch (error) {
        if (!(error instanceof InvalidOptionError) || error.option !== option) problems.push(`${label}: ${String(error)}`);
      }
    }
    expect(problems).toEqual([]);
    await e.drain();
    expect(await snapshot(observer, base)).toEqual(before);
  });

  it('(control) a valid acquire does change the tree, so the snapshot would notice', async () => {
    const before = await snapshot(observer, base);
    const lease = await locks.mutex('valid').acquire();
    expect(await snapshot(observer, base)).not.toEqual(before);
    await lease.release();
  });
});

describe('releasing', () => {
  it('twice in a row: the second release is a no-op and does not touch the next holder', async () => {
    const observer = await connect();
    const path = uniquePath('release-twice');
    const a = new Mutex(await engine(), 'rt', path);
    const b = new Mutex(await engine(), 'rt', path);
    const first = await a.acquire();
    const waiting = b.acquire({ waitMs: 20_000 });
    await eventually(async () => (await childrenOf(observer, path)).length === 2, 20_000, 20);

    await first.release();
    const next = await waiting;
    await expect(first.release()).resolves.toBeUndefined();
    await expect(first.release()).resolves.toBeUndefined();
    expect(first.isHeld).toBe(false);
    expect(next.isHeld).toBe(true);
    expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
    await next.release();
  });

  it('twice at once: both calls resolve and the node is deleted once', async () => {
    const observer = await connect();
    const path = uniquePath('release-concurrent');
    const lease = await new Mutex(await engine(), 'rc', path).acquire();
    const results = await Promise.allSettled([lease.release(), lease.release(), lease.release()]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
    expect(await exists(observer, lease.path)).toBe(false);
  });

  it('a re-entered handle released twice does not release the outer hold', async () => {
    const observer = await connect();
    const path = uniquePath('release-reentrant');
    const mutex = new Mutex(await engine(), 'rr', path);
    await mutex.withLock(async (outer) => {
      const inner = await mutex.acquire();
      await inner.release();
      await inner.release();
      expect(outer.isHeld).toBe(true);
      expect(await exists(observer, outer.path)).toBe(true);
    });
    expect(await childrenOf(observer, path)).toEqual([]);
  });

  it('semaphore lease groups and read/write leases: twice is a no-op', async () => {
    const observer = await connect();
    const e = await engine();
    const path = uniquePath('release-twice-recipes');
    const group = await new Semaphore(e, 'sem', `${path}/sem`, { permits: 3 }).acquire({ permits: 2 });
    const rw = new ReadWriteLock(e, 'rw', `${path}/rw`);
    const write = await rw.write.acquire();
    for (const lease of [group, write]) {
      await lease.release();
      await expect(lease.release()).resolves.toBeUndefined();
    }
    await e.drain();
    expect(await childrenOf(observer, `${path}/sem/leases`)).toEqual([]);
    expect(await childrenOf(observer, `${path}/rw`)).toEqual([]);
  });
});

describe("someone else's lease", () => {
  it("another client's code releasing A's lease object releases A's lock (the object is the capability); A is not told", async () => {
    // Observed behaviour, reported rather than judged: release() acts on the lease's own session,
    // whoever calls it. A's isHeld turns false, but A's signal does not abort.
    const observer = await connect();
    const path = uniquePath('foreign-release');
    const a = await engine();
    const b = await engine();
    const leaseA = await new Mutex(a, 'fr', path).acquire();
    const signalA = leaseA.signal;
    const waitingB = new Mutex(b, 'fr', path).acquire({ waitMs: 20_000 });
    await eventually(async () => (await childrenOf(observer, path)).length === 2, 20_000, 20);

    // "B's code" calls release on the object it got hold of.
    await expect(leaseA.release()).resolves.toBeUndefined();
    const leaseB = await waitingB;
    expect(leaseB.isHeld).toBe(true);
    expect(leaseA.isHeld).toBe(false);
    await delay(200);
    expect(signalA.aborted).toBe(false);
    expect(await childrenOf(observer, path)).toEqual([nameOf(leaseB)]);
    await leaseB.release();
  });

  it("runHolding with another lock's lease never makes a nested acquire of this lock return that lease", async () => {
    const observer = await connect();
    const e = await engine();
    const other = await engine();
    const pathX = uniquePath('run-holding-x');
    const pathY = uniquePath('run-holding-y');
    const x = new Mutex(e, 'x', pathX);
    const leaseY = await new Mutex(e, 'y', pathY).acquire();
    const leaseXOther = await new Mutex(other, 'x', pathX).acquire(); // X is held by another client

    const result = await outcome(
      x.runHolding(leaseY, () => x.acquire({ waitMs: 500 })),
      5000,
    );
    const problem =
      result.value !== undefined
        ? `a nested acquire of ${pathX} returned a lease on ${result.value.path} while another client holds ${pathX}`
        : undefined;
    if (result.value) await result.value.release();
    // Refused (typed error) or waiting like anyone else (timeout) are both fine.
    expect(problem).toBeUndefined();
    expect(result.error instanceof LockUsageError || result.error instanceof InvalidOptionError || result.error instanceof LockNotAcquiredError).toBe(true);
    await leaseY.release();
    await leaseXOther.release();
    expect(await childrenOf(observer, pathX)).toEqual([]);
  });

  it('runHolding with the same lock\'s lease from another connection does not re-enter across connections', async () => {
    const e = await engine();
    const other = await engine();
    const path = uniquePath('run-holding-conn');
    const mine = new Mutex(e, 'c', path);
    const foreignLease = await new Mutex(other, 'c', path).acquire();
    const result = await outcome(
      mine.runHolding(foreignLease, () => mine.acquire({ waitMs: 500 })),
      5000,
    );
    const problem =
      result.value !== undefined ? `a nested acquire on this connection returned the other connection's lease (session ${result.value.sessionId})` : undefined;
    if (result.value) await result.value.release();
    // Refused (typed error) or queued on this connection like anyone else (timeout) are both fine.
    expect(problem).toBeUndefined();
    expect(result.error instanceof LockUsageError || result.error instanceof InvalidOptionError || result.error instanceof LockNotAcquiredError).toBe(true);
    await foreignLease.release();
  });

  it("runHolding with the lease of a lock nested below this one's path (x/child) does not count as holding x", async () => {
    // Nesting lock paths is discouraged (docs/on-zookeeper.md), but a lease of `x/child` is still not a lease of `x`.
    const e = await engine();
    const other = await engine();
    const path = uniquePath('run-holding-nested');
    const x = new Mutex(e, 'x', path);
    const leaseXOther = await new Mutex(other, 'x', path).acquire(); // x is held by another client
    const childLease = await new Mutex(e, 'child', `${path}/child`).acquire();
    const result = await outcome(
      x.runHolding(childLease, () => x.acquire({ waitMs: 500 })),
      5000,
    );
    const problem = result.value !== undefined ? `a nested acquire of ${path} returned a lease on ${result.value.path} while another client holds ${path}` : undefined;
    if (result.value) await result.value.release();
    expect(problem).toBeUndefined();
    expect(result.error instanceof LockUsageError || result.error instanceof InvalidOptionError || result.error instanceof LockNotAcquiredError).toBe(true);
    await childLease.release();
    await leaseXOther.release();
  });
});

describe('using a lease after the connection closed', () => {
  it('the signal aborts with "connection-closed", isHeld is false, release() resolves, the node is gone', async () => {
    const observer = await connect();
    const path = uniquePath('lease-after-close');
    const e = await engine();
    const mutexLease = await new Mutex(e, 'm', `${path}/m`).acquire();
    const semLease = await new Semaphore(e, 's', `${path}/s`, { permits: 2 }).acquire();
    const readLease = await new ReadWriteLock(e, 'rw', `${path}/rw`).read.acquire();
    const token = mutexLease.fencingToken;

    await e.connection.close();
    for (const lease of [mutexLease, semLease, readLease]) {
      // Looked at for the first time after the close.
      expect(lease.signal.aborted).toBe(true);
      expect(lease.signal.reason).toBeInstanceOf(LockLostError);
      expect((lease.signal.reason as LockLostError).reason).toBe('connection-closed');
      expect(lease.isHeld).toBe(false);
      await expect(lease.release()).resolves.toBeUndefined();
      await expect(lease.release()).resolves.toBeUndefined();
    }
    expect(mutexLease.fencingToken).toBe(token);
    await eventually(async () => !(await exists(observer, mutexLease.path)) && !(await exists(observer, semLease.path)) && !(await exists(observer, readLease.path)), 20_000);
  });

  it('withLock: a callback still running when the connection closes sees its signal abort, and withLock resolves', async () => {
    const e = await engine();
    const path = uniquePath('withlock-close');
    let seen: unknown;
    const running = new Mutex(e, 'w', path).withLock(async (lease) => {
      await e.connection.close();
      seen = lease.signal.aborted ? (lease.signal.reason as LockLostError).reason : 'not aborted';
      return 'done';
    });
    await expect(running).resolves.toBe('done');
    expect(seen).toBe('connection-closed');
  });
});

describe('acquiring during shutdown and after close', () => {
  function recipes(e: LockEngine, path: string): [string, () => Promise<unknown>][] {
    const mutex = new Mutex(e, 'm', `${path}/m`);
    const semaphore = new Semaphore(e, 's', `${path}/s`, { permits: 1 });
    const rw = new ReadWriteLock(e, 'rw', `${path}/rw`);
    const multi = new MultiLock([new Mutex(e, 'a', `${path}/a`), new Mutex(e, 'b', `${path}/b`)]);
    return [
      ['mutex.acquire()', () => mutex.acquire()],
      ['mutex.acquire({ waitMs: 0 })', () => mutex.acquire({ waitMs: 0 })],
      ['mutex.tryAcquire()', () => mutex.tryAcquire()],
      ['mutex.withLock()', () => mutex.withLock(() => 'ran')],
      ['semaphore.acquire()', () => semaphore.acquire()],
      ['semaphore.acquire({ waitMs: 0 })', () => semaphore.acquire({ waitMs: 0 })],
      ['semaphore.tryAcquire()', () => semaphore.tryAcquire()],
      ['read.acquire()', () => rw.read.acquire()],
      ['write.tryAcquire()', () => rw.write.tryAcquire()],
      ['multi.acquire({ waitMs: 1000 })', () => multi.acquire({ waitMs: 1000 })],
    ];
  }

  /** Each attempt must reject promptly with LockNotAcquiredError(connection). */
  async function expectRefused(attempts: [string, () => Promise<unknown>][]): Promise<void> {
    const got: Record<string, string> = {};
    for (const [label, attempt] of attempts) {
      const result = await outcome(attempt(), 5000);
      const error = result.error as LockNotAcquiredError | undefined;
      got[label] = result.pending ? 'pending' : 'value' in result ? `resolved ${String(result.value)}` : `${(error as Error)?.constructor?.name}(${error?.reason ?? ''})`;
    }
    expect(got).toEqual(Object.fromEntries(attempts.map(([label]) => [label, 'LockNotAcquiredError(connection)'])));
  }

  it('after close: every recipe rejects with LockNotAcquiredError(connection), creating nothing', async () => {
    const observer = await connect();
    const path = uniquePath('after-close');
    const e = await engine();
    await e.connection.close();
    await expectRefused(recipes(e, path));
    expect(await exists(observer, path)).toBe(false);
  });

  it('during engine.shutdown(): waiters are refused, held leases ended after the grace time, new acquires refused; nodes deleted', async () => {
    const observer = await connect();
    const path = uniquePath('shutdown');
    const holder = await engine();
    const e = await engine({}, { shutdownGraceMs: 100 });
    const blocker = await new Mutex(holder, 'm', `${path}/m`).acquire();
    const held = await new Mutex(e, 'h', `${path}/h`).acquire();
    const waiting = new Mutex(e, 'm', `${path}/m`).acquire();
    waiting.catch(() => undefined);
    await eventually(async () => (await childrenOf(observer, `${path}/m`)).length === 2, 20_000, 20);

    const shutdown = e.shutdown();
    const raced = new Mutex(e, 'r', `${path}/r`).acquire(); // in the same tick as shutdown()
    raced.catch(() => undefined);
    const waiter = await notAcquired(waiting, 'connection');
    expect(waiter.cause).toBeInstanceOf(ConnectionClosedError);
    await notAcquired(raced, 'connection');
    await shutdown;
    expect(held.isHeld).toBe(false);
    await expectRefused(recipes(e, path));
    expect(e.connection.state).toBe('connected'); // shutdown leaves closing to the owner
    expect(await childrenOf(observer, `${path}/m`)).toEqual([nameOf(blocker)]);
    expect(await childrenOf(observer, `${path}/h`)).toEqual([]);
    expect(await exists(observer, `${path}/r`)).toBe(false);
    await blocker.release();
  });
});

describe('read → write upgrade', () => {
  it('inside read.withLock, write.acquire() and write.withLock() reject at once with LockUsageError and create no write node', async () => {
    const observer = await connect();
    const path = uniquePath('upgrade');
    const rw = new ReadWriteLock(await engine(), 'up', path);
    await rw.read.withLock(async (read) => {
      const started = performance.now();
      const viaAcquire = await outcome(rw.write.acquire({ waitMs: 5000 }), 8000);
      const viaWithLock = await outcome(rw.write.withLock(() => 'ran'), 8000);
      const viaTry = await outcome(rw.write.tryAcquire(), 8000);
      expect(viaAcquire.error).toBeInstanceOf(LockUsageError);
      expect(viaWithLock.error).toBeInstanceOf(LockUsageError);
      expect(viaTry.error).toBeInstanceOf(LockUsageError);
      expect(performance.now() - started).toBeLessThan(2000);
      expect(await childrenOf(observer, path)).toEqual([nameOf(read)]);
      expect(read.isHeld).toBe(true);
    });
    expect(await childrenOf(observer, path)).toEqual([]);
  });

  it('through runHolding(readLease) and through a multi-lock that contains the write half: LockUsageError', async () => {
    const observer = await connect();
    const e = await engine();
    const path = uniquePath('upgrade-multi');
    const rw = new ReadWriteLock(e, 'up', path);
    const other = new Mutex(e, 'other', `${path}-other`);
    const read = await rw.read.acquire();
    const viaRunHolding = await outcome(rw.read.runHolding(read, () => rw.write.acquire({ waitMs: 5000 })), 8000);
    expect(viaRunHolding.error).toBeInstanceOf(LockUsageError);
    const viaMulti = await outcome(rw.read.runHolding(read, () => new MultiLock([other, rw.write]).acquire({ waitMs: 5000 })), 8000);
    expect(viaMulti.error).toBeInstanceOf(LockUsageError);
    await e.drain();
    expect(await childrenOf(observer, path)).toEqual([nameOf(read)]);
    expect(await childrenOf(observer, `${path}-other`)).toEqual([]);
    await read.release();
  });

  it('outside any locked section (plain acquire calls) nothing can tell: the writer waits like any other and times out', async () => {
    const observer = await connect();
    const path = uniquePath('upgrade-plain');
    const rw = new ReadWriteLock(await engine(), 'up', path);
    const read = await rw.read.acquire();
    await notAcquired(rw.write.acquire({ waitMs: 500 }), 'timeout');
    await eventually(async () => (await childrenOf(observer, path)).length === 1, 10_000, 20);
    await read.release();
  });
});

describe('closing the connection while callers wait', () => {
  it('every waiter (mutex, semaphore, read, write, multi) rejects with LockNotAcquiredError(connection); their nodes are gone', async () => {
    const observer = await connect();
    const path = uniquePath('close-waiters');
    const holderEngine = await engine();
    const e = await engine();
    const held = [
      await new Mutex(holderEngine, 'm', `${path}/m`).acquire(),
      await new Semaphore(holderEngine, 's', `${path}/s`, { permits: 1 }).acquire(),
      await new ReadWriteLock(holderEngine, 'rw', `${path}/rw`).write.acquire(),
    ];
    const rw = new ReadWriteLock(e, 'rw', `${path}/rw`);
    const waiters: Promise<unknown>[] = [
      new Mutex(e, 'm', `${path}/m`).acquire(),
      new Mutex(e, 'm', `${path}/m`).acquire({ waitMs: 60_000 }),
      new Mutex(e, 'm', `${path}/m`).withLock(() => 'ran'),
      new Semaphore(e, 's', `${path}/s`, { permits: 1 }).acquire(),
      new Semaphore(e, 's', `${path}/s`, { permits: 1 }).acquire({ waitMs: 60_000 }),
      rw.read.acquire(),
      rw.write.acquire(),
      new MultiLock([new Mutex(e, 'free', `${path}/free`), new Mutex(e, 'm', `${path}/m`)]).acquire(),
    ];
    for (const w of waiters) w.catch(() => undefined);
    // mutex: the holder + one node for this process's 3 plain waiters (they wait in memory behind
    // it) + the multi-lock's own (it holds /free while it waits: its node says so, see
    // docs/deadlocks.md); rw: writer + reader + writer; the semaphore's second waiter queues for
    // its internal lock, the first waits for a lease.
    await eventually(async () => (await childrenOf(observer, `${path}/m`)).length === 3, 20_000, 20);
    await eventually(async () => (await childrenOf(observer, `${path}/rw`)).length === 3, 20_000, 20);
    await eventually(async () => (await childrenOf(observer, `${path}/s/leases`)).length === 2, 20_000, 20);

    await e.connection.close();
    const results = await Promise.all(waiters.map((w) => outcome(w, 10_000)));
    expect(
      results.map((r) => (r.pending ? 'pending' : 'value' in r ? 'acquired' : `${(r.error as Error)?.constructor?.name}(${(r.error as LockNotAcquiredError)?.reason})`)),
    ).toEqual(waiters.map(() => 'LockNotAcquiredError(connection)'));

    // Checked from another client: only the holder's nodes remain.
    expect(await childrenOf(observer, `${path}/m`)).toEqual([nameOf(held[0]!)]);
    expect(await childrenOf(observer, `${path}/s/leases`)).toEqual([nameOf(held[1]!)]);
    expect(await childrenOf(observer, `${path}/s/locks`)).toEqual([]);
    expect(await childrenOf(observer, `${path}/rw`)).toEqual([nameOf(held[2]!)]);
    expect(await childrenOf(observer, `${path}/free`)).toEqual([]);
    for (const lease of held) await lease.release();
  });
});

describe('foreign children in a lock directory', () => {
  let observer: ZkConnection;
  const roots: string[] = [];
  beforeEach(async () => {
    observer = await connect();
  });
  afterEach(async () => {
    for (const root of roots.splice(0)) await deleteTree(observer, root);
  });
  /** A persistent node made by "someone else" (its parents too, persistent). */
  async function foreign(path: string): Promise<void> {
    await createPersistent(observer, path);
    const root = `/${path.split('/').filter(Boolean).slice(0, 2).join('/')}`;
    if (!roots.includes(root)) roots.push(root);
  }

  it('mutex: a persistent "0" blocks like Curator (sorts first); a waiter gets the lock once it is deleted', async () => {
    const path = uniquePath('foreign-0');
    await foreign(`${path}/0`);
    const mutex = new Mutex(await engine(), 'f0', path);
    expect(await mutex.tryAcquire()).toBeNull();
    await notAcquired(mutex.acquire({ waitMs: 500 }), 'timeout');
    const waiting = mutex.acquire({ waitMs: 20_000 });
    await eventually(async () => (await childrenOf(observer, path)).length === 2, 20_000, 20);
    await observer.session!.delete(`${path}/0`);
    const lease = await waiting;
    expect(await childrenOf(observer, path)).toEqual([nameOf(lease)]);
    await lease.release();
  });

  it('mutex: junk names that sort after ours ("zzz", "lock-9999999999") do not block and are left alone', async () => {
    const path = uniquePath('foreign-zzz');
    await foreign(`${path}/zzz`);
    await foreign(`${path}/lock-9999999999`);
    const mutex = new Mutex(await engine(), 'fz', path);
    const lease = await mutex.acquire({ waitMs: 2000 });
    await lease.release();
    expect((await childrenOf(observer, path)).sort()).toEqual(['lock-9999999999', 'zzz']);
  });

  it('read-write lock: a foreign "0" blocks writers but not readers (only write nodes block readers, as in Curator)', async () => {
    const path = uniquePath('foreign-rw');
    await foreign(`${path}/0`);
    const rw = new ReadWriteLock(await engine(), 'frw', path);
    expect(await rw.write.tryAcquire()).toBeNull();
    const read = await rw.read.acquire({ waitMs: 2000 });
    await read.release();
  });

  it('semaphore: a foreign child of leases/ takes a permit (every child counts, as in Curator)', async () => {
    const path = uniquePath('foreign-sem');
    await foreign(`${path}/leases/zzz`);
    const semaphore = new Semaphore(await engine(), 'fs', path, { permits: 1 });
    expect(await semaphore.tryAcquire()).toBeNull();
    const two = new Semaphore(await engine(), 'fs', path, { permits: 2 });
    const lease = await two.acquire({ waitMs: 2000 });
    await lease.release();
  });
});
