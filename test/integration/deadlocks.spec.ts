// Deadlocks across sessions (lib/core/deadlocks.ts) against a real ZooKeeper, each engine on a
// connection of its own (as separate processes look to ZooKeeper): what a nested waiter's node
// says it holds, the cycle broken by one DeadlockError (the wait that began last), cycles
// reported (inspectDeadlocks, withDeadlocks, deadlocksOf) and near-cycles that are not.
// The same across processes, and a churn run: deadlocks-processes.spec.ts.
import { randomUUID } from 'node:crypto';
import { DeadlockError, InvalidOptionError, LockNotAcquiredError, type Deadlock } from '../../lib/core/errors.js';
import { cycleThrough, deadlocksOf, inspectDeadlocks, withDeadlocks } from '../../lib/core/deadlocks.js';
import { inspectLock, inspectLocks, readLockAt } from '../../lib/core/inspect.js';
import type { LockEngine, LockEngineOptions } from '../../lib/core/lock-engine.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { MultiLock } from '../../lib/core/recipes/multi-lock.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { CreateMode } from '../../lib/core/client/session.js';
import { parseHolderData } from '../../lib/core/operations/holder-data.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath } from '../support/helpers.js';

afterEach(closeAll);
afterAll(closeAll);

/** A gate a test opens when it wants a held section to go on. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

/** Waits until `path` has `count` children. */
async function untilChildren(observer: ZkConnection, path: string, count: number): Promise<void> {
  await eventually(async () => (await childrenOf(observer, path)).length === count, 20_000, 10);
}

/** The data of each node under `path`, in queue order. */
async function nodeData(observer: ZkConnection, path: string) {
  const info = await inspectLock(observer, path);
  return [...(info?.holders ?? []), ...(info?.waiting ?? [])].map((c) => c.holder);
}

interface Chain {
  /** Resolves once the chain holds its first lock. */
  holdsFirst: Promise<void>;
  /** Lets it acquire its second (nested, still holding the first). */
  go: () => void;
  /** Settles with what the nested acquire did: 'acquired' or its error. */
  outcome: Promise<unknown>;
  /** Lets the chain's sections end. */
  finish: () => void;
}

/**
 * A call chain that takes `first`, then at `go` (nested, still holding it) waits for `second`;
 * once it has both it waits for `finish`. The nested acquire's outcome is reported either way.
 */
function chain(first: Mutex, second: Mutex, waitMs = 30_000): Chain {
  const held = gate();
  const go = gate();
  const done = gate();
  let report!: (value: unknown) => void;
  const outcome = new Promise<unknown>((resolve) => (report = resolve));
  void first
    .withLock(async () => {
      held.open();
      await go.wait;
      try {
        await second.withLock(async () => {
          report('acquired');
          await done.wait;
        }, { waitMs });
      } catch (error) {
        report(error);
      }
    })
    .catch(report);
  return { holdsFirst: held.wait, go: go.open, outcome, finish: done.open };
}

/** Starts `chains` holding their first locks, then lets them wait one after the other (each queued before the next goes). */
async function closeInTurn(observer: ZkConnection, chains: readonly Chain[], waitedIn: readonly string[]): Promise<void> {
  await Promise.all(chains.map((c) => c.holdsFirst));
  for (let i = 0; i < chains.length; i++) {
    chains[i]!.go();
    if (i < chains.length - 1) await untilChildren(observer, waitedIn[i]!, 2);
  }
}

async function engines(count: number, options: LockEngineOptions = {}): Promise<LockEngine[]> {
  return Promise.all(Array.from({ length: count }, (_, i) => engine({}, { app: 'deadlocks', instance: `p${i}`, ...options })));
}

/** Lock i of each engine, at the same paths. */
function mutexes(engine: LockEngine, paths: readonly string[]): Mutex[] {
  return paths.map((path, i) => new Mutex(engine, `event:${i}`, path));
}

describe('the option', () => {
  it("deadlockDetection takes 'fail', 'report' or 'off'; anything else is an InvalidOptionError naming it", async () => {
    await expect(engine({}, { deadlockDetection: 'never' as never })).rejects.toThrow(/Invalid option "deadlockDetection": expected 'fail', 'report' or 'off', got "never"/);
    await expect(engine({}, { deadlockDetection: true as never })).rejects.toBeInstanceOf(InvalidOptionError);
  });

  it("'off': a nested acquire writes no holds and coalesces as any other", async () => {
    const [a, b] = await engines(2, { deadlockDetection: 'off' });
    const observer = await connect();
    const root = uniquePath('off');
    const [p1, p2] = [`${root}/one`, `${root}/two`];
    const holder = await new Mutex(b!, 'two', p2).acquire();
    const plain = new Mutex(a!, 'two', p2).acquire({ waitMs: 20_000 }); // the process's node
    await untilChildren(observer, p2, 2);
    const nested = new Mutex(a!, 'one', p1).withLock(() => new Mutex(a!, 'two', p2).acquire({ waitMs: 20_000 }));
    await eventually(() => a!.localQueueCount === 2, 10_000, 10); // waits in memory behind it
    expect((await nodeData(observer, p2)).map((d) => d.holds)).toEqual([undefined, undefined]);
    await holder.release();
    await (await plain).release();
    await (await nested).release();
  });
});

describe('what a waiting node says it holds', () => {
  it('a nested waiter names the locks its call chain holds; a plain waiter does not', async () => {
    const [a, b] = await engines(2);
    const observer = await connect();
    const root = uniquePath('holds');
    const [p1, p2] = [`${root}/one`, `${root}/two`];
    const holder = await new Mutex(b!, 'two', p2).acquire();
    const nested = new Mutex(a!, 'one', p1).withLock(() => new Mutex(a!, 'two', p2).acquire({ waitMs: 20_000 }));
    await untilChildren(observer, p2, 2);
    const plain = new Mutex(a!, 'two', p2, { coalesce: false }).acquire({ waitMs: 20_000 });
    await untilChildren(observer, p2, 3);
    const [, nestedData, plainData] = await nodeData(observer, p2);
    expect(nestedData).toMatchObject({ app: 'deadlocks', instance: 'p0', holds: [p1] });
    expect(plainData).not.toHaveProperty('holds');
    await holder.release();
    await (await nested).release();
    await (await plain).release();
  });

  it('when a lease named in holds is released while its chain still waits, the node is made again without it', async () => {
    const [a, b] = await engines(2);
    const observer = await connect();
    const root = uniquePath('stale');
    const [p1, p2] = [`${root}/one`, `${root}/two`];
    const holder = await new Mutex(b!, 'two', p2).acquire();
    // Work started inside the section and not awaited: it waits after the section released.
    let background!: Promise<Lease>;
    await new Mutex(a!, 'one', p1).withLock(async () => {
      background = new Mutex(a!, 'two', p2).acquire({ waitMs: 20_000 });
      await untilChildren(observer, p2, 2);
      expect((await nodeData(observer, p2))[1]).toMatchObject({ holds: [p1] });
    });
    await eventually(async () => {
      const data = await nodeData(observer, p2);
      return data.length === 2 && data[1]!.holds === undefined;
    }, 20_000, 20);
    await holder.release();
    await (await background).release();
  });
});

describe('a cycle of waits', () => {
  it('two sessions: the wait that began last fails at once with a DeadlockError naming both; the other acquires', async () => {
    const [a, b] = await engines(2);
    const observer = await connect();
    const root = uniquePath('cycle2');
    const paths = [`${root}/event:1`, `${root}/event:2`];
    const [a1, a2] = mutexes(a!, paths);
    const [b1, b2] = mutexes(b!, paths);
    const first = chain(a1!, a2!);
    const second = chain(b2!, b1!);
    // a waits for event:2, then b's wait for event:1 closes the cycle: it began last.
    await Promise.all([first.holdsFirst, second.holdsFirst]);
    first.go();
    await untilChildren(observer, paths[1]!, 2);
    const started = Date.now();
    second.go();
    const lateOutcome = await second.outcome;
    const tookMs = Date.now() - started;
    expect(lateOutcome).toBeInstanceOf(DeadlockError);
    const error = lateOutcome as DeadlockError;
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect(error.reason).toBe('deadlock');
    expect(error.lockName).toBe('event:0');
    const members = error.deadlock.members;
    expect(members.map((m) => [m.lock, m.waitsFor, m.holder.instance])).toEqual([
      [paths[1], paths[0], 'p1'],
      [paths[0], paths[1], 'p0'],
    ]);
    expect(members[0]!.sessionId).toBe(b!.connection.sessionId);
    expect(members[1]!.sessionId).toBe(a!.connection.sessionId);
    expect(members[1]!.holdingNode.startsWith(`${paths[0]}/`)).toBe(true);
    expect(error.message).toContain('deadlock');
    process.stdout.write(`deadlock of two sessions broken ${tookMs} ms after the last wait began\n`);
    // It only ended a wait: its node is gone (the error comes once the delete is done).
    expect((await childrenOf(observer, paths[0]!)).length).toBe(1);
    expect(tookMs).toBeLessThan(5_000);
    // Its node is gone and its chain let event:2 go: the first chain goes on.
    await expect(first.outcome).resolves.toBe('acquired');
    first.finish();
  });

  it('three sessions: one DeadlockError, and the other two acquire in turn', async () => {
    const es = await engines(3);
    const observer = await connect();
    const root = uniquePath('cycle3');
    const paths = [`${root}/a`, `${root}/b`, `${root}/c`];
    const chains = es.map((e, i) => chain(mutexes(e, paths)[i]!, mutexes(e, paths)[(i + 1) % 3]!));
    await closeInTurn(observer, chains, [paths[1]!, paths[2]!, paths[0]!]);
    const started = Date.now();
    const outcome = await chains[2]!.outcome;
    process.stdout.write(`deadlock of three sessions broken ${Date.now() - started} ms after the last wait began\n`);
    expect(outcome).toBeInstanceOf(DeadlockError);
    const members = (outcome as DeadlockError).deadlock.members;
    expect(members.map((m) => m.waitsFor)).toEqual([paths[0], paths[1], paths[2]]);
    expect(members.map((m) => m.lock)).toEqual([paths[2], paths[0], paths[1]]);
    expect(members.map((m) => m.holder.instance)).toEqual(['p2', 'p0', 'p1']);
    await expect(chains[1]!.outcome).resolves.toBe('acquired');
    chains[1]!.finish();
    await expect(chains[0]!.outcome).resolves.toBe('acquired');
    chains[0]!.finish();
  });

  it('a multi-lock in progress holds its first members while it waits for the next', async () => {
    const [a, b] = await engines(2);
    const observer = await connect();
    const root = uniquePath('multi');
    const paths = [`${root}/1`, `${root}/2`];
    // b holds /2 and will wait for /1; a's multi-lock takes /1 (canonical order) then waits for /2.
    const second = chain(mutexes(b!, paths)[1]!, mutexes(b!, paths)[0]!);
    await second.holdsFirst;
    const multi = new MultiLock(mutexes(a!, paths)).acquire({ waitMs: 30_000 });
    await untilChildren(observer, paths[1]!, 2);
    expect((await nodeData(observer, paths[1]!))[1]).toMatchObject({ holds: [paths[0]] });
    // b's wait for /1 closes the cycle.
    second.go();
    const outcome = await second.outcome;
    expect(outcome).toBeInstanceOf(DeadlockError);
    await (await multi).release();
  });

  it('a read-write lock: a writer waiting behind a reader in a cycle', async () => {
    const [a, b] = await engines(2);
    const observer = await connect();
    const root = uniquePath('rw');
    const [rwPath, mPath] = [`${root}/rw`, `${root}/m`];
    // b holds m; a reads rw, then waits for m; b then waits to write rw: the cycle closes.
    const bHolds = gate();
    const bGo = gate();
    const bOutcome = new Mutex(b!, 'm', mPath).withLock(async () => {
      bHolds.open();
      await bGo.wait;
      return new ReadWriteLock(b!, 'rw', rwPath).write.withLock(() => 'written', { waitMs: 30_000 });
    });
    await bHolds.wait;
    const done = gate();
    const aWaits = new ReadWriteLock(a!, 'rw', rwPath).read.withLock(() => new Mutex(a!, 'm', mPath).withLock(() => done.wait, { waitMs: 30_000 }));
    await untilChildren(observer, mPath, 2);
    bGo.open();
    const error = await bOutcome.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlockError);
    expect((error as DeadlockError).deadlock.members.map((m) => [m.lock, m.waitsFor])).toEqual([
      [mPath, rwPath],
      [rwPath, mPath],
    ]);
    done.open();
    await aWaits;
  });
});

describe('reported cycles', () => {
  it("with deadlockDetection 'report' nobody fails; inspectDeadlocks, withDeadlocks and deadlocksOf report the cycle", async () => {
    const es = await engines(2, { deadlockDetection: 'report' });
    const observer = await connect();
    const root = uniquePath('report');
    const paths = [`${root}/x`, `${root}/y`];
    const chains = [chain(mutexes(es[0]!, paths)[0]!, mutexes(es[0]!, paths)[1]!, 60_000), chain(mutexes(es[1]!, paths)[1]!, mutexes(es[1]!, paths)[0]!, 60_000)];
    await closeInTurn(observer, chains, [paths[1]!, paths[0]!]);
    await untilChildren(observer, paths[0]!, 2);
    await untilChildren(observer, paths[1]!, 2);

    const expectCycle = (found: readonly Deadlock[]) => {
      expect(found).toHaveLength(1);
      expect(found[0]!.members.map((m) => [m.lock, m.waitsFor, m.holder.instance])).toEqual([
        [paths[1], paths[0], 'p1'],
        [paths[0], paths[1], 'p0'],
      ]);
    };
    await eventually(async () => (await inspectDeadlocks(observer, root)).length === 1, 10_000, 50);
    expectCycle(await inspectDeadlocks(observer, root));
    const locks = await withDeadlocks(observer, await inspectLocks(observer, root));
    expect(locks.map((l) => l.deadlocks?.length)).toEqual([1, 1]);
    expectCycle(locks[0]!.deadlocks!);
    expectCycle(await deadlocksOf(es[0]!));
    expectCycle(await deadlocksOf(es[1]!));
    // Nobody gave up.
    const pending = Symbol('pending');
    expect(await Promise.race([chains[0]!.outcome, chains[1]!.outcome, new Promise((r) => setTimeout(() => r(pending), 300))])).toBe(pending);
    // Shut down one engine: its waits give up, its chain releases, the other chain acquires.
    await es[1]!.shutdown();
    await expect(chains[1]!.outcome).resolves.toBeInstanceOf(LockNotAcquiredError);
    await expect(chains[0]!.outcome).resolves.toBe('acquired');
    chains[0]!.finish();
    expect(await inspectDeadlocks(observer, root)).toEqual([]);
    expect(await deadlocksOf(es[0]!)).toEqual([]);
  });
});

describe('near-cycles are not reported', () => {
  it('a waiter whose holder is about to release (it waits for nothing) is no cycle', async () => {
    const [a, b] = await engines(2);
    const observer = await connect();
    const root = uniquePath('near');
    const paths = [`${root}/1`, `${root}/2`];
    const holder = await mutexes(b!, paths)[1]!.acquire();
    const waiter = chain(mutexes(a!, paths)[0]!, mutexes(a!, paths)[1]!);
    await closeInTurn(observer, [waiter], [paths[1]!]);
    await untilChildren(observer, paths[1]!, 2);
    expect(await inspectDeadlocks(observer, root)).toEqual([]);
    expect(await deadlocksOf(a!)).toEqual([]);
    // The holder tries once for the lock a holds: no wait, no cycle.
    await expect(mutexes(b!, paths)[0]!.tryAcquire()).resolves.toBeNull();
    await holder.release();
    await expect(waiter.outcome).resolves.toBe('acquired');
    waiter.finish();
  });

  it('a cycle broken while it is being read is not reported (the second reading misses a member)', async () => {
    // A cycle with a member made by hand (nodes of a raw session, as a process of another
    // library version would leave them): the engine's waiter is not the one to give up, so the
    // cycle stays until the test breaks it.
    const [a] = await engines(1, { deadlockDetection: 'report' });
    const raw = await connect();
    const root = uniquePath('broken');
    const [p1, p2] = [`${root}/1`, `${root}/2`];
    const outcome = chain(mutexes(a!, [p1, p2])[0]!, mutexes(a!, [p1, p2])[1]!);
    await outcome.holdsFirst;
    // The raw member holds /2 ... (made before a waits there, so a queues behind it)
    await ensure(raw, p2);
    const rawHold = await raw.session!.create(`${p2}/_c_${randomUUID()}-lock-`, Buffer.from('{"host":"raw"}'), CreateMode.EPHEMERAL_SEQUENTIAL);
    outcome.go();
    await untilChildren(raw, p2, 2);
    // ... and waits for /1, which a holds: the wait that began last is the raw one.
    const data = JSON.stringify({ host: 'raw', pid: 1, createdAt: new Date().toISOString(), holds: [p2] });
    const rawWait = await raw.session!.create(`${p1}/_c_${randomUUID()}-lock-`, Buffer.from(data), CreateMode.EPHEMERAL_SEQUENTIAL);
    expect(parseHolderData(Buffer.from(data)).holds).toEqual([p2]);

    const [ourWait] = [...a!.holdingWaits];
    expect(ourWait).toBeDefined();
    expect(await cycleThrough(ourWait!)).toBeDefined();
    const listing = await inspectLocks(raw, root);
    // Broken after the first reading: the raw member gives up.
    let reads = 0;
    const found = await cycleThrough(ourWait!, async (path) => {
      if (++reads === 3) await raw.session!.delete(rawWait);
      return readLockAt(raw.session!, path);
    });
    expect(reads).toBeGreaterThan(2);
    expect(found).toBeUndefined();
    // The listing taken before still shows it; confirming it reads again and drops it.
    expect((await withDeadlocks(raw, listing)).some((l) => l.deadlocks)).toBe(false);
    expect(await inspectDeadlocks(raw, root)).toEqual([]);
    await raw.session!.delete(rawHold);
    await expect(outcome.outcome).resolves.toBe('acquired');
    outcome.finish();
  });
});

async function ensure(connection: ZkConnection, path: string): Promise<void> {
  const parts = path.split('/').filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    await connection.session!.create(`/${parts.slice(0, i).join('/')}`, Buffer.alloc(0), CreateMode.PERSISTENT).catch((error: unknown) => {
      if ((error as { codeName?: string }).codeName !== 'NODEEXISTS') throw error;
    });
  }
}
