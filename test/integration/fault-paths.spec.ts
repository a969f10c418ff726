// The fault paths of the safety review (issue #13): each test reproduces one way the promise
// "while lease.signal has not aborted, nobody else holds the lock" was broken, or one way an
// acquire or release hung, starved or leaked. Real ZooKeeper; one client behind a TcpProxy.
import { Mutex } from '../../lib/core/mutex.js';
import type { Lease } from '../../lib/core/lease.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath, zkConnectString } from '../support/helpers.js';
import { delay, nameOf, untilChildCount, untilWatching } from '../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);

let proxy: TcpProxy;
beforeEach(async () => {
  proxy = await TcpProxy.start(zkConnectString());
});
afterEach(async () => {
  await proxy.close();
});

function whenAborted(signal: AbortSignal, timeoutMs = 30_000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const timer = setTimeout(() => reject(new Error(`signal did not abort within ${timeoutMs} ms`)), timeoutMs);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve(signal.reason)), { once: true });
  });
}

describe('mutual exclusion under faults', () => {
  it('a holder made by the "predecessor was head" shortcut and silenced right after that event loses its signal before the server can expire its session', async () => {
    // The deletion event reaches V without the server hearing from V; V's last packet is older.
    // The server expires V's session one timeout after it last heard from V, not after the event.
    const timeoutMs = 3000;
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

    // Release when V has sent nothing for a while (it pings only after a third of its timeout).
    await eventually(() => Date.now() - proxy.lastClientPacketAt >= 600, 20_000, 5);
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

  it('after the event loop was blocked past the deadline, lease.isHeld answers false at once, before any timer ran', async () => {
    const timeoutMs = 2000;
    const h = await engine({ sessionTimeoutMs: timeoutMs });
    const lease = await new Mutex(h, 'stall', uniquePath('stall')).acquire();
    const signal = lease.signal;
    expect(lease.isHeld).toBe(true);
    const until = performance.now() + timeoutMs + 200;
    while (performance.now() < until); // a stall: no timer, no I/O callback runs
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
