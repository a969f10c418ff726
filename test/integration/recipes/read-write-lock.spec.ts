// ReadWriteLock (Curator InterProcessReadWriteLock layout) against a real ZooKeeper: layout,
// sharing and exclusion, arrival-order fairness (no writer starvation), downgrade as Curator 5.5+
// (CURATOR-621), refused upgrade, re-entrancy, and a killed writer's session. Ports Curator's
// TestInterProcessReadWriteLock and kazoo's read/write lock tests.
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { LockLostError, LockNotAcquiredError, LockUsageError } from '../../../lib/core/errors.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { runRecipeWorkers, maxOverlap, overlaps } from '../../support/recipe-workers.js';
import { fourLetter } from '../../support/zk-server.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { nameOf, notAcquired, within, untilChildCount, sessionIdOf, sessionsWatching, untilWatching } from '../../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);


const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const READ_NODE = new RegExp(`^_c_${UUID}-__READ__\\d{10}$`);
const WRITE_NODE = new RegExp(`^_c_${UUID}-__WRIT__\\d{10}$`);

/** Follows a pending acquire: `settled` turns true once it resolves or rejects. */
function track<T>(work: Promise<T>): { promise: Promise<T>; readonly settled: boolean } {
  let settled = false;
  const promise = work.finally(() => (settled = true));
  promise.catch(() => undefined);
  return {
    promise,
    get settled() {
      return settled;
    },
  };
}

describe('ReadWriteLock against a real ZooKeeper', () => {
  describe('layout (Curator InterProcessReadWriteLock)', () => {
    it('queues _c_<uuid>-__READ__<seq> and _c_<uuid>-__WRIT__<seq> directly under the lock path, on one shared sequence', async () => {
      const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
      const observer = await connect();
      const path = uniquePath('rw-layout');
      const reader = await new ReadWriteLock(a, 'layout', path).read.acquire();
      const writer = track(new ReadWriteLock(b, 'layout', path).write.acquire());
      await untilChildCount(observer, path, 2);
      const laterReader = track(new ReadWriteLock(c, 'layout', path).read.acquire());
      const children = await untilChildCount(observer, path, 3);

      expect(reader.path).toBe(`${path}/${nameOf(reader)}`);
      const reads = children.filter((n) => READ_NODE.test(n));
      const writes = children.filter((n) => WRITE_NODE.test(n));
      expect(reads).toHaveLength(2);
      expect(writes).toHaveLength(1);
      expect(reads).toContain(nameOf(reader));
      const seq = (n: string) => Number(n.slice(-10));
      expect(seq(writes[0]!)).toBe(seq(nameOf(reader)) + 1);
      expect(Math.max(...reads.map(seq))).toBe(seq(writes[0]!) + 1);

      await reader.release();
      const w = await within(writer.promise, 20_000, 'writer');
      expect(nameOf(w)).toBe(writes[0]);
      await w.release();
      const r = await within(laterReader.promise, 20_000, 'later reader');
      await r.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('sharing and exclusion (kazoo test_read_lock / test_write_lock)', () => {
    it('two readers on two clients hold at once; a writer on a third client fails tryAcquire and leaves no node', async () => {
      const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
      const observer = await connect();
      const path = uniquePath('rw-share');
      const r1 = await new ReadWriteLock(a, 'share', path).read.tryAcquire();
      const r2 = await new ReadWriteLock(b, 'share', path).read.tryAcquire();
      expect(r1).not.toBeNull();
      expect(r2).not.toBeNull();
      const writeLock = new ReadWriteLock(c, 'share', path).write;
      expect(await writeLock.tryAcquire()).toBeNull();
      await c.drain();
      expect((await childrenOf(observer, path)).sort()).toEqual([nameOf(r1!), nameOf(r2!)].sort());

      await Promise.all([r1!.release(), r2!.release()]);
      const w = await writeLock.tryAcquire();
      expect(w).not.toBeNull();
      await w!.release();
    });

    it('while a writer holds, a reader on another client fails tryAcquire and leaves no node', async () => {
      const [a, b] = await Promise.all([engine(), engine()]);
      const observer = await connect();
      const path = uniquePath('rw-excl');
      const w = await new ReadWriteLock(a, 'excl', path).write.acquire();
      const readLock = new ReadWriteLock(b, 'excl', path).read;
      const started = Date.now();
      expect(await readLock.tryAcquire()).toBeNull();
      expect(Date.now() - started).toBeLessThan(2000);
      expect(await new ReadWriteLock(b, 'excl', path).write.tryAcquire()).toBeNull();
      await b.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(w)]);
      await w.release();
      const r = await readLock.tryAcquire();
      expect(r).not.toBeNull();
      await r!.release();
    });
  });

  describe('arrival order', () => {
    it('no writer starvation: reader A holds, writer B queues, reader C arrives → C waits until B got and released the lock', async () => {
      const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
      const observer = await connect();
      const path = uniquePath('rw-starve');
      const order: string[] = [];
      const readerA = await new ReadWriteLock(a, 'starve', path).read.acquire();
      const writerB = track(new ReadWriteLock(b, 'starve', path).write.acquire().then((l) => (order.push('B'), l)));
      await untilChildCount(observer, path, 2);
      const writerNode = (await childrenOf(observer, path)).find((n) => WRITE_NODE.test(n))!;
      const readerC = track(new ReadWriteLock(c, 'starve', path).read.acquire().then((l) => (order.push('C'), l)));
      await untilChildCount(observer, path, 3);
      await untilWatching(`${path}/${writerNode}`, c.connection.sessionId!); // C sleeps on B's writer node
      expect(readerC.settled).toBe(false);

      await readerA.release();
      const w = await within(writerB.promise, 20_000, 'writer B');
      expect(readerC.settled).toBe(false);
      await w.release();
      const r = await within(readerC.promise, 20_000, 'reader C');
      expect(order).toEqual(['B', 'C']);
      await r.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('kazoo test_rw_lock: write held, a reader then a writer queue → they acquire in queue order (reader, then writer)', async () => {
      const [a, b, c] = await Promise.all([engine(), engine(), engine()]);
      const observer = await connect();
      const path = uniquePath('rw-order');
      const order: string[] = [];
      const holder = await new ReadWriteLock(a, 'order', path).write.acquire();
      const reader = track(new ReadWriteLock(b, 'order', path).read.acquire().then((l) => (order.push('reader'), l)));
      await untilChildCount(observer, path, 2);
      const writer = track(new ReadWriteLock(c, 'order', path).write.acquire().then((l) => (order.push('writer'), l)));
      await untilChildCount(observer, path, 3);

      await holder.release();
      const r = await within(reader.promise, 20_000, 'reader');
      await untilWatching(r.path, c.connection.sessionId!); // the writer now sleeps on the reader's node
      expect(writer.settled).toBe(false);
      await r.release();
      const w = await within(writer.promise, 20_000, 'writer');
      expect(order).toEqual(['reader', 'writer']);
      await w.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('across processes', () => {
    it('mixed readers and writers (3 processes × 3 workers, ~10% writes): writers never overlap anyone, readers do overlap', async () => {
      const observer = await connect();
      const path = uniquePath('rw-procs');
      const intervals = await runRecipeWorkers(3, {
        RECIPE: 'rw',
        LOCK_PATH: path,
        WORKERS: '3',
        ITERATIONS: '15',
        HOLD_MS: '20',
        WRITE_RATIO: '0.1',
      });
      expect(intervals).toHaveLength(3 * 3 * 15);
      const writes = intervals.filter((i) => i.kind === 'write');
      const reads = intervals.filter((i) => i.kind === 'read');
      expect(writes.length).toBeGreaterThanOrEqual(9); // each worker writes at least once
      expect(reads.length).toBeGreaterThan(0);
      const clashes = writes.flatMap((w) => intervals.filter((o) => o !== w && overlaps(w, o)).map((o) => `${o.kind} during a write`));
      expect(clashes).toEqual([]);
      expect(maxOverlap(reads)).toBeGreaterThan(1);
      expect(await childrenOf(observer, path)).toEqual([]);
    }, 180_000);
  });

  describe('downgrade, upgrade and re-entrancy', () => {
    it('testDowngrading: inside write.withLock, read.acquire() succeeds at once with the node __READ__<the writer\'s 10 digits>', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('rw-down');
      const rw = new ReadWriteLock(e, 'down', path);
      let read!: Lease;
      await rw.write.withLock(async (write) => {
        const started = Date.now();
        read = await rw.read.acquire({ waitMs: 5000 });
        expect(Date.now() - started).toBeLessThan(2000);
        expect(nameOf(read)).toMatch(READ_NODE);
        expect(nameOf(read).slice(-10)).toBe(nameOf(write).slice(-10));
        expect((await childrenOf(observer, path)).sort()).toEqual([nameOf(read), nameOf(write)].sort());
      });
      expect(read.isHeld).toBe(true);
      expect(await childrenOf(observer, path)).toEqual([nameOf(read)]);
      await read.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('CURATOR-621: after a downgrade, a writer that queued in between stays blocked while we hold read, and gets the lock after', async () => {
      const [e1, e2] = await Promise.all([engine(), engine()]);
      const observer = await connect();
      const path = uniquePath('rw-621');
      const rw1 = new ReadWriteLock(e1, '621', path);
      let read!: Lease;
      let writer!: ReturnType<typeof track<Lease>>;
      await rw1.write.withLock(async (write) => {
        writer = track(new ReadWriteLock(e2, '621', path).write.acquire());
        await untilChildCount(observer, path, 2); // the other writer queued behind ours
        read = await rw1.read.acquire({ waitMs: 5000 });
        expect(nameOf(read).slice(-10)).toBe(nameOf(write).slice(-10));
      });
      // Our writer node is gone; the other writer re-evaluated and now sleeps on our read node.
      await untilChildCount(observer, path, 2);
      await untilWatching(read.path, e2.connection.sessionId!);
      expect(writer.settled).toBe(false);

      await read.release();
      const w = await within(writer.promise, 20_000, 'queued writer');
      expect(await childrenOf(observer, path)).toEqual([nameOf(w)]);
      await w.release();
    });

    it('testThatDowngradingRespectsThreads: another call chain on the same lock object does not get read while write is held', async () => {
      const e = await engine();
      const path = uniquePath('rw-chain');
      const rw = new ReadWriteLock(e, 'chain', path);
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      const holding = rw.write.withLock(async () => {
        entered();
        await released;
      });
      await inside;
      // A sibling chain (started outside the withLock scope).
      const error = await notAcquired(rw.read.acquire({ waitMs: 500 }));
      expect(error.reason).toBe('timeout');
      release();
      await holding;
      const r = await rw.read.acquire({ waitMs: 5000 });
      await r.release();
    });

    it('upgrade is refused: inside read.withLock, write.acquire() rejects at once with LockUsageError (not a timeout) and creates no node', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('rw-up');
      const rw = new ReadWriteLock(e, 'up', path);
      await rw.read.withLock(async (read) => {
        const started = Date.now();
        const error = await rw.write.acquire({ waitMs: 60_000 }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(LockUsageError);
        expect(error).not.toBeInstanceOf(LockNotAcquiredError);
        expect(Date.now() - started).toBeLessThan(5000);
        await expect(rw.write.tryAcquire()).rejects.toBeInstanceOf(LockUsageError);
        await expect(rw.write.acquire()).rejects.toBeInstanceOf(LockUsageError);
        expect(await childrenOf(observer, path)).toEqual([nameOf(read)]);
      });
      expect(await childrenOf(observer, path)).toEqual([]);
    });

    it('the writer is re-entrant inside write.withLock: a nested write.acquire() returns at once with the same node', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('rw-reenter');
      const rw = new ReadWriteLock(e, 'reenter', path);
      let outerPath = '';
      await rw.write.withLock(async (outer) => {
        outerPath = outer.path;
        const started = Date.now();
        const inner = await rw.write.acquire({ waitMs: 60_000 });
        expect(Date.now() - started).toBeLessThan(5000);
        expect(inner.path).toBe(outer.path);
        expect(await childrenOf(observer, path)).toEqual([nameOf(outer)]);
        await inner.release();
        expect(await exists(observer, outer.path)).toBe(true); // still held by the outer scope
        expect(outer.isHeld).toBe(true);
      });
      expect(await exists(observer, outerPath)).toBe(false);
    });

    it('the reader is re-entrant inside read.withLock: a nested read.acquire() returns the same node', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('rw-reenter-read');
      const rw = new ReadWriteLock(e, 'reenter-read', path);
      await rw.read.withLock(async (outer) => {
        const inner = await rw.read.acquire();
        expect(inner.path).toBe(outer.path);
        expect(await childrenOf(observer, path)).toEqual([nameOf(outer)]);
        await inner.release();
        expect(await exists(observer, outer.path)).toBe(true);
      });
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  describe('a writer\'s session killed', () => {
    let proxy: TcpProxy;
    beforeEach(async () => {
      proxy = await TcpProxy.start(zkConnectString());
    });
    afterEach(async () => {
      await proxy.close();
    });

    it('testLockPath: the writer\'s session is killed → a waiting reader acquires, the writer\'s node is gone, and release() on the dead lease does not throw', async () => {
      const writerEngine = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
      const readerEngine = await engine();
      const observer = await connect();
      const path = uniquePath('rw-killed');
      const write = await new ReadWriteLock(writerEngine, 'killed', path).write.acquire();
      const signal = write.signal;
      const reader = track(new ReadWriteLock(readerEngine, 'killed', path).read.acquire());
      await untilChildCount(observer, path, 2);

      const connection = writerEngine.connection;
      const suspended = nextEvent(connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(connection.sessionId!, connection.session!.password);
      const read = await within(reader.promise, 20_000, 'reader after the writer\'s session was killed');
      expect(await exists(observer, write.path)).toBe(false);
      expect(await childrenOf(observer, path)).toEqual([nameOf(read)]);

      const lost = nextEvent(connection, 'lost');
      proxy.restore();
      await lost;
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(LockLostError);
      expect(write.isHeld).toBe(false);
      await expect(write.release()).resolves.toBeUndefined();
      await read.release();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });
});
