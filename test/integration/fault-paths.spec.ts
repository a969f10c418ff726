// The fault paths of the safety review (issue #13): each test reproduces one way the promise
// "while lease.signal has not aborted, nobody else holds the lock" was broken, or one way an
// acquire or release hung, starved or leaked. Real ZooKeeper; one client behind a TcpProxy.
import diagnostics_channel from 'node:diagnostics_channel';
import { TRY_ONCE_BOUND_MS } from '../../lib/core/queue/cancellation.js';
import { ZkPerm } from '../../lib/core/client/session.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, nextEvent, uniquePath, zkConnectString } from '../support/helpers.js';
import { delay, nameOf, notAcquired, untilChildCount, untilWatching, whenAborted } from '../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);

let proxy: TcpProxy;
beforeEach(async () => {
  proxy = await TcpProxy.start(zkConnectString());
});
afterEach(async () => {
  await proxy.close();
});

describe('mutual exclusion under faults', () => {
  it('a holder made by the "predecessor was head" shortcut and silenced right after that event loses its signal before the server can expire its session', async () => {
    // The deletion event reaches V without the server hearing from V; V's last packet is older.
    // The server expires V's session one timeout after it last heard from V, not after the event.
    const timeoutMs = 4000;
    const path = uniquePath('shortcut-silent');
    const observer = await connect();
    const first = await new Mutex(await engine(), 'ss', path).acquire();
    const v = await engine({ connectString: proxy.connectString, sessionTimeoutMs: timeoutMs });
    const vWaiting = new Mutex(v, 'ss', path).acquire({ waitMs: 30_000 });
    vWaiting.catch(() => undefined);
    await untilChildCount(observer, path, 2);
    await untilWatching(first.path, v.connection.sessionId!);
    let wAcquiredAt = Infinity;
    const wWaiting = new Mutex(await engine(), 'ss', path).acquire({ waitMs: 60_000 }).then((lease) => ((wAcquiredAt = Date.now()), lease));
    wWaiting.catch(() => undefined);
    await untilChildCount(observer, path, 3);

    // Release when V has sent nothing for a moment (its heartbeat, a sync, goes every T/20 = 200 ms
    // once the newest one answered is that old), so the server last heard from V before the event.
    await eventually(() => Date.now() - proxy.lastClientPacketAt >= 120, 20_000, 2);
    const silenced = proxy.blackholeAfterNotification();
    await first.release();
    await silenced;
    const lease: Lease = await vWaiting; // held through the shortcut, with nothing sent
    const serverLastHeardAt = proxy.lastClientPacketAt;
    const reason = await whenAborted(lease.signal, 20_000);
    const abortedAt = Date.now();
    expect(reason).toMatchObject({ reason: 'session-timeout' });
    // The server may expire the session from serverLastHeardAt + timeout on.
    expect(abortedAt - serverLastHeardAt).toBeLessThanOrEqual(timeoutMs);
    const next = await wWaiting;
    expect(wAcquiredAt).toBeGreaterThanOrEqual(abortedAt);
    await next.release();
  }, 60_000);

  it('after the event loop was blocked past the deadline, signal.aborted and lease.isHeld say so at once, before any timer ran', async () => {
    const timeoutMs = 2000;
    const h = await engine({ sessionTimeoutMs: timeoutMs });
    const lease = await new Mutex(h, 'stall', uniquePath('stall')).acquire();
    const signal = lease.signal;
    expect(lease.isHeld).toBe(true);
    const until = performance.now() + timeoutMs + 200;
    while (performance.now() < until); // a stall: no timer, no I/O callback runs
    expect(() => signal.throwIfAborted()).toThrow(); // what `signal.throwIfAborted(); write()` does first
    const heldAfterStall = lease.isHeld;
    expect({ heldAfterStall, aborted: signal.aborted }).toEqual({ heldAfterStall: false, aborted: true });
    expect(signal.reason).toMatchObject({ reason: 'session-timeout' });
  });
});

describe.each([
  ['one node per caller', false],
  ['coalesced (local holder)', true],
])('shutdown with a critical section in flight (%s)', (_label, coalesce) => {
  it('keeps the lock while the holder finishes within shutdownGraceMs, then deletes its node', async () => {
    const observer = await connect();
    const path = uniquePath('shutdown-grace');
    const e = await engine({}, { shutdownGraceMs: 20_000, coalesce });
    const lease = await new Mutex(e, 'sg', path).acquire();
    const signal = lease.signal;
    let otherAcquiredAt = Infinity;
    const other = new Mutex(await engine(), 'sg', path).acquire({ waitMs: 30_000 }).then((l) => ((otherAcquiredAt = Date.now()), l));
    other.catch(() => undefined);
    await untilChildCount(observer, path, 2);

    const shuttingDown = e.shutdown();
    await delay(500);
    // Still inside the critical section: nobody else may hold, and the lock is ours.
    expect({ otherAcquiredAt, held: lease.isHeld, aborted: signal.aborted }).toEqual({ otherAcquiredAt: Infinity, held: true, aborted: false });
    expect(await childrenOf(observer, path)).toContain(nameOf(lease));
    const releasedAt = Date.now();
    await lease.release();
    await shuttingDown;
    const next = await other;
    expect(otherAcquiredAt).toBeGreaterThanOrEqual(releasedAt);
    expect(signal.aborted).toBe(false); // released, not lost
    await next.release();
  });

  it('past shutdownGraceMs aborts the holder\'s signal (reason "shutdown") before its node is deleted', async () => {
    const observer = await connect();
    const path = uniquePath('shutdown-abort');
    const e = await engine({}, { shutdownGraceMs: 300, coalesce });
    const lease = await new Mutex(e, 'sa', path).acquire();
    let abortedAt = Infinity;
    lease.signal.addEventListener('abort', () => (abortedAt = Date.now()));
    let otherAcquiredAt = Infinity;
    const other = new Mutex(await engine(), 'sa', path).acquire({ waitMs: 30_000 }).then((l) => ((otherAcquiredAt = Date.now()), l));
    other.catch(() => undefined);
    await untilChildCount(observer, path, 2);

    await e.shutdown();
    expect(lease.signal.reason).toMatchObject({ name: 'LockLostError', reason: 'shutdown' });
    expect(lease.isHeld).toBe(false);
    const next = await other;
    expect(otherAcquiredAt).toBeGreaterThanOrEqual(abortedAt);
    expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
    await lease.release(); // the holder's own release afterwards is a no-op
    expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
    await next.release();
  });
});

describe('a foreign write to a held lock node does not blind deletion detection', () => {
  it('a plain lease: set, then delete by another client, aborts the signal', async () => {
    const observer = await connect();
    const path = uniquePath('set-then-delete');
    const lease = await new Mutex(await engine(), 'sd', path, { coalesce: false }).acquire();
    const signal = lease.signal;
    await untilWatching(lease.path, lease.sessionId);
    await observer.session!.setData(lease.path, Buffer.from('__REVOKE__'));
    await untilWatching(lease.path, lease.sessionId); // armed again
    await observer.session!.delete(lease.path);
    expect(await whenAborted(signal, 10_000)).toMatchObject({ reason: 'node-deleted' });
    expect(lease.isHeld).toBe(false);
  });

  it('coalesced: after set + delete, the next local caller is not handed the deleted node while another process holds', async () => {
    const observer = await connect();
    const path = uniquePath('set-then-delete-local');
    const e = await engine();
    const mutex = new Mutex(e, 'sdl', path);
    const first = await mutex.acquire();
    const firstSignal = first.signal;
    const second = mutex.acquire({ waitMs: 30_000 }); // waits in memory for a local handoff
    second.catch(() => undefined);
    const other = new Mutex(await engine(), 'sdl', path).acquire({ waitMs: 30_000 });
    other.catch(() => undefined);
    await untilChildCount(observer, path, 2);
    await untilWatching(first.path, first.sessionId);

    await observer.session!.setData(first.path, Buffer.from('x'));
    await untilWatching(first.path, first.sessionId);
    await observer.session!.delete(first.path); // the other process is next: it holds now
    const otherLease = await other;
    expect(await whenAborted(firstSignal, 10_000)).toMatchObject({ reason: 'node-deleted' });
    await first.release();
    let secondAt = Infinity;
    void second.then(() => (secondAt = Date.now()));
    await delay(500);
    expect(secondAt).toBe(Infinity); // not handed the deleted node
    const otherReleasedAt = Date.now();
    await otherLease.release();
    const secondLease = await second;
    expect(secondAt).toBeGreaterThanOrEqual(otherReleasedAt);
    expect(secondLease.path).not.toBe(first.path);
    await secondLease.release();
  });

  it('a waiter next in line whose node was set, then deleted, does not take the "predecessor was head" shortcut', async () => {
    const observer = await connect();
    const path = uniquePath('set-then-delete-waiter');
    const holder = await new Mutex(await engine(), 'sdw', path).acquire();
    const v = await engine();
    let vAt = Infinity;
    const vWaiting = new Mutex(v, 'sdw', path).acquire({ waitMs: 30_000 }).then((l) => ((vAt = Date.now()), l));
    vWaiting.catch(() => undefined);
    const [, vNode] = (await untilChildCount(observer, path, 2)).sort((a, b) => a.slice(-10).localeCompare(b.slice(-10)));
    await untilWatching(`${path}/${vNode}`, v.connection.sessionId!); // V's own-node watch
    let wAt = Infinity;
    const wWaiting = new Mutex(await engine(), 'sdw', path).acquire({ waitMs: 30_000 }).then((l) => ((wAt = Date.now()), l));
    wWaiting.catch(() => undefined);
    await untilChildCount(observer, path, 3);

    await observer.session!.setData(`${path}/${vNode}`, Buffer.from('x'));
    await untilWatching(`${path}/${vNode}`, v.connection.sessionId!);
    await observer.session!.delete(`${path}/${vNode}`);
    await untilChildCount(observer, path, 3); // V queued again, behind W
    await holder.release();
    const w = await wWaiting;
    await delay(300);
    expect(vAt).toBe(Infinity); // W holds: V must still wait
    await w.release();
    const vLease = await vWaiting;
    expect(vAt).toBeGreaterThanOrEqual(wAt);
    await vLease.release();
  });
});

describe.each([
  ['one node per caller', false],
  ['coalesced', true],
])('acquires settle within their bound whatever the connection does (%s)', (_label, coalesce) => {
  async function timed<T>(work: Promise<T>): Promise<{ ms: number; error: unknown }> {
    const started = Date.now();
    const error = await work.then(
      () => undefined,
      (e: unknown) => e,
    );
    return { ms: Date.now() - started, error };
  }

  it('while disconnected: try-once fails at once with reason "connection", a bounded wait at its bound with "connection"; no listener is left behind', async () => {
    const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 }, { coalesce });
    const mutex = new Mutex(e, 'out', uniquePath('outage'));
    const stateListeners = e.connection.listenerCount('state');
    const suspended = nextEvent(e.connection, 'suspended');
    proxy.cut();
    await suspended;

    const tryOnce = await timed(mutex.acquire({ waitMs: 0 }));
    expect(tryOnce.error).toMatchObject({ name: 'LockNotAcquiredError', reason: 'connection' });
    expect(tryOnce.ms).toBeLessThan(1000);
    await expect(mutex.tryAcquire()).rejects.toMatchObject({ reason: 'connection' }); // an outage is not "taken"
    const waits = await Promise.all([timed(mutex.acquire({ waitMs: 1500 })), timed(mutex.acquire({ waitMs: 1500 }))]);
    for (const wait of waits) {
      expect(wait.error).toMatchObject({ name: 'LockNotAcquiredError', reason: 'connection' });
      expect(wait.ms).toBeLessThan(1500 + 1000);
    }
    expect(e.connection.listenerCount('state')).toBe(stateListeners);
    proxy.restore();
    await nextEvent(e.connection, 'reconnected');
    const lease = await mutex.acquire({ waitMs: 0 });
    await lease.release();
  });

  it('behind a silent partition (the client still thinks it is connected): try-once settles within its bound with reason "connection"', async () => {
    const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 }, { coalesce });
    const mutex = new Mutex(e, 'sil', uniquePath('silent-try'));
    proxy.blackhole();
    const tryOnce = await timed(mutex.acquire({ waitMs: 0 }));
    expect(tryOnce.error).toMatchObject({ name: 'LockNotAcquiredError', reason: 'connection' });
    expect(tryOnce.ms).toBeLessThan(TRY_ONCE_BOUND_MS + 1000);
    proxy.restore();
  });
});

describe('coalescing keeps its fairness bound after a blip', () => {
  it('when the listing that arms the queue watch fails, local handoffs stay within maxLocalHandoffs once another process waits', async () => {
    const path = uniquePath('bound-after-blip');
    const a = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 }, { maxLocalHandoffs: 2 });
    const mutex = new Mutex(a, 'bb', path);
    const first = await mutex.acquire();
    void first.signal; // arms the node's watch now, so a later handoff needs only the queue listing
    await untilWatching(first.path, first.sessionId);

    // The next request's reply is lost, then the link drops: it fails with a connection loss.
    proxy.dropReplies();
    let holds = 0;
    let stop = false;
    const loops = [0, 1].map(async () => {
      while (!stop) {
        const lease = await mutex.acquire({ waitMs: 60_000 });
        holds++;
        await delay(50); // long next to the time the news of a new waiter takes on a busy machine
        await lease.release();
      }
    });
    await delay(300); // the local callers' queue listing (with its watch) is in flight
    const suspended = nextEvent(a.connection, 'suspended');
    proxy.cut();
    await suspended;
    const reconnected = nextEvent(a.connection, 'reconnected');
    proxy.restore();
    await reconnected;
    await first.release();
    await eventually(() => holds >= 3, 20_000, 5);

    const observer = await connect();
    const otherMutex = new Mutex(await engine(), 'bb', path);
    const waiting = otherMutex.acquire({ waitMs: 10_000 }).catch((e: unknown) => e);
    await untilChildCount(observer, path, 2); // the other process queues
    const before = holds;
    const other = await waiting;
    const holdsWhileOtherWaited = holds - before;
    stop = true;
    if (!(other instanceof Error)) await (other as Lease).release();
    await Promise.allSettled(loops);
    expect(other).not.toBeInstanceOf(Error);
    expect(holdsWhileOtherWaited).toBeLessThanOrEqual(2 + 3); // the bound, plus holds under way while the news travels
  });
});

describe('a release that cannot delete its node says so', () => {
  it.each([
    ['one node per caller', false],
    ['coalesced', true],
  ])('NOAUTH after an ACL change (%s): a warning and a releaseFailed event, and release() still resolves', async (_label, coalesce) => {
    const observer = await connect();
    const path = uniquePath('release-noauth');
    const e = await engine({}, { coalesce });
    const warnings: string[] = [];
    e.onWarning((message) => warnings.push(message));
    const events: unknown[] = [];
    const onEvent = (message: unknown) => events.push(message);
    diagnostics_channel.subscribe('nestjs-zk-lock:release-failed', onEvent);
    try {
      const lease = await new Mutex(e, 'rn', path).acquire();
      // Deleting a child needs DELETE on its parent: take it away.
      await observer.session!.setAcl(path, [{ perms: ZkPerm.ALL & ~ZkPerm.DELETE, scheme: 'world', id: 'anyone' }]);
      await lease.release();
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([nameOf(lease)]); // still there: the lock stays taken
      expect(warnings).toEqual([expect.stringContaining(`Could not delete lock node ${lease.path}`)]);
      expect(events).toEqual([expect.objectContaining({ path: lease.path, lockPath: path, kind: 'mutex', error: expect.objectContaining({ codeName: 'NOAUTH' }) })]);
    } finally {
      diagnostics_channel.unsubscribe('nestjs-zk-lock:release-failed', onEvent);
      await observer.session!.setAcl(path, [{ perms: ZkPerm.ALL, scheme: 'world', id: 'anyone' }]);
    }
  });
});

describe('a semaphore try-once never waits for a connection', () => {
  it('while disconnected and behind a silent link: reason "connection", within the bound', async () => {
    const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 });
    const semaphore = new Semaphore(e, 'sem-out', uniquePath('sem-outage'), { permits: 2 });
    proxy.blackhole();
    let started = Date.now();
    await expect(semaphore.acquire({ waitMs: 0 })).rejects.toMatchObject({ name: 'LockNotAcquiredError', reason: 'connection' });
    expect(Date.now() - started).toBeLessThan(TRY_ONCE_BOUND_MS + 1000);
    proxy.cut();
    await eventually(() => e.connection.state === 'suspended', 20_000, 20);
    started = Date.now();
    await expect(semaphore.tryAcquire()).rejects.toMatchObject({ reason: 'connection' });
    expect(Date.now() - started).toBeLessThan(1000);
    proxy.restore();
  });
});
