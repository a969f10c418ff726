// Second adversarial review of SequenceShortcut (holding without a listing where our node was
// last alone). Not a repeat of sequence-shortcut-review.spec: the cases here are a refused delete
// racing the next create, a second engine on the same session, a downgraded read node (a create
// that bypasses the expectation), a record evicted while its create is in flight, and what the
// shortcut's long-lived path watches cost a reconnect of the same session.
import type { Lease } from '../../lib/core/lease.js';
import { LockEngine } from '../../lib/core/lock-engine.js';
import { Mutex } from '../../lib/core/mutex.js';
import { ReadWriteLock } from '../../lib/core/read-write-lock.js';
import { CreateMode, ZkPerm } from '../../lib/core/zk-session.js';
import { childrenOf, closeAll, connect, deleteTree, engine, eventually, nextEvent } from '../support/helpers.js';
import { countRequests, cycles, delay, lastingPath, nameOf, notAcquired, within, shortcutArmed, withProxy } from '../support/lock-test-helpers.js';
import { watchesOf } from '../../lib/core/sequence-shortcut.js';

afterEach(closeAll);

const EMPTY = Buffer.alloc(0);

describe('SequenceShortcut, second review', () => {
  it('a refused delete (the path lost DELETE for us) with the next acquire sent in the same tick: the record is forgotten before that create is confirmed, and we do not hold behind our own node that stayed', async () => {
    const path = await lastingPath('rv2-noauth');
    const admin = (await connect()).session!;
    const e = await engine();
    const warnings: string[] = [];
    e.onWarning((message) => warnings.push(message));
    const lock = new Mutex(e, 'noauth', path, { coalesce: false });
    await cycles(lock, 3);
    const lease = await lock.acquire();
    const stale = nameOf(lease);
    // setACL fires no watch: the shortcut stays armed.
    await admin.setAcl(path, [{ perms: ZkPerm.READ | ZkPerm.WRITE | ZkPerm.CREATE | ZkPerm.ADMIN, scheme: 'world', id: 'anyone' }]);
    const released = lease.release();
    expect(shortcutArmed(e, path)).toBeDefined();
    // Sent behind the (refused) delete, with the expectation: its number is the expected one,
    // since a refused delete changes nothing, yet our old node is still the head.
    const next = lock.acquire({ waitMs: 500 });
    await released;
    expect(warnings.some((w) => w.includes('Could not delete lock node'))).toBe(true);
    await notAcquired(next);
    expect(shortcutArmed(e, path)).toBeUndefined();
    const children = await childrenOf(await connect(), path);
    expect(children).toContain(stale);
    await admin.setAcl(path, [{ perms: ZkPerm.ALL, scheme: 'world', id: 'anyone' }]);
  });

  it('two engines on one connection (one session): the other engine holding in between keeps us out although its create is of our session; its shutdown leaves our record', async () => {
    const path = await lastingPath('rv2-shared');
    const connection = await connect();
    const e1 = new LockEngine(connection, { app: 'jest' });
    const e2 = new LockEngine(connection, { app: 'jest' });
    const lock1 = new Mutex(e1, 'shared', path, { coalesce: false });
    const lock2 = new Mutex(e2, 'shared', path, { coalesce: false });
    await cycles(lock1, 3);
    expect(shortcutArmed(e1, path)).toBeDefined();
    const theirs = await lock2.acquire();
    await notAcquired(lock1.acquire({ waitMs: 300 }));
    await theirs.release();
    await (await lock1.acquire()).release();
    await cycles(lock1, 2);
    await cycles(lock2, 3);
    expect(shortcutArmed(e2, path)).toBeDefined();
    await e2.shutdown();
    await cycles(lock1, 2);
    expect(shortcutArmed(e1, path)).toBeDefined();
    const counts = countRequests(connection.session!);
    await (await lock1.acquire()).release();
    expect(counts.getChildren ?? 0).toBe(0);
    await e1.shutdown();
  });

  it('a downgrade (a read node with a fixed suffix, no expectation) between the write hold and its release: a write from another call chain does not hold while that read is held', async () => {
    const path = await lastingPath('rv2-downgrade');
    const e = await engine();
    const rw = new ReadWriteLock(e, 'dg', path);
    await cycles(rw.write, 3);
    expect(shortcutArmed(e, path)).toBeDefined();
    let read!: Lease;
    await rw.write.withLock(async () => {
      read = await rw.read.acquire({ waitMs: 5000 });
    });
    expect(shortcutArmed(e, path)).toBeDefined(); // our writer's release recorded the next number
    expect(read.isHeld).toBe(true);
    await notAcquired(rw.write.acquire({ waitMs: 300 }));
    await read.release();
    const w = await rw.write.acquire({ waitMs: 5000 });
    expect(await childrenOf(await connect(), path)).toEqual([nameOf(w)]);
    await w.release();
  });

  it('the record evicted (MAX_PATHS) while its create is in flight: the create holds (the facts it carries still stand), alone, and the records stay bounded', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv2-evict');
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lock = new Mutex(e, 'evict', path, { coalesce: false });
      await cycles(lock, 3);
      const lease = await lock.acquire();
      const session = e.connection.session!;
      const counts = countRequests(session);
      proxy.slowReplies(0); // answers held
      void lease.release();
      expect(shortcutArmed(e, path)).toBeDefined();
      const ours = lock.acquire({ waitMs: 10_000 });
      await delay(50); // its create went with the expectation, no listing
      expect(counts.create).toBe(1);
      expect(counts.getChildren ?? 0).toBe(0);
      for (let i = 0; i < 20_000; i++) e.ops.shortcut.released(session, `/rv2-fake/${i}`, 1, 1, Promise.resolve());
      expect(shortcutArmed(e, path)).toBeUndefined(); // ours was the oldest
      const records = (e.ops.shortcut as unknown as { records: Map<string, unknown> }).records;
      expect(records.size).toBeLessThanOrEqual(20_000);
      proxy.forward();
      const held = await within(ours, 10_000, 'ours');
      expect(await childrenOf(await connect(), path)).toEqual([nameOf(held)]);
      await held.release();
      e.ops.shortcut.forgetAll(e.connection.session);
    });
  });

  it('many lock paths watched by the shortcut: the same session still reconnects (the C client sends all its watches in one SetWatches packet)', async () => {
    // (Failed before the watches got a byte budget per session.) Every lock path used alone twice
    // gets an `exists` watch that lasts as long as the path (a lasting path: for ever; the C client
    // cannot forget a watch). On reconnecting, the C client re-sends all of them in ONE SetWatches
    // packet (zookeeper.c send_set_watches, never split, unlike the Java client since
    // ZOOKEEPER-706); past jute.maxbuffer (1 MiB by default) the server closes the connection on
    // every try, so a brief disconnection ended in the session's loss and every lease's. Here
    // 1 300 paths of ~930 bytes; the same 1.2 MB is ~20 000 paths of 50–60 bytes.
    await withProxy(async (proxy) => {
      const root = await lastingPath('rv2-setwatches');
      const adminConnection = await connect();
      const admin = adminConnection.session!;
      const long = 'k'.repeat(900);
      const paths = Array.from({ length: 1300 }, (_, i) => `${root}/${long}-${i}`);
      await Promise.all([...paths, `${root}/held`].map((p) => admin.create(p, EMPTY, CreateMode.PERSISTENT)));
      try {
        const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 4_000 });
        const session = e.connection.session!;
        let lost = false;
        e.connection.on('lost', () => (lost = true));
        const locks = paths.map((p) => new Mutex(e, 'w', p, { coalesce: false }));
        const lease = await new Mutex(e, 'held', `${root}/held`, { coalesce: false }).acquire();
        void lease.signal; // its node watch armed

        // Control: one hold alone per path (records, no path watch yet): the reconnect works.
        await Promise.all(locks.map((l) => cycles(l, 1)));
        let reconnected = nextEvent(e.connection, 'reconnected', 10_000);
        proxy.restore();
        await reconnected;
        await within(session.exists('/'), 5_000, 'a request after the control reconnect');

        // The records went with the disconnection: two more holds alone per path (a record, then
        // the path watch at the second).
        await Promise.all(locks.map((l) => cycles(l, 2)));
        // As many as the budget takes are watched (all their exists replies in), the others not.
        const table = watchesOf(session);
        await eventually(() => [...table.byPath.values()].every((w) => w.armed), 10_000, 50);
        const armed = paths.filter((p) => shortcutArmed(e, p) !== undefined).length;
        expect(armed).toBeGreaterThan(100);
        expect(armed).toBeLessThan(paths.length);
        expect(table.bytes).toBeLessThanOrEqual(512 * 1024);
        reconnected = nextEvent(e.connection, 'reconnected', 10_000);
        proxy.restore();
        await reconnected.catch(() => undefined);
        await delay(6_000); // past the session timeout
        expect({ lost, aborted: lease.signal.aborted, sameSession: e.connection.session === session }).toEqual({
          lost: false,
          aborted: false,
          sameSession: true,
        });
        await within(session.exists('/'), 5_000, 'a request after the reconnect');
        await lease.release();
      } finally {
        await deleteTree(adminConnection, root);
      }
    });
  }, 60_000);
});
