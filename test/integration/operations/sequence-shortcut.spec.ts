// Holding without a listing (SequenceShortcut): where our node was last alone, the number of our
// next create proves the queue holds it alone, under a watch on the lock path. These tests check
// ZooKeeper's numbering the proof stands on, that the shortcut is taken (two requests per
// acquisition, as raw create+delete), and that anything else in the queue since our release (a
// contender, a foreign node of any kind, the path made again) makes us list and queue instead.
import type { Lease } from '../../../lib/core/leases/lease.js';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { watchesOf } from '../../../lib/core/operations/sequence-shortcut.js';
import { sequenceOf } from '../../../lib/core/paths.js';
import { CreateMode, ZkPerm, type ZkSession } from '../../../lib/core/client/session.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { childrenOf, closeAll, connect, deleteTree, engine, eventually, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { countRequests, cycles, delay, lastingPath, nameOf, notAcquired, recordCreates, shortcutArmed, untilChildCount, within, withProxy } from '../../support/lock-test-helpers.js';
import { seededRun } from '../../support/prng.js';
import { foreignLock, foreignTryOnce, holderLedger } from '../../support/churn.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../../support/curator-peer.js';
import { TcpProxy } from '../../support/tcp-proxy.js';

afterEach(closeAll);

const EMPTY = Buffer.alloc(0);

/** A process that used `path` alone three times: its next acquire there expects the next number. */
async function warmedUp(path: string, e?: LockEngine) {
  e ??= await engine();
  const lock = new Mutex(e, 'shortcut', path);
  const leases = await cycles(lock, 3);
  return { e, lock, lastSequence: sequenceOf(nameOf(leases.at(-1)!))! };
}

describe('ZooKeeper numbering (what the shortcut stands on)', () => {
  it("a sequential node's number counts every child ever created under its parent (sequential or not), not deletes; a parent made again counts from 0", async () => {
    const c = await connect();
    const s = c.session!;
    const parent = uniquePath('numbering');
    await s.create('/it', EMPTY, CreateMode.PERSISTENT).catch(() => undefined);
    await s.create(parent, EMPTY, CreateMode.PERSISTENT); // (a container could be reaped while empty)
    const seq = async () => sequenceOf(await s.create(`${parent}/n-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL))!;
    const first = await seq();
    expect(first).toBe(0);
    await s.delete(`${parent}/n-${String(first).padStart(10, '0')}`);
    expect(await seq()).toBe(1); // the delete did not count
    await s.create(`${parent}/plain`, EMPTY, CreateMode.EPHEMERAL);
    expect(await seq()).toBe(3); // the plain create did
    for (const child of await s.getChildren(parent).then((r) => r.children)) await s.delete(`${parent}/${child}`);
    await s.delete(parent);
    await s.create(parent, EMPTY, CreateMode.PERSISTENT);
    expect(await seq()).toBe(0);
    await s.delete(`${parent}/n-0000000000`);
    await s.delete(parent);
  });
});

describe('Holding without a listing where our node was last alone', () => {
  it('a key that comes back costs a create and a delete per acquisition (no listing), with fencing tokens still increasing', async () => {
    const path = await lastingPath('shortcut-cost');
    const { e, lock } = await warmedUp(path);
    const counts = countRequests(e.connection.session!);
    const leases = await cycles(lock, 20);
    expect(counts).toEqual({ create: 20, delete: 20 });
    const tokens = leases.map((l) => l.fencingToken);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
  });

  it('the first uses of a key cost what they did: the path watch is set at the second hold alone, one exists per path', async () => {
    const path = await lastingPath('shortcut-first');
    const e = await engine();
    const lock = new Mutex(e, 'shortcut', path);
    await cycles(lock, 1); // the path is made here
    const counts = countRequests(e.connection.session!);
    await cycles(lock, 1);
    expect(counts).toEqual({ create: 1, getChildren: 1, exists: 1, delete: 1 });
    await cycles(lock, 1);
    expect(counts).toEqual({ create: 2, getChildren: 1, exists: 1, delete: 2 });
  });

  for (const [label, foreign] of [
    ['a contender that queued and left', async (s: ZkSession, p: string) => s.delete(await s.create(`${p}/_c_x-lock-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL))],
    ['a plain node, deleted again', async (s: ZkSession, p: string) => s.delete(await s.create(`${p}/plain`, EMPTY, CreateMode.EPHEMERAL))],
  ] as const) {
    it(`a node made in the queue since our release (${label}) makes us list, and we hold`, async () => {
      const path = await lastingPath('shortcut-moved');
      const { e, lock } = await warmedUp(path);
      const other = await connect();
      await foreign(other.session!, path);
      const counts = countRequests(e.connection.session!);
      const lease = await lock.acquire();
      expect(counts.getChildren).toBe(1);
      await lease.release();
    });
  }

  it('a contender that still waits in the queue: we list and do not hold', async () => {
    const path = await lastingPath('shortcut-contender');
    const { lock } = await warmedUp(path);
    const other = await engine();
    const theirs = await new Mutex(other, 'theirs', path, { coalesce: false }).acquire();
    await notAcquired(lock.acquire({ waitMs: 0 }));
    const waiting = lock.acquire();
    await theirs.release();
    await (await waiting).release();
  });

  it('two acquires of one process at once (a node each): one number matches, the other lists and waits', async () => {
    const path = await lastingPath('shortcut-twice');
    const e = await engine();
    const lock = new Mutex(e, 'twice', path, { coalesce: false, reentrant: false });
    await cycles(lock, 3);
    const observer = await connect();
    const [a, b] = [lock.acquire(), lock.acquire()];
    const first = await a;
    await untilChildCount(observer, path, 2);
    expect(first.isHeld).toBe(true);
    let secondHeld = false;
    void b.then(() => (secondHeld = true));
    await new Promise((r) => setTimeout(r, 200));
    expect(secondHeld).toBe(false);
    await first.release();
    await (await b).release();
  });

  it('the path deleted and made again (numbering from 0) up to our number, its first node held: we do not hold, even with the deletion event still on its way when our create goes', async () => {
    const path = await lastingPath('shortcut-recreated');
    const proxy = await TcpProxy.start(process.env.ZK_CONNECT!);
    try {
      const { e, lock, lastSequence } = await warmedUp(path, await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 }));
      const foreign = (await connect()).session!;
      // Our client hears nothing more for now: the deletion event waits in the proxy.
      proxy.slowReplies(0);
      await foreign.delete(path);
      await foreign.create(path, EMPTY, CreateMode.CONTAINER);
      const names: string[] = [];
      while (names.length <= lastSequence) names.push(await foreign.create(`${path}/_c_f-lock-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL));
      for (const name of names.slice(1)) await foreign.delete(name);
      // The foreign head holds; the next number is the one we expect.
      expect(await childrenOf(await connect(), path)).toEqual([names[0]!.slice(path.length + 1)]);
      // What our process knew still stands (the event has not come): the create goes with the shortcut.
      expect(e.ops.shortcut.expect(e.connection.session!, path)).toMatchObject({ sequence: lastSequence + 1 });
      const attempt = lock.acquire({ waitMs: 0 });
      await new Promise((r) => setTimeout(r, 50)); // our create is sent before the event reached us
      proxy.forward();
      await notAcquired(attempt);
      expect(e.connection.state).toBe('connected');
    } finally {
      proxy.forward();
      await closeAll();
      await proxy.close();
    }
  });

  it('a lock path reaped behind our back is made again with the node in one round trip (its deletion was heard)', async () => {
    const path = await lastingPath('shortcut-reaped');
    const { e, lock } = await warmedUp(path);
    expect(e.ops.shortcut.expect(e.connection.session!, path)).toBeDefined(); // the path is watched
    await (await connect()).session!.delete(path);
    const outcomes = recordCreates(e.connection.session!, (p) => (p === path ? 'path' : 'node'));
    await eventually(() => !e.ops.paths.has(path), 10_000, 10);
    const lease = await lock.acquire();
    expect(outcomes).toEqual(['path ok', 'node ok']);
    await lease.release();
  });

  it('a path made again since our last use starts over: its first hold there sets no path watch (a key used once per reaper interval pays no exists), the second does, the third holds on its number', async () => {
    const path = await lastingPath('shortcut-new-incarnation');
    const { e, lock } = await warmedUp(path);
    expect(e.ops.shortcut.expect(e.connection.session!, path)).toBeDefined(); // the path is watched
    // Made again by someone else (persistent, so that the test server's reaper leaves it alone).
    const other = (await connect()).session!;
    await other.delete(path);
    await eventually(() => !e.ops.paths.has(path), 10_000, 10); // the deletion was heard
    await other.create(path, EMPTY, CreateMode.PERSISTENT);
    const counts = countRequests(e.connection.session!);
    await cycles(lock, 1);
    expect([counts.exists ?? 0, counts.getChildren]).toEqual([0, 1]);
    await cycles(lock, 1);
    expect([counts.exists, counts.getChildren]).toEqual([1, 2]);
    await cycles(lock, 1);
    expect([counts.exists, counts.getChildren]).toEqual([1, 2]);
  });

  it('after a disconnection the next acquire lists (nothing is taken from before it)', async () => {
    const path = await lastingPath('shortcut-reconnect');
    const proxy = await TcpProxy.start(process.env.ZK_CONNECT!);
    try {
      const { e, lock } = await warmedUp(path, await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 }));
      const reconnected = nextEvent(e.connection, 'reconnected');
      proxy.restore();
      await reconnected;
      const counts = countRequests(e.connection.session!);
      await cycles(lock, 1);
      expect(counts.getChildren).toBe(1);
    } finally {
      await closeAll();
      await proxy.close();
    }
  });
});

// What holding without a listing (SequenceShortcut) keeps, and for how long: an engine shut down on
// a connection that outlives it leaves no connection listener and nothing of itself in the
// session's path watches; the path watches the shortcut keeps stay within a byte budget, so that
// the same session still reconnects with many lock paths watched.
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

// Holding without a listing (SequenceShortcut) where the queue changes between our release and our
// next create. Each test puts the shortcut in place (asserting `ops.shortcut.expect` is defined, so
// it cannot pass trivially) and then makes the queue change in a way the proof must catch: foreign
// nodes of every recipe, Curator, the lock path made again (by a foreign client, by our own idle
// sweep) with its events held back by a proxy, lost and delayed replies, partitions, session
// expiry, concurrency inside one process, our own session's other nodes (a refused delete, a second
// engine on the session, a downgraded read node, a record evicted while its create is in flight),
// and seeded churn. The invariant checked everywhere: never two holders, nothing left behind,
// fencing tokens rise.
describe('foreign nodes in the queue between our release and our next create', () => {
  it('a foreign mutex node that stays (created after our release): we neither hold nor hold on a second try, and hold once it goes', async () => {
    const path = await lastingPath('rv-stay');
    const e = await engine();
    const lock = new Mutex(e, 'stay', path, { coalesce: false });
    await cycles(lock, 3);
    expect(shortcutArmed(e, path)).toBeDefined();
    const foreign = (await connect()).session!;
    const theirs = await foreignLock(foreign, path);
    await notAcquired(lock.acquire({ waitMs: 0 }));
    await notAcquired(lock.acquire({ waitMs: 200 }));
    await e.drain();
    expect(await childrenOf(await connect(), path)).toEqual([theirs.slice(path.length + 1)]);
    const waiting = lock.acquire();
    await delay(100);
    await foreign.delete(theirs);
    const lease = await within(waiting, 10_000, 'after the foreign node went');
    expect(await childrenOf(await connect(), path)).toEqual([nameOf(lease)]);
    await lease.release();
  });

  it('a foreign create racing our create in the same instant (pipelined from another session): exactly one of the two is the head, and we hold only if ours is', async () => {
    for (let round = 0; round < 8; round++) {
      const path = await lastingPath('rv-race');
      const e = await engine();
      const lock = new Mutex(e, 'race', path, { coalesce: false });
      await cycles(lock, 3);
      expect(shortcutArmed(e, path)).toBeDefined();
      const foreign = (await connect()).session!;
      const [ours, theirs] = await Promise.allSettled([lock.acquire({ waitMs: 0 }), foreignLock(foreign, path)]);
      const theirName = (theirs as PromiseFulfilledResult<string>).value.slice(path.length + 1);
      const head = (await childrenOf(await connect(), path)).sort((a, b) => sequenceOf(a)! - sequenceOf(b)!)[0];
      if (ours.status === 'fulfilled') {
        expect(head).toBe(nameOf(ours.value));
        await ours.value.release();
      } else {
        expect(head).toBe(theirName);
      }
      await foreign.delete(`${path}/${theirName}`);
      await closeAll();
    }
  });

  it('read/write lock: a foreign __READ__ node after our write release blocks our write; a foreign __WRIT__ node after our read release blocks our read', async () => {
    const path = await lastingPath('rv-rw');
    const e = await engine();
    const rw = new ReadWriteLock(e, 'rw', path);
    await cycles(rw.write, 3);
    expect(shortcutArmed(e, path)).toBeDefined();
    const foreign = (await connect()).session!;
    const reader = await foreignLock(foreign, path, '__READ__');
    await notAcquired(rw.write.acquire({ waitMs: 0 }));
    // Our read shares with the foreign reader (that is right), then a foreign writer queues behind.
    const read = await rw.read.acquire();
    await read.release();
    await foreign.delete(reader);
    await cycles(rw.read, 3);
    expect(shortcutArmed(e, path)).toBeDefined();
    const writer = await foreignLock(foreign, path, '__WRIT__');
    await notAcquired(rw.read.acquire({ waitMs: 0 }));
    await notAcquired(rw.write.acquire({ waitMs: 0 }));
    await foreign.delete(writer);
    await e.drain();
    expect(await childrenOf(await connect(), path)).toEqual([]);
  });

  it('semaphore (permits 1): a foreign lease node in leases since our release keeps us out; the internal lock shortcut does not let a lease through', async () => {
    const path = await lastingPath('rv-sem', ['locks', 'leases']);
    const e = await engine();
    const sem = new Semaphore(e, 'sem', path, { permits: 1 });
    await cycles(sem, 3);
    expect(shortcutArmed(e, `${path}/leases`)).toBeDefined();
    expect(shortcutArmed(e, `${path}/locks`)).toBeDefined();
    const foreign = (await connect()).session!;
    const lease = await foreignLock(foreign, `${path}/leases`, 'lease-');
    await notAcquired(sem.acquire({ waitMs: 300 }));
    await foreign.delete(lease);
    const ours = await sem.acquire();
    expect(await childrenOf(await connect(), `${path}/leases`)).toEqual([nameOf(ours)]);
    await ours.release();
    await e.drain();
    expect(await childrenOf(await connect(), `${path}/leases`)).toEqual([]);
    expect(await childrenOf(await connect(), `${path}/locks`)).toEqual([]);
  });

  it('leadership: a participant stepping down alone again and again (shortcut) and a second one joining: never two leaders', async () => {
    const path = await lastingPath('rv-lead');
    const [ea, eb] = await Promise.all([engine(), engine()]);
    const a = new Leadership(ea, 'lead', path).start();
    let leaders = 0;
    let max = 0;
    for (const l of [a]) {
      l.on('gained', () => ((leaders += 1), (max = Math.max(max, leaders))));
      l.on('lost', () => (leaders -= 1));
    }
    let shortcuts = 0;
    const confirm = ea.ops.shortcut.confirm.bind(ea.ops.shortcut);
    ea.ops.shortcut.confirm = (...args) => {
      const result = confirm(...args);
      if (result) shortcuts++;
      return result;
    };
    for (let i = 0; i < 5; i++) {
      await a.whenLeader();
      await a.stepDown();
    }
    await a.whenLeader();
    expect(shortcuts).toBeGreaterThan(0); // terms were won without a listing
    const b = new Leadership(eb, 'lead', path);
    b.on('gained', () => ((leaders += 1), (max = Math.max(max, leaders))));
    b.on('lost', () => (leaders -= 1));
    b.start();
    await untilChildCount(await connect(), path, 2);
    for (let i = 0; i < 6; i++) {
      const leader = a.isLeader ? a : b.isLeader ? b : (await Promise.race([a.whenLeader(), b.whenLeader()]), a.isLeader ? a : b);
      expect(a.isLeader && b.isLeader).toBe(false);
      await leader.stepDown();
    }
    expect(max).toBe(1);
    await Promise.all([a.close(), b.close()]);
  });
});

const curatorUnavailable = curatorPeerUnavailableReason();
(curatorUnavailable ? describe.skip : describe)('Curator InterProcessMutex in the same path', () => {
  let curator: CuratorPeer;
  beforeAll(async () => {
    curator = await CuratorPeer.start(zkConnectString());
  }, 60_000);
  afterAll(async () => {
    await curator?.close();
  });

  it('Curator takes the lock between our release and our next acquire: we do not hold; Curator queues and leaves: we list and hold; racing acquires never overlap', async () => {
    const path = await lastingPath('rv-curator');
    const e = await engine();
    const lock = new Mutex(e, 'cur', path, { coalesce: false });
    await curator.mutex('m', path);
    await cycles(lock, 3);
    expect(shortcutArmed(e, path)).toBeDefined();
    expect(await curator.acquire('m', 5000)).toBe(true);
    await notAcquired(lock.acquire({ waitMs: 0 }));
    await curator.release('m');
    await cycles(lock, 2);
    expect(shortcutArmed(e, path)).toBeDefined();
    // Curator queues and gives up (a timed acquire that succeeds at once then releases): a create since our release.
    expect(await curator.acquire('m', 5000)).toBe(true);
    await curator.release('m');
    const counts = countRequests(e.connection.session!);
    const lease = await lock.acquire();
    expect(counts.getChildren).toBe(1);
    await lease.release();
    // Race: both acquire at once, several times; whoever holds first, the other does not until it lets go.
    for (let i = 0; i < 5; i++) {
      let oursHeld = false;
      let theirsHeld = false;
      const ours = lock.acquire({ waitMs: 15_000 }).then((l) => ((oursHeld = true), l));
      const theirs = curator.acquire('m', 15_000).then((ok) => ((theirsHeld = ok), ok));
      await Promise.race([ours, theirs]);
      await delay(150);
      expect(oursHeld && theirsHeld).toBe(false);
      if (oursHeld) {
        expect(await curator.isAcquired('m')).toBe(false);
        await (await ours).release();
        expect(await theirs).toBe(true);
        await curator.release('m');
      } else {
        expect(theirsHeld).toBe(true);
        await curator.release('m');
        await (await ours).release();
      }
    }
    await e.drain();
    await eventually(async () => (await childrenOf(await connect(), path)).length === 0, 10_000);
  });
});

describe('the lock path deleted and made again, its events held back', () => {
  it('by our own idle sweep: the path swept (reply and event held), made again and numbered up to ours by a foreign holder: we do not hold', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-sweep');
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lock = new Mutex(e, 'sweep', path, { coalesce: false });
      const leases = await cycles(lock, 3);
      const last = sequenceOf(nameOf(leases.at(-1)!))!;
      expect(shortcutArmed(e, path)).toMatchObject({ sequence: last + 1 });
      // The path counts as ours (as if we had made it as a container) and idle: the sweep deletes it.
      e.ops.paths.made(path);
      e.ops.paths.released(path);
      proxy.slowReplies(0);
      (e.ops.paths as unknown as { sweep(early: number): void }).sweep(1);
      const observer = await connect();
      await eventually(async () => (await observer.session!.exists(path)) === null, 10_000, 20);
      const foreign = (await connect()).session!;
      await foreign.create(path, EMPTY, CreateMode.PERSISTENT);
      const names: string[] = [];
      while (names.length <= last) names.push(await foreignLock(foreign, path));
      for (const name of names.slice(1)) await foreign.delete(name);
      expect(shortcutArmed(e, path)).toMatchObject({ sequence: last + 1 }); // nothing heard yet
      const attempt = lock.acquire({ waitMs: 0 });
      await delay(50);
      proxy.forward();
      await notAcquired(attempt);
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([names[0]!.slice(path.length + 1)]);
    });
  });

  it('by a foreign client, our create sent while the path is missing (NONODE held back), then made again and numbered up to ours: we do not hold', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-nonode');
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lock = new Mutex(e, 'nonode', path, { coalesce: false });
      const leases = await cycles(lock, 3);
      const last = sequenceOf(nameOf(leases.at(-1)!))!;
      expect(shortcutArmed(e, path)).toBeDefined();
      const foreign = (await connect()).session!;
      proxy.slowReplies(0);
      await foreign.delete(path);
      const attempt = lock.acquire({ waitMs: 0 }); // its create fails NONODE (answer held)
      await delay(50);
      await foreign.create(path, EMPTY, CreateMode.PERSISTENT);
      const names: string[] = [];
      // Number up to the one a retried create would get if it went without a listing.
      while (names.length <= last + 1) names.push(await foreignLock(foreign, path));
      for (const name of names.slice(1)) await foreign.delete(name);
      proxy.forward();
      await notAcquired(attempt);
      await e.drain();
      expect(await childrenOf(await connect(), path)).toEqual([names[0]!.slice(path.length + 1)]);
    });
  });

  it('a setData on the path (changed) with its event held back, and a foreign holder since: we do not hold; the shortcut comes back afterwards', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-setdata');
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lock = new Mutex(e, 'setdata', path, { coalesce: false });
      await cycles(lock, 3);
      expect(shortcutArmed(e, path)).toBeDefined();
      const foreign = (await connect()).session!;
      proxy.slowReplies(0);
      await foreign.setData(path, Buffer.from('x'));
      const theirs = await foreignLock(foreign, path);
      const attempt = lock.acquire({ waitMs: 0 });
      await delay(50);
      proxy.forward();
      await notAcquired(attempt);
      await foreign.delete(theirs);
      await e.drain();
      await cycles(lock, 2);
      expect(shortcutArmed(e, path)).toBeDefined();
      const counts = countRequests(e.connection.session!);
      await cycles(lock, 3);
      expect(counts).toEqual({ create: 3, delete: 3 });
    });
  });
});

describe('our delete delayed or lost, partitions, session expiry', () => {
  it('release and acquire in the same tick with all answers held: the create goes after the delete; a foreign contender sent meanwhile does not hold with us', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-sametick');
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lock = new Mutex(e, 'tick', path, { coalesce: false });
      await cycles(lock, 3);
      const lease = await lock.acquire();
      expect(e.ops.shortcut.expect(e.connection.session!, path)).toBeUndefined(); // consumed by this hold
      proxy.slowReplies(0);
      void lease.release();
      expect(shortcutArmed(e, path)).toBeDefined();
      const ours = lock.acquire({ waitMs: 10_000 });
      const other = await engine();
      const theirs = new Mutex(other, 'tick', path, { coalesce: false }).acquire({ waitMs: 10_000 });
      await untilChildCount(await connect(), path, 2);
      let theirsHeld = false;
      void theirs.then(() => (theirsHeld = true), () => undefined);
      proxy.forward();
      const held = await within(ours, 10_000, 'ours');
      await delay(200);
      expect(theirsHeld).toBe(false);
      await held.release();
      await (await theirs).release();
    });
  });

  it("our delete's answer lost (the link then drops): the next acquire lists, holds once, and nothing stays behind", async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-lostdelete');
      // Our session must outlive the cut: between `suspended` (2/3 of its timeout) and the point
      // where we count it lost there is time for the foreign acquire and the reconnect, under
      // load too (the other engine is made before the cut).
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8_000 });
      const other = await engine();
      const lock = new Mutex(e, 'lost', path, { coalesce: false });
      await cycles(lock, 3);
      const lease = await lock.acquire();
      proxy.dropReplies();
      const suspended = nextEvent(e.connection, 'suspended');
      const released = lease.release();
      expect(shortcutArmed(e, path)).toBeDefined();
      const ours = lock.acquire({ waitMs: 20_000 }); // sent with the shortcut; its answer is lost too
      await suspended;
      expect(shortcutArmed(e, path)).toBeUndefined(); // forgotten on the disconnection
      const theirs = new Mutex(other, 'lost', path, { coalesce: false }).acquire({ waitMs: 20_000 });
      let theirsHeld = false;
      void theirs.then(() => (theirsHeld = true), () => undefined);
      proxy.restore();
      await released;
      const held = await within(ours, 20_000, 'ours after the reconnect');
      expect(theirsHeld).toBe(false);
      expect((await childrenOf(await connect(), path)).filter((c) => c === nameOf(held))).toHaveLength(1);
      await held.release();
      await (await theirs).release();
      await Promise.all([e.drain(), other.drain()]);
      expect(await childrenOf(await connect(), path)).toEqual([]);
    });
  });

  it('a silent partition between release and re-acquire: the records go with the connection; a foreign holder meanwhile keeps us out', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-blackhole');
      // As above: room for the foreign acquire and the reconnect before our session counts as lost.
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8_000 });
      const other = await engine();
      const lock = new Mutex(e, 'bh', path, { coalesce: false });
      await cycles(lock, 3);
      expect(shortcutArmed(e, path)).toBeDefined();
      const suspended = nextEvent(e.connection, 'suspended');
      proxy.blackhole();
      await suspended;
      const theirs = await new Mutex(other, 'bh', path, { coalesce: false }).acquire();
      const reconnected = nextEvent(e.connection, 'reconnected');
      proxy.restore();
      await reconnected;
      expect(shortcutArmed(e, path)).toBeUndefined();
      await notAcquired(lock.acquire({ waitMs: 0 }));
      await theirs.release();
      await (await lock.acquire()).release();
    });
  });

  it('session expiry between release and re-acquire: the old session\'s record is not used in the new one; a foreign holder keeps us out', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rv-expiry');
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lock = new Mutex(e, 'exp', path, { coalesce: false });
      await cycles(lock, 3);
      expect(shortcutArmed(e, path)).toBeDefined();
      const old = e.connection.session!;
      const suspended = nextEvent(e.connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(old.id, old.password);
      const connected = nextEvent(e.connection, 'connected');
      proxy.restore();
      await connected;
      expect(e.connection.session).not.toBe(old);
      expect(e.ops.shortcut.expect(old, path)).toBeUndefined();
      expect(shortcutArmed(e, path)).toBeUndefined();
      const other = await engine();
      const theirs = await new Mutex(other, 'exp', path, { coalesce: false }).acquire();
      await notAcquired(lock.acquire({ waitMs: 0 }));
      await theirs.release();
      const counts = countRequests(e.connection.session!);
      await (await lock.acquire()).release();
      expect(counts.getChildren).toBe(1);
    });
  });
});

describe('one process, many acquires', () => {
  for (const coalesce of [false, true]) {
    it(`20 concurrent acquires on a warmed-up key (coalesce: ${coalesce}) and a foreign engine's 5: one holder at a time, tokens strictly increasing in hold order`, async () => {
      const path = await lastingPath(`rv-many-${coalesce}`);
      const [e, f] = await Promise.all([engine(), engine()]);
      const lock = new Mutex(e, 'many', path, { coalesce, reentrant: false });
      const theirLock = new Mutex(f, 'many', path, { coalesce: false });
      await cycles(lock, 3);
      expect(shortcutArmed(e, path)).toBeDefined();
      let holders = 0;
      let max = 0;
      const tokens: bigint[] = [];
      const run = async (l: Mutex) => {
        const lease = await l.acquire({ waitMs: 30_000 });
        holders++;
        max = Math.max(max, holders);
        tokens.push(lease.fencingToken);
        await delay(Math.random() * 5);
        expect(lease.signal.aborted).toBe(false);
        holders--;
        await lease.release();
      };
      await Promise.all([...Array.from({ length: 20 }, () => run(lock)), ...Array.from({ length: 5 }, () => run(theirLock))]);
      expect(max).toBe(1);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
      await Promise.all([e.drain(), f.drain()]);
      expect(await childrenOf(await connect(), path)).toEqual([]);
    });
  }

  it('retainMs, re-entrant holds and leaseMs expiry on a shortcut key: a foreign engine that takes the lock in between is never overlapped', async () => {
    const path = await lastingPath('rv-retain');
    const [e, f] = await Promise.all([engine(), engine()]);
    const retained = new Mutex(e, 'r', path, { retainMs: 100 });
    const observer = await connect();
    for (let i = 0; i < 3; i++) {
      await cycles(retained, 2); // the second one takes the kept node
      await eventually(async () => (await childrenOf(observer, path)).length === 0, 5_000, 20); // kept 100 ms
    }
    expect(shortcutArmed(e, path)).toBeDefined();
    const theirs = new Mutex(f, 'r', path, { coalesce: false });
    const held = await theirs.acquire();
    await notAcquired(retained.acquire({ waitMs: 0 }));
    await held.release();
    // Re-entrant: the inner release frees nothing; the outer one records the release.
    const reentrant = new Mutex(e, 'r2', path, { coalesce: false, reentrant: true });
    await cycles(reentrant, 2);
    expect(shortcutArmed(e, path)).toBeDefined();
    await reentrant.withLock(async () => {
      const inner = await within(reentrant.acquire(), 5_000, 're-entered');
      await inner.release();
      await notAcquired(theirs.acquire({ waitMs: 0 }));
    });
    expect(shortcutArmed(e, path)).toBeDefined();
    // leaseMs: the lease ends itself (signal aborts), its node goes, the foreign engine takes it; ours must then wait.
    const timed = new Mutex(e, 'r3', path, { coalesce: false, leaseMs: 150 });
    await cycles(timed, 2);
    expect(shortcutArmed(e, path)).toBeDefined();
    const expiring = await timed.acquire();
    const aborted = new Promise((r) => expiring.signal.addEventListener('abort', r));
    const theirsAfter = theirs.acquire({ waitMs: 5_000 });
    await aborted;
    const taken = await theirsAfter;
    await notAcquired(timed.acquire({ waitMs: 0 }));
    await taken.release();
    await Promise.all([e.drain(), f.drain()]);
  });
});

describe('our own session\'s other nodes and records: a refused delete, a second engine, a downgrade, an evicted record', () => {
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
});

describe('seeded churn', () => {
  it('3 engines (one session each) and a raw foreign client on 3 keys for ~12 s: never two holders, tokens strictly increasing, shortcuts taken, nothing left behind', async () => {
    const { random, pick } = seededRun('CHURN_SEED', 'sequence-shortcut churn');
    const keys = [await lastingPath('rv-churn-a'), await lastingPath('rv-churn-b'), uniquePath('rv-churn-c')];
    const persistent = new Set(keys.slice(0, 2));
    const engines = await Promise.all([engine({}, { maxIdleLockPaths: 0 }), engine(), engine()]);
    let shortcuts = 0;
    for (const e of engines) {
      const confirm = e.ops.shortcut.confirm.bind(e.ops.shortcut);
      e.ops.shortcut.confirm = (...args) => {
        const result = confirm(...args);
        if (result) shortcuts++;
        return result;
      };
    }
    const ledger = holderLedger(keys);
    const { violations, enter, leave } = ledger;
    const deadline = Date.now() + 12_000;
    let acquisitions = 0;

    const worker = async (e: LockEngine, index: number) => {
      const locks = keys.map((key) => {
        const coalesce = random() < 0.5;
        return new Mutex(e, `churn-${index}`, key, { coalesce, retainMs: coalesce && random() < 0.3 ? 20 : 0 });
      });
      while (Date.now() < deadline) {
        const i = Math.floor(random() * keys.length);
        const key = keys[i]!;
        let lease: Lease;
        try {
          lease = await locks[i]!.acquire({ waitMs: pick([0, 0, 2_000]) });
        } catch {
          continue;
        }
        acquisitions++;
        let counted = true;
        enter(key, `engine ${e.id}`);
        ledger.token(key, lease.fencingToken);
        lease.signal.addEventListener('abort', () => {
          if (counted) leave(key);
          counted = false;
        });
        if (random() < 0.5) await delay(random() * 4);
        if (ledger.holders(key) > 1) violations.push(`engine ${e.id} saw another holder of ${key} before releasing`);
        if (counted) leave(key);
        counted = false;
        const released = lease.release();
        if (random() < 0.5) await released; // else: the next acquire goes in the same tick as the release
      }
    };

    const raw = await connect();
    const foreign = async () => {
      const s = raw.session!;
      while (Date.now() < deadline) {
        const key = pick(keys);
        const op = random();
        try {
          if (op < 0.4) {
            await foreignTryOnce(s, key, ledger, () => delay(random() * 4));
          } else if (op < 0.55) {
            await s.delete(await s.create(`${key}/plain-${Math.floor(random() * 1e9)}`, EMPTY, CreateMode.EPHEMERAL));
          } else if (op < 0.65) {
            await s.setData(key, Buffer.from(String(random())));
          } else if (op < 0.8) {
            // The path made again (what a reaper or another process's sweep does), when empty.
            await s.delete(key);
            if (persistent.has(key) || random() < 0.5) await s.create(key, EMPTY, persistent.has(key) ? CreateMode.PERSISTENT : CreateMode.CONTAINER);
          } else {
            await delay(random() * 10);
          }
        } catch {
          // NOTEMPTY, NONODE, NODEEXISTS: the race is the point
        }
      }
    };

    await Promise.all([...engines.flatMap((e, i) => [worker(e, i), worker(e, i + 10)]), foreign(), foreign()]);
    console.log(`churn: ${acquisitions} acquisitions by the engines, ${shortcuts} by the shortcut`);
    expect(violations).toEqual([]);
    expect(acquisitions).toBeGreaterThan(50);
    expect(shortcuts).toBeGreaterThan(0);
    await Promise.all(engines.map((e) => e.drain()));
    const observer = await connect();
    for (const key of keys) await eventually(async () => (await childrenOf(observer, key)).length === 0, 10_000);
  }, 40_000);
});

describe('the in-memory ZooKeeper of the testing kit', () => {
  it('numbers like the real server (creates only, from 0 in a path made again), so the shortcut is taken there too and a path made again and numbered up to ours keeps us out', async () => {
    const { InMemoryZooKeeper } = await import('../../../lib/testing/in-memory-zookeeper.js');
    const server = new InMemoryZooKeeper();
    const opened: ZkConnection[] = [];
    const open = async () => {
      const c = new ZkConnection({ connectString: 'in-memory:2181', sessionTimeoutMs: 4000 }, server.sessionFactory());
      opened.push(c);
      await c.connect();
      return c;
    };
    try {
      const admin = (await open()).session!;
      const path = '/lk';
      await admin.create(path, EMPTY, CreateMode.PERSISTENT);
      const e = new LockEngine(await open(), { app: 'jest' });
      const lock = new Mutex(e, 'mem', path, { coalesce: false });
      const leases = await cycles(lock, 3);
      const last = sequenceOf(nameOf(leases.at(-1)!))!;
      expect(shortcutArmed(e, path)).toMatchObject({ sequence: last + 1 });
      const counts = countRequests(e.connection.session!);
      await cycles(lock, 2);
      expect(counts).toEqual({ create: 2, delete: 2 });
      await admin.delete(path);
      await admin.create(path, EMPTY, CreateMode.PERSISTENT);
      const names: string[] = [];
      while (names.length <= last + 2) names.push(await foreignLock(admin, path));
      for (const name of names.slice(1)) await admin.delete(name);
      await notAcquired(lock.acquire({ waitMs: 0 }));
      await e.drain();
      expect((await admin.getChildren(path)).children).toEqual([names[0]!.slice(path.length + 1)]);
    } finally {
      await Promise.all(opened.map((c) => c.close()));
    }
  });
});
