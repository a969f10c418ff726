// What holding without a listing (SequenceShortcut) keeps, and for how long: an engine shut down on
// a connection that outlives it leaves no connection listener and nothing of itself in the
// session's path watches; the path watches the shortcut keeps stay within a byte budget, so that
// the same session still reconnects with many lock paths watched.
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { watchesOf } from '../../../lib/core/operations/sequence-shortcut.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { closeAll, connect, deleteTree, engine, eventually, nextEvent } from '../../support/helpers.js';
import { cycles, delay, lastingPath, shortcutArmed, within, withProxy } from '../../support/lock-test-helpers.js';

afterEach(closeAll);

const EMPTY = Buffer.alloc(0);

describe('the shortcut\'s connection listeners and path watches', () => {
  // (Guards against the shortcut listening to the connection itself and never stopping: a
  // connection may outlive its engines, ZkLockModule.forRoot({ connection }).)
  it('an engine shut down on a connection that outlives it leaves no connection listener behind', async () => {
    const connection = await connect();
    const before = connection.listenerCount('state');
    for (let i = 0; i < 3; i++) {
      const e = new LockEngine(connection, { app: 'jest' });
      await e.shutdown();
    }
    expect(connection.listenerCount('state')).toBe(before);
  });

  // (Guards against nothing forgetting the path watches at shutdown.) The C client keeps a
  // watch until it fires, so the session keeps the path's watch (in a table of its own, counted
  // against the reconnect packet's budget); what must not stay is anything of the engine.
  it('an engine shut down on a connection that outlives it leaves nothing of it in the session\'s path watches', async () => {
    const connection = await connect();
    const path = await lastingPath('rv-shutdown-watch');
    const e = new LockEngine(connection, { app: 'jest' });
    await cycles(new Mutex(e, 'w', path, { coalesce: false }), 3);
    expect(shortcutArmed(e, path)).toBeDefined();
    const watch = watchesOf(connection.session!).byPath.get(path)!;
    expect(watch.onFired.size).toBe(1);
    await e.shutdown();
    expect(watch.onFired.size).toBe(0);
    expect((e.ops.shortcut as unknown as { records: Map<string, unknown> }).records.size).toBe(0);
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
