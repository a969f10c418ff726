// Review of be9fb02 (the adaptive in-flight window of NativeZkSession) and d6b3875 (addon fix 8:
// every reply the socket holds, up to 256, in one readable callback), against the real ZooKeeper.
// Each test names the interleaving it covers.
import { Mutex } from '../../lib/core/mutex.js';
import type { Lease } from '../../lib/core/lease.js';
import { CreateMode, addonFixVersion, type NativeZkSession } from '../../lib/core/zk-session.js';
import { ZkCode, ZkError } from '../../lib/core/zk-error.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { closeAll, connect, deleteTree, engine, eventually, exists, nextEvent, uniquePath, zkConnectString } from '../support/helpers.js';
import { whenAborted, within } from '../support/lock-test-helpers.js';

afterAll(closeAll);

/** The session's private window and counters (read only, to say where the window stood). */
function windowOf(session: unknown): { window: number; inFlight: number; backlog: number } {
  const s = session as { window: number; inFlight: number; backlog: { size: number } };
  return { window: s.window, inFlight: s.inFlight, backlog: s.backlog.size };
}

async function parentAndNode(session: NativeZkSession | { create: NativeZkSession['create'] }, label: string): Promise<string> {
  const path = uniquePath(label);
  await session.create(path.slice(0, path.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
  await session.create(path, Buffer.alloc(0), CreateMode.EPHEMERAL);
  return path;
}

describe('adaptive window (be9fb02)', () => {
  let proxy: TcpProxy;
  beforeEach(async () => {
    proxy = await TcpProxy.start(zkConnectString());
  });
  afterEach(async () => {
    await closeAll();
    await proxy.close();
  });

  // From FINDING 1 of the review: the window grows while the server is fast; the server then
  // slows down (GC, disk, a loaded machine). What is in flight cannot be called back, so the
  // window bounds the round trip it grew under (T/16): a slowdown that answers what is in flight
  // within 0.8 s is survived by halving the window; with a fixed window of 1 000 the queue at the
  // server stays 1 000 deep and its answers come later than the deadline allows. (A slowdown more
  // than ~14× within one round trip still loses the session: see NativeZkSession.window.)
  it('keeps the session when a server slows down after the window grew (hundreds in flight)', async () => {
    const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 2000 });
    const lost: string[] = [];
    // How long before the loss the server last heard a request from us (the proxy passes every
    // request on at once): well within the timeout, so the session was alive on the server.
    let serverHeardMsBeforeLoss = -1;
    connection.on('lost', (reason) => {
      lost.push(reason);
      serverHeardMsBeforeLoss = Date.now() - proxy.lastClientPacketAt;
    });
    const session = connection.session!;
    const timeoutMs = session.timeoutMs;
    const path = await parentAndNode(session as NativeZkSession, 'grown-then-slow');
    // A steady stream, 500 exists calls per event-loop turn, every answer observed at once, until
    // the window has grown well past what a slowed server answers within the deadline.
    const requests: Promise<number>[] = [];
    let slowedAt: { window: number; inFlight: number; backlog: number } | undefined;
    for (let i = 0; i < 200_000 && !slowedAt; i += 500) {
      for (let j = 0; j < 500; j++) requests.push(session.exists(path).then(() => 0, (e: ZkError) => e.code));
      await new Promise((resolve) => setImmediate(resolve));
      const now = windowOf(session);
      if (now.window >= 400 && now.inFlight >= 300) {
        slowedAt = now;
        // What is in flight now answered in 0.8 s (an exists answer is about 90 bytes): a fixed
        // window of 1 000 would keep 1 000 queued, 2.7 s or more, past the 2 s session's deadline.
        proxy.slowReplies(Number(process.env.REVIEW_SLOW_BPS ?? Math.round((now.inFlight / 0.8) * 90)));
      }
    }
    // The slow spell lasts three timeouts, then answers flow at full speed again (so that a fixed
    // library does not wait for the whole backlog at the slow rate).
    if (slowedAt) {
      await new Promise((resolve) => setTimeout(resolve, 3 * timeoutMs));
      proxy.slowReplies(1e9);
    }
    const answers = await Promise.all(requests);
    expect(slowedAt).toBeDefined();
    const rejected = answers.filter((code) => code !== 0);
    const codes = [...new Set(rejected)];
    // The server had heard from us less than a timeout before: it had not expired the session (and
    // the C client's pings, sent after T/3 without a send, kept it alive after).
    if (lost.length > 0) expect(serverHeardMsBeforeLoss).toBeLessThan(timeoutMs);
    expect({ slowedAt, rejected: rejected.length, codes, lost }).toEqual({ slowedAt, rejected: 0, codes: [], lost: [] });
  }, 180_000);

  it('silent link with a backlog: the lease aborts before the server could expire the session, and every request settles', async () => {
    const observer = await connect();
    const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 4000 });
    const session = h.connection.session!;
    const lockPath = uniquePath('silent-backlog');
    const lease = await new Mutex(h, 'sb', lockPath).acquire();
    const timeoutMs = session.timeoutMs;
    const path = await parentAndNode(session as NativeZkSession, 'silent-backlog-n');
    proxy.blackhole();
    const requests: Promise<unknown>[] = [];
    for (let i = 0; i < 3000; i++) requests.push(session.exists(path));
    // A create waiting in the backlog: it must never land on the server after the loss.
    const late = `${path}-late`;
    requests.push(session.create(late, Buffer.alloc(0), CreateMode.EPHEMERAL));
    const outcomes = Promise.allSettled(requests); // observed at once (they reject while we wait)
    expect(windowOf(session).backlog).toBeGreaterThan(2000);
    await whenAborted(lease.signal, 30_000);
    const abortedAt = Date.now();
    // The server heard from us last at proxy.lastClientPacketAt; it expires the session no sooner
    // than one timeout after it.
    expect(abortedAt).toBeLessThan(proxy.lastClientPacketAt + timeoutMs);
    const settled = await within(outcomes, 30_000, 'backlog after loss');
    expect(settled.every((a) => a.status === 'rejected')).toBe(true);
    proxy.restore();
    await eventually(async () => !(await exists(observer, late)), 20_000);
    expect(await exists(observer, late)).toBe(false);
    await eventually(() => h.connection.state === 'connected', 30_000);
  }, 120_000);

  it('disconnections mid-burst: every request settles, the window is empty afterwards and the session works', async () => {
    const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
    const lost: string[] = [];
    connection.on('lost', (reason) => lost.push(reason));
    const session = connection.session!;
    const path = await parentAndNode(session as NativeZkSession, 'cut-burst');
    const requests: Promise<unknown>[] = [];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5000; i++) requests.push(session.exists(path));
      // Cut once some answers came back (the window and a backlog are both populated).
      let answered = 0;
      await new Promise<void>((resolve) => {
        for (const r of requests.slice(-5000)) void r.then(() => ++answered === 300 && resolve(), () => undefined);
      });
      const suspended = nextEvent(connection, 'suspended', 10_000);
      proxy.cut();
      await suspended;
      proxy.restore();
      await nextEvent(connection, 'reconnected', 10_000);
    }
    const settled = await within(Promise.allSettled(requests), 60_000, 'burst with cuts');
    const codes = new Set(settled.filter((a) => a.status === 'rejected').map((a) => ((a as PromiseRejectedResult).reason as ZkError).code));
    // Connection errors only (CONNECTIONLOSS; RUNTIMEINCONSISTENCY when the C client met a reply it
    // did not expect after the cut and dropped the connection, seen under load), never a stuck request.
    expect([...codes].filter((c) => c !== ZkCode.CONNECTIONLOSS && c !== ZkCode.RUNTIMEINCONSISTENCY)).toEqual([]);
    // (The heartbeat sent on reconnect may still be in flight.)
    await eventually(() => windowOf(session).inFlight === 0 && windowOf(session).backlog === 0, 10_000, 10);
    expect(await within(session.exists(path), 10_000, 'after cuts')).not.toBeNull();
    expect(lost).toEqual([]);
    expect(connection.session).toBe(session);
  }, 120_000);

  it('close() with a full window and a backlog rejects everything at once', async () => {
    const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 4000 });
    const session = connection.session!;
    const path = await parentAndNode(session as NativeZkSession, 'close-backlog');
    proxy.slowReplies(2_000);
    const requests: Promise<unknown>[] = [];
    for (let i = 0; i < 5000; i++) requests.push(session.exists(path));
    expect(windowOf(session).backlog).toBeGreaterThan(4000);
    await connection.close();
    const settled = await within(Promise.allSettled(requests), 10_000, 'close with backlog');
    const codes = new Set(settled.filter((a) => a.status === 'rejected').map((a) => ((a as PromiseRejectedResult).reason as ZkError).code));
    expect(settled.filter((a) => a.status === 'rejected').length).toBeGreaterThan(4900);
    expect([...codes].sort()).toEqual(expect.arrayContaining([-9]));
    expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
  }, 60_000);

  it('a try-once acquire behind a congested backlog leaves no node behind and the lock stays free', async () => {
    const observer = await connect();
    const h = await engine({ sessionTimeoutMs: 10_000 });
    const session = h.connection.session!;
    const lockPath = uniquePath('try-once-congested');
    const path = await parentAndNode(session as NativeZkSession, 'try-once-flood');
    // Enough requests that the acquire's create waits past TRY_ONCE_BOUND_MS (2 s) in the backlog.
    const flood: Promise<unknown>[] = [];
    for (let i = 0; i < 60_000; i++) flood.push(session.exists(path));
    const started = performance.now();
    const attempt = new Mutex(h, 'toc', lockPath).acquire({ waitMs: 0 }).then(
      (lease: Lease) => ({ lease }),
      (error: { reason?: string }) => ({ error }),
    );
    const outcome = await attempt;
    const tookMs = performance.now() - started;
    await Promise.allSettled(flood);
    if ('lease' in outcome) {
      await outcome.lease.release();
    } else {
      expect(outcome.error.reason).toBe('connection');
    }
    // Whatever happened, once the backlog drained nothing of ours is left under the lock path
    // and another client gets it at once.
    await eventually(async () => ((await observer.session!.getChildren(lockPath).catch(() => ({ children: [] }))).children.length === 0), 20_000);
    const other = await new Mutex(await engine(), 'toc', lockPath).acquire({ waitMs: 0 });
    await other.release();
    expect({ outcome: 'lease' in outcome ? 'lease' : 'error', tookMs: tookMs > 0 }).toBeDefined();
  }, 120_000);
});

describe('the window outside the proxy', () => {
  afterEach(closeAll);

  it('a session timeout the server negotiates differently: requests queued before the connect are answered and adapt against the granted timeout', async () => {
    const connection = await connect({ sessionTimeoutMs: 600_000 }); // the server caps it (maxSessionTimeout)
    const session = connection.session!;
    expect(session.timeoutMs).toBeLessThan(600_000);
    const path = await parentAndNode(session as NativeZkSession, 'negotiated');
    const all = await Promise.all(Array.from({ length: 3000 }, () => session.exists(path)));
    expect(all.every((s) => s !== null)).toBe(true);
    expect(windowOf(session).window).toBeGreaterThan(64);
    expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
  }, 60_000);
});

describe('addon fix 8: many replies per readable callback (d6b3875)', () => {
  afterEach(closeAll);

  it('runs the patched build (fix version 8 or later)', () => {
    expect(addonFixVersion()).toBeGreaterThanOrEqual(8);
  });

  it('watch events and replies in one batch: each event reaches its listener before the reply to the write that caused it', async () => {
    const connection = await connect();
    const session = connection.session!;
    const base = uniquePath('batch-order');
    await session.create(base.slice(0, base.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
    await session.create(base, Buffer.alloc(0), CreateMode.PERSISTENT);
    const n = 400;
    const paths = Array.from({ length: n }, (_, i) => `${base}/n${i}`);
    await Promise.all(paths.map((p) => session.create(p, Buffer.from('a'), CreateMode.EPHEMERAL)));
    const order: string[] = [];
    await Promise.all(paths.map((p) => session.getData(p, (e) => order.push(`event ${e.type} ${p}`))));
    // Our own writes: the server sends each watch event before the write's answer, all in a row.
    await Promise.all(paths.map((p) => session.setData(p, Buffer.from('b')).then(() => order.push(`reply ${p}`))));
    for (const p of paths) {
      const e = order.indexOf(`event changed ${p}`);
      const r = order.indexOf(`reply ${p}`);
      expect(e).toBeGreaterThanOrEqual(0);
      expect(e).toBeLessThan(r);
    }
    expect(order.filter((o) => o.startsWith('event'))).toHaveLength(n);
  });

  it('a reply whose callback closes the session mid-batch: the rest settle, the process goes on, a new session works', async () => {
    const connection = await connect();
    const session = connection.session!;
    const path = await parentAndNode(session as NativeZkSession, 'close-in-batch');
    // Let the replies pile up in the socket, then read them in one go.
    const requests: Promise<unknown>[] = [];
    for (let i = 0; i < 900; i++) requests.push(session.exists(path));
    let closedAt = -1;
    let seen = 0;
    for (const r of requests) {
      void r.then(
        () => {
          if (++seen === 50) {
            closedAt = seen;
            session.close(); // inside the addon's read loop (a microtask of a native callback)
          }
        },
        () => undefined,
      );
    }
    const settled = await within(Promise.allSettled(requests), 20_000, 'close in batch');
    expect(closedAt).toBe(50);
    const rejected = settled.filter((a) => a.status === 'rejected') as PromiseRejectedResult[];
    expect(rejected.length).toBeGreaterThan(0);
    expect(new Set(rejected.map((r) => (r.reason as ZkError).code))).toEqual(expect.any(Set));
    expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
    const again = await connect();
    expect(await again.session!.exists('/')).not.toBeNull();
  }, 60_000);

  it('the server closing the socket mid-batch: the client reconnects to the same session and nothing hangs', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const session = connection.session!;
      const path = await parentAndNode(session as NativeZkSession, 'fin-in-batch');
      const requests: Promise<unknown>[] = [];
      for (let i = 0; i < 3000; i++) requests.push(session.exists(path));
      let seen = 0;
      // The proxy closes the client's socket from inside a reply's callback: the replies read
      // before it and the close are in the socket together.
      for (const r of requests) void r.then(() => ++seen === 100 && ((proxy as unknown as { dropConnections(): void }).dropConnections(), undefined), () => undefined);
      const settled = await within(Promise.allSettled(requests), 30_000, 'fin in batch');
      expect(settled.filter((a) => a.status === 'fulfilled').length).toBeGreaterThanOrEqual(100);
      await eventually(() => connection.state === 'connected' && session.isConnectedNatively, 20_000);
      expect(await within(session.exists(path), 10_000, 'after fin')).not.toBeNull();
      expect(connection.session).toBe(session);
      expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('timers still run during a long burst (the read loop is bounded)', async () => {
    const connection = await connect();
    const session = connection.session!;
    const path = await parentAndNode(session as NativeZkSession, 'lag');
    let last = performance.now();
    let worst = 0;
    const probe = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
    }, 5);
    try {
      const requests: Promise<unknown>[] = [];
      for (let i = 0; i < 30_000; i += 1000) {
        for (let j = 0; j < 1000; j++) requests.push(session.exists(path));
        await new Promise((resolve) => setImmediate(resolve));
      }
      await Promise.all(requests);
    } finally {
      clearInterval(probe);
    }
    // Generous: a loaded 2-core machine; one callback takes at most 257 replies.
    expect(worst).toBeLessThan(1000);
  }, 120_000);

  it("the bench's negative control still loses updates: replies of one batch run their continuations in turn, yet no lock means lost updates", async () => {
    const connection = await connect();
    const session = connection.session!;
    const path = await parentAndNode(session as NativeZkSession, 'negative');
    let counter = 0;
    const yieldTurns = () => new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
    const worker = async () => {
      for (let i = 0; i < 50; i++) {
        await session.exists(path); // the "acquire" of bench/agent.mjs's `none` peer
        const v = counter;
        await yieldTurns();
        counter = v + 1;
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    expect(counter).toBeLessThan(16 * 50);
  }, 60_000);

  it('an auth failure answered among a batch of replies closes the handle inside the read loop; the rest settle', async () => {
    const connection = await connect();
    const closed = nextEvent(connection, 'closed', 20_000);
    const session = connection.session!;
    const path = await parentAndNode(session as NativeZkSession, 'authfail-batch');
    const requests: Promise<unknown>[] = [];
    for (let i = 0; i < 300; i++) requests.push(session.exists(path));
    requests.push(session.addAuth('no-such-scheme', 'x'));
    for (let i = 0; i < 300; i++) requests.push(session.exists(path));
    const settled = await within(Promise.allSettled(requests), 20_000, 'auth failure in batch');
    // (The server answers an auth packet as it reads it, ahead of the requests before it in its
    // pipeline, and closes the connection: some of those are failed by the client, not answered.)
    expect(settled[300]!.status).toBe('rejected');
    await closed;
    expect(session.isClosed).toBe(true);
    expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
    const again = await connect();
    expect(await again.session!.exists('/')).not.toBeNull();
  }, 60_000);

  it('a session expired while a burst is pending: the handle closes, every request settles, the lease aborted in time', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const session = h.connection.session!;
      const lease = await new Mutex(h, 'exp', uniquePath('expire-burst')).acquire();
      const path = await parentAndNode(session as NativeZkSession, 'expire-burst-n');
      const suspended = nextEvent(h.connection, 'suspended', 10_000);
      proxy.cut();
      await suspended;
      const requests: Promise<unknown>[] = [];
      for (let i = 0; i < 3000; i++) requests.push(session.exists(path));
      const outcomes = Promise.allSettled(requests);
      const { killSession } = await import('../support/helpers.js');
      await killSession(session.id, session.password);
      const lost = nextEvent(h.connection, 'lost', 30_000);
      proxy.restore();
      const [reason] = await lost;
      expect(['session-expired', 'session-timeout']).toContain(reason);
      expect(lease.signal.aborted).toBe(true);
      const settled = await within(outcomes, 30_000, 'burst over an expired session');
      expect(settled.every((a) => a.status === 'rejected')).toBe(true);
      await eventually(() => session.isClosed && windowOf(session).inFlight === 0 && windowOf(session).backlog === 0, 20_000, 10);
    } finally {
      await proxy.close();
    }
  }, 90_000);

  // Passes (coverage): a stall past the deadline right after the acquire's pipelined create +
  // listing went out. Whichever runs first after the stall, the replies (poll) or the deadline
  // timer (timers), the grant is refused or made afresh on the next session: the C client's own
  // receive timeout (2/3 T without a byte) drops the socket in the timers phase before the poll
  // phase can read the replies, and from a timer callback the poll comes first and acquire()'s
  // clock check refuses the grant (the documented path). FINDING 2 below is the case the C
  // client's timeout does not cover: replies still arriving, so the socket is not dropped.
  it('a grant read right after the deadline declared its session lost is never handed out as held', async () => {
    const h = await engine({ sessionTimeoutMs: 2000 });
    const session = h.connection.session!;
    const timeoutMs = session.timeoutMs;
    const lockPath = uniquePath('grant-after-loss');
    const lost: string[] = [];
    h.connection.on('lost', (reason) => lost.push(reason));
    // Stall the process right after the acquire's pipelined create + listing went out, past the
    // deadline: their replies wait in the socket; the deadline timer runs first when it resumes.
    const trace: string[] = [];
    h.connection.on('lost', () => trace.push('lost'));
    const originalCreate = session.create.bind(session);
    (session as { create: typeof session.create }).create = (...args) => {
      const p = originalCreate(...args);
      p.then(() => trace.push(`create ok ${args[0]}`), (e) => trace.push(`create err ${String(e)}`));
      return p;
    };
    const original = session.getChildren.bind(session);
    let stalled = false;
    (session as { getChildren: typeof session.getChildren }).getChildren = (path, watch) => {
      const sent = original(path, watch);
      sent.then(() => trace.push(`list ok ${path}`), (e) => trace.push(`list err ${String(e)}`));
      if (!stalled && path === lockPath) {
        stalled = true;
        const until = performance.now() + timeoutMs + 300;
        while (performance.now() < until); // a GC pause, a CPU-starved process, a long sync task
      }
      return sent;
    };
    // Started from the check phase (setImmediate): after the stall the loop's next iteration runs
    // its timers first (the deadline), then polls (the replies). From a timer callback instead, the
    // poll comes first and acquire()'s own clock check refuses the grant (the documented path).
    const started = new Promise<void>((resolve) => setImmediate(resolve));
    await started;
    const outcome = await new Mutex(h, 'gal', lockPath).acquire({ waitMs: 10_000 }).then(
      (lease: Lease) => ({ lease, heldOnArrival: lease.isHeld, sessionOfLease: lease.sessionId }),
      (error: { reason?: string }) => ({ error }),
    );
    expect(stalled).toBe(true);
    if (process.env.REVIEW_DEBUG) console.log({ trace, lost, outcome: 'lease' in outcome ? { held: outcome.heldOnArrival, s: outcome.sessionOfLease, old: session.id } : outcome.error });
    expect(lost.length).toBeGreaterThan(0);
    if ('lease' in outcome) {
      // Handed out: it must at least be on the session that is current and alive.
      const other = await engine();
      const competitor = await new Mutex(other, 'gal', lockPath).acquire({ waitMs: 5000 }).then(
        (l: Lease) => l,
        () => undefined,
      );
      const overlap = competitor !== undefined && outcome.lease.isHeld && !outcome.lease.signal.aborted;
      await competitor?.release();
      await outcome.lease.release().catch(() => undefined);
      expect({ heldOnArrival: outcome.heldOnArrival, onLostSession: outcome.sessionOfLease === session.id, overlap }).toEqual({
        heldOnArrival: true,
        onLostSession: false,
        overlap: false,
      });
    } else {
      expect(outcome.error.reason).toBe('connection');
    }
  }, 60_000);

  // FINDING 2 (SAFETY, fails with fix 8; passes with a fix-7 build): a grant whose replies are
  // read in the poll phase right after the deadline timer declared the session lost.
  // ZkConnection.sessionLost() makes the successor current, emits 'lost' (the engine ends the
  // leases it tracks) and closes the old handle only in setImmediate; the poll phase in between
  // still reads the old socket. With fix 8 the create's and the listing's replies are read in one
  // callback, so the acquire completes on the lost session: its NodeLease is tracked after the
  // engine's sweep (LockEngine.track does not check the session), LockQueue.attempt() returns
  // held() without checking that the session is still current, and NodeLease.isHeld checks the
  // deadline only when the entry's session is the current one. acquire() hands out a lease that
  // says held, on a session the library gave up and closes a moment later: its node goes, another
  // client acquires, and our lease still says held with its signal never aborting.
  // Made deterministic: the newest answered send time is moved back by a timeout just after the
  // create + listing went out (as when a slow server's answers trickle in: the C client keeps
  // receiving, so its own receive timeout does not drop the socket) and checkDeadline() is called
  // as the deadline timer calls it; the real server answers both during the 50 ms busy-wait; the
  // next poll phase reads them before the check phase closes the old handle.
  it('a grant whose create and listing replies are read after the deadline declared the session lost is refused', async () => {
    const h = await engine({ sessionTimeoutMs: 4000 });
    const session = h.connection.session!;
    const oldId = session.id;
    const timeoutMs = session.timeoutMs;
    const lockPath = uniquePath('grant-in-gap');
    const trace: string[] = [];
    h.connection.on('lost', (reason) => trace.push(`lost ${reason}`));
    const original = session.getChildren.bind(session);
    let fired = false;
    (session as { getChildren: typeof session.getChildren }).getChildren = (path, watch) => {
      const sent = original(path, watch);
      sent.then(() => trace.push(`list answered ${path === lockPath ? 'lock' : path}`), (e) => trace.push(`list failed ${(e as ZkError).code}`));
      if (!fired && path === lockPath) {
        fired = true;
        // The deadline timer's work: the newest answered request is now a timeout old.
        (session as unknown as { requests: { lastAnsweredSentAt: number } }).requests.lastAnsweredSentAt = performance.now() - timeoutMs;
        expect(h.connection.checkDeadline()).toBe(false);
        const until = performance.now() + 50;
        while (performance.now() < until); // the server's answers reach the socket meanwhile
      }
      return sent;
    };
    await new Promise<void>((resolve) => setImmediate(resolve)); // start from the check phase
    const outcome = await new Mutex(h, 'gig', lockPath).acquire({ waitMs: 10_000 }).then(
      (lease: Lease) => ({ lease, heldOnArrival: lease.isHeld, sessionId: lease.sessionId }),
      (error: { reason?: string }) => ({ error }),
    );
    expect(fired).toBe(true);
    const loadedFix = (session as unknown as { native: { native: object } }).native.native.constructor as unknown as Record<string, unknown>;
    if (process.env.REVIEW_DEBUG) console.log({ fix: loadedFix.NESTJS_ZK_LOCK_FD_FIX, trace, oldId, outcome: 'lease' in outcome ? { held: outcome.heldOnArrival, s: outcome.sessionId } : outcome.error });
    if (!('lease' in outcome)) {
      expect(outcome.error.reason).toBe('connection');
      return;
    }
    // Handed out: then never on the session the library declared lost (and closed).
    const onLostSession = outcome.sessionId === oldId;
    let overlap = false;
    if (onLostSession) {
      const competitor = await new Mutex(await engine(), 'gig', lockPath).acquire({ waitMs: 5000 }).then(
        (l: Lease) => l,
        () => undefined,
      );
      // Both hold: the other client's lease, and ours still says held with its signal not aborted.
      overlap = competitor !== undefined && outcome.lease.isHeld && !outcome.lease.signal.aborted;
      const abortedLater = await whenAborted(outcome.lease.signal, 5000).then(
        () => true,
        () => false,
      );
      if (process.env.REVIEW_DEBUG) console.log({ competitor: competitor?.sessionId, isHeld: outcome.lease.isHeld, abortedLater });
      await competitor?.release();
    }
    const heldAfter = outcome.lease.isHeld;
    await outcome.lease.release().catch(() => undefined);
    expect({ onLostSession, overlap, heldAfter: onLostSession && heldAfter }).toEqual({ onLostSession: false, overlap: false, heldAfter: false });
  }, 60_000);

  // FINDING 2, other door (passes with fix 8; FAILS with a fix-7 build, so the gap predates
  // d6b3875): the create's reply is read first and the deadline timer runs in the next turn,
  // before the poll phase that reads the listing's reply. With fix 7 (one reply per readable
  // callback) the listing alone completes the grant on the lost session; with fix 8 both replies
  // are read in one callback and the listing's answer moves the deadline (no loss).
  it('a grant whose listing alone is read after the deadline declared the session lost is refused', async () => {
    const h = await engine({ sessionTimeoutMs: 4000 });
    const session = h.connection.session!;
    const oldId = session.id;
    const timeoutMs = session.timeoutMs;
    const lockPath = uniquePath('listing-in-gap');
    const trace: string[] = [];
    h.connection.on('lost', (reason) => trace.push(`lost ${reason}`));
    const originalCreate = session.create.bind(session);
    let armed = false;
    (session as { create: typeof session.create }).create = (path, data, mode, acl) => {
      const created = originalCreate(path, data, mode, acl);
      if (!armed && path.startsWith(`${lockPath}/`)) {
        armed = true;
        void created.then(() => {
          trace.push('create answered');
          // The deadline falls due now; its timer runs in the next turn's timers phase.
          (session as unknown as { requests: { lastAnsweredSentAt: number } }).requests.lastAnsweredSentAt = performance.now() - timeoutMs;
          setTimeout(() => h.connection.checkDeadline(), 0);
          const until = performance.now() + 5;
          while (performance.now() < until);
        }, () => undefined);
      }
      return created;
    };
    const outcome = await new Mutex(h, 'lig', lockPath).acquire({ waitMs: 10_000 }).then(
      (lease: Lease) => ({ lease, sessionId: lease.sessionId }),
      (error: { reason?: string }) => ({ error }),
    );
    expect(armed).toBe(true);
    const loadedFix = (session as unknown as { native: { native: object } }).native.native.constructor as unknown as Record<string, unknown>;
    if (process.env.REVIEW_DEBUG) console.log({ fix: loadedFix.NESTJS_ZK_LOCK_FD_FIX, trace, oldId, outcome: 'lease' in outcome ? { s: outcome.sessionId, held: outcome.lease.isHeld } : outcome.error });
    if (!('lease' in outcome)) return;
    // With fix 8 the listing's answer is read with the create's and moves the deadline (its send
    // time is newer than the one set back): the session is not lost, and the lease is legitimate.
    const wasLost = await eventually(() => trace.some((t) => t.startsWith('lost')), 2000, 5).then(
      () => true,
      () => false,
    );
    await new Promise((resolve) => setImmediate(resolve)); // the old handle is closed by now
    const onLostSession = wasLost && outcome.sessionId === oldId;
    const heldOnLostSession = onLostSession && outcome.lease.isHeld;
    await outcome.lease.release().catch(() => undefined);
    expect({ heldOnLostSession }).toEqual({ heldOnLostSession: false });
  }, 60_000);

  // FINDING 2, end to end without touching internals: FINDING 1's slowdown with a stream of
  // acquires of free locks on the same session. Answers come about once per proxy pump (10 ms),
  // each long after its send, so the deadline timer fires between two of them; the answer read in
  // the poll phase right after it (before the check phase closes the old handle) may be the
  // listing that completes a grant. Tries twice (it did not hit the gap in 6 tries here: coverage); fails if any acquire resolved with a lease
  // on the lost session that still says held after that session was closed.
  it('no acquire completed just after a false loss hands out a lease on the lost session', async () => {
    const outcomes = { onLost: 0, refused: 0, granted: 0, onOldSessionEnded: 0, attempts: 0, slowedAt: [] as number[] };
    for (let attempt = 0; attempt < 2 && outcomes.onLost === 0; attempt++) {
      outcomes.attempts++;
      const trialProxy = await TcpProxy.start(zkConnectString());
      const base = uniquePath('e2e-gap');
      try {
        const h = await engine({ connectString: trialProxy.connectString, sessionTimeoutMs: 2000 });
        const session = h.connection.session!;
        const oldId = session.id;
        let lostAt = -1;
        h.connection.on('lost', () => (lostAt = performance.now()));
        const leases: Promise<Lease | undefined>[] = [];
        let slowed = false;
        for (let i = 0; i < 4000 && lostAt < 0; i++) {
          leases.push(new Mutex(h, `g${i}`, `${base}/k${i}`).acquire({ waitMs: 30_000 }).then((l: Lease) => l, () => undefined));
          if (i % 50 === 49) {
            await new Promise((resolve) => setImmediate(resolve));
            const now = windowOf(session);
            if (!slowed && now.window >= 300 && now.inFlight >= 200) {
              slowed = true;
              outcomes.slowedAt.push(i);
              trialProxy.slowReplies(12_000);
            }
          }
        }
        await eventually(() => lostAt >= 0, 30_000, 10);
        await new Promise((resolve) => setTimeout(resolve, 100)); // the old handle is closed by now
        trialProxy.slowReplies(1e9);
        const settled = await within(Promise.all(leases), 60_000, 'acquires after the loss');
        for (const lease of settled) {
          if (!lease) outcomes.refused++;
          else if (lease.sessionId === oldId && lease.isHeld) outcomes.onLost++;
          else if (lease.sessionId === oldId) outcomes.onOldSessionEnded++;
          else outcomes.granted++;
        }
        await Promise.all(settled.map((l) => l?.release().catch(() => undefined)));
      } finally {
        await closeAll();
        await trialProxy.close();
        // Up to 4 000 empty lock paths: gone now rather than through the reaper's backlog.
        await deleteTree(await connect(), base);
        await closeAll();
      }
    }
    if (process.env.REVIEW_DEBUG) console.log(outcomes);
    expect(outcomes.onLost).toBe(0);
  }, 300_000);
});
