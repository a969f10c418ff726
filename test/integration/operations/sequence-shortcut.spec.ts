// Holding without a listing (SequenceShortcut): where our node was last alone, the number of our
// next create proves the queue holds it alone, under a watch on the lock path. These tests check
// ZooKeeper's numbering the proof stands on, that the shortcut is taken (two requests per
// acquisition, as raw create+delete), and that anything else in the queue since our release (a
// contender, a foreign node of any kind, the path made again) makes us list and queue instead.
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { sequenceOf } from '../../../lib/core/paths.js';
import { CreateMode, type ZkSession } from '../../../lib/core/client/session.js';
import { childrenOf, closeAll, connect, engine, eventually, nextEvent, uniquePath } from '../../support/helpers.js';
import { countRequests, cycles, lastingPath, nameOf, notAcquired, recordCreates, untilChildCount } from '../../support/lock-test-helpers.js';
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
