// A session under load, on each client (the TypeScript one, WireZkSession, the default; the C
// addon's, NativeZkSession): the adaptive in-flight window both keep (it grows while the server is
// fast and halves when answers slow down), the backlog beyond the window, and how both settle on
// silent links, disconnections, close() and expiry; and the in-flight bound's backlog of requests
// that fail synchronously. Against the real ZooKeeper (through a proxy where the interleaving needs
// one).
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { CLIENT_KINDS } from '../../../lib/core/connection/connection-options.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { ZkCode, type ZkError } from '../../../lib/core/client/zk-error.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { closeAll, connect, engine, eventually, exists, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { parentAndNode, windowOf } from '../../support/addon-client.js';
import { whenAborted, within } from '../../support/lock-test-helpers.js';

afterAll(closeAll);

/** How many of `settled` were rejected with each ZooKeeper code (by name). */
function rejectionCodes(settled: PromiseSettledResult<unknown>[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const outcome of settled) {
    if (outcome.status !== 'rejected') continue;
    const name = (outcome.reason as ZkError).codeName ?? String(outcome.reason);
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return counts;
}

describe.each(CLIENT_KINDS)('%s client', (client) => {
  describe('the adaptive in-flight window', () => {
    let proxy: TcpProxy;
    beforeEach(async () => {
      proxy = await TcpProxy.start(zkConnectString());
    });
    afterEach(async () => {
      await closeAll();
      await proxy.close();
    });

    // The window grows while the server is fast; the server then
    // slows down (GC, disk, a loaded machine). What is in flight cannot be called back, so the
    // window bounds the round trip it grew under (T/16): a slowdown that answers what is in flight
    // within 0.8 s is survived by halving the window; with a fixed window of 1 000 the queue at the
    // server stays 1 000 deep and its answers come later than the deadline allows. (A slowdown more
    // than ~14× within one round trip still loses the session: see NativeZkSession.window; the
    // TypeScript client keeps the same window.)
    it('keeps the session when a server slows down after the window grew (hundreds in flight)', async () => {
      // 2.5 s: the deadline trails a slow link by about two round trips plus the report lag, and a
      // whole-suite run's GC pauses ate the last few hundred ms of 2 s (fail-safe losses, the server
      // still had the session): this checks the window, not the process's pauses.
      const connection = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 2500 });
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
      const path = await parentAndNode(session, 'grown-then-slow');
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
          // window of 1 000 would keep 1 000 queued, 2.7 s or more at 300 in flight, past the
          // session's deadline.
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
      // the client's pings, sent when it has sent nothing for a while, kept it alive after).
      if (lost.length > 0) expect(serverHeardMsBeforeLoss).toBeLessThan(timeoutMs);
      expect({ slowedAt, rejected: rejected.length, codes, lost }).toEqual({ slowedAt, rejected: 0, codes: [], lost: [] });
    }, 180_000);

    it('silent link with a backlog: the lease aborts before the server could expire the session, and every request settles', async () => {
      const observer = await connect({ client });
      const h = await engine({ client, connectString: proxy.connectString, sessionTimeoutMs: 4000 });
      const session = h.connection.session!;
      const lockPath = uniquePath('silent-backlog');
      const lease = await new Mutex(h, 'sb', lockPath).acquire();
      const timeoutMs = session.timeoutMs;
      const path = await parentAndNode(session, 'silent-backlog-n');
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
      const connection = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lost: string[] = [];
      connection.on('lost', (reason) => lost.push(reason));
      const session = connection.session!;
      const path = await parentAndNode(session, 'cut-burst');
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
      // Connection errors only, never a stuck request: CONNECTIONLOSS; on the addon also
      // RUNTIMEINCONSISTENCY when the C client met a reply it did not expect after the cut and
      // dropped the connection (seen under load).
      const connectionErrors: number[] = client === 'addon' ? [ZkCode.CONNECTIONLOSS, ZkCode.RUNTIMEINCONSISTENCY] : [ZkCode.CONNECTIONLOSS];
      expect([...codes].filter((c) => !connectionErrors.includes(c))).toEqual([]);
      // The cuts came while requests were in flight: some failed.
      expect(codes.has(ZkCode.CONNECTIONLOSS)).toBe(true);
      // (The heartbeat sent on reconnect may still be in flight.)
      await eventually(() => windowOf(session).inFlight === 0 && windowOf(session).backlog === 0, 10_000, 10);
      expect(await within(session.exists(path), 10_000, 'after cuts')).not.toBeNull();
      expect(lost).toEqual([]);
      expect(connection.session).toBe(session);
    }, 120_000);

    // Nothing can be answered (the replies crawl and close() comes in the same turn as the sends):
    // the requests in flight fail with CLOSING (the session fails what it handed to the link, on
    // the addon before the C client could call them back), those still in the backlog with
    // INVALIDSTATE (never sent: the session is closed when their turn comes).
    it('close() with a full window and a backlog rejects everything at once', async () => {
      const connection = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 4000 });
      const session = connection.session!;
      const path = await parentAndNode(session, 'close-backlog');
      proxy.slowReplies(2_000);
      const requests: Promise<unknown>[] = [];
      for (let i = 0; i < 5000; i++) requests.push(session.exists(path));
      const before = windowOf(session);
      expect(before.backlog).toBeGreaterThan(4000);
      expect(before.inFlight + before.backlog).toBe(5000);
      const closing = connection.close();
      // At once: every request is settled before close() returns to the event loop.
      let settledCount = 0;
      for (const r of requests) void r.then(() => settledCount++, () => settledCount++);
      await Promise.resolve();
      await Promise.resolve();
      const settledAtClose = settledCount;
      await closing;
      const settled = await within(Promise.allSettled(requests), 10_000, 'close with backlog');
      expect({ settledAtClose, codes: rejectionCodes(settled) }).toEqual({
        settledAtClose: 5000,
        codes: { CLOSING: before.inFlight, INVALIDSTATE: before.backlog },
      });
      expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
    }, 60_000);

    it('a try-once acquire behind a congested backlog leaves no node behind and the lock stays free', async () => {
      const observer = await connect({ client });
      const h = await engine({ client, sessionTimeoutMs: 10_000 });
      const session = h.connection.session!;
      const lockPath = uniquePath('try-once-congested');
      const path = await parentAndNode(session, 'try-once-flood');
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
      const other = await new Mutex(await engine({ client }), 'toc', lockPath).acquire({ waitMs: 0 });
      await other.release();
      if (process.env.REVIEW_DEBUG) console.log({ client, outcome: 'lease' in outcome ? 'lease' : outcome.error, tookMs });
    }, 120_000);
  });

  describe('the window outside the proxy', () => {
    afterEach(closeAll);

    it('a session timeout the server negotiates differently: requests queued before the connect are answered and adapt against the granted timeout', async () => {
      const connection = await connect({ client, sessionTimeoutMs: 600_000 }); // the server caps it (maxSessionTimeout)
      const session = connection.session!;
      expect(session.timeoutMs).toBeLessThan(600_000);
      const path = await parentAndNode(session, 'negotiated');
      const all = await Promise.all(Array.from({ length: 3000 }, () => session.exists(path)));
      expect(all.every((s) => s !== null)).toBe(true);
      expect(windowOf(session).window).toBeGreaterThan(64);
      // (The connection's heartbeat may still be in flight.)
      await eventually(() => windowOf(session).inFlight === 0 && windowOf(session).backlog === 0, 10_000, 10);
    }, 60_000);
  });

  describe('in-flight bound (the backlog)', () => {
    it('a backlog whose requests fail synchronously (the client refuses them) settles without recursing once per request', async () => {
      const c = await connect({ client });
      const session = c.session!;
      const uncaught: unknown[] = [];
      const onUncaught = (error: unknown) => uncaught.push(error);
      process.on('uncaughtException', onUncaught);
      try {
        // A full window and a backlog, then behind it requests the client refuses at once
        // (BADARGUMENTS for a path without "/", never sent: on the addon the same synchronous
        // non-zero return as ZINVALIDSTATE on an expired handle).
        const inFlight = Array.from({ length: 1000 }, () => session.exists('/'));
        const refused = Array.from({ length: 30_000 }, () => session.getData('no-slash').then(() => 'ok', (e: { codeName?: string; name?: string }) => e.codeName ?? e.name));
        const outcomes = await within(Promise.allSettled([...inFlight, ...refused]), 20_000, 'every request settles');
        expect(uncaught).toEqual([]);
        expect(outcomes.slice(0, 1000).every((o) => o.status === 'fulfilled')).toBe(true);
        const codes = new Set(outcomes.slice(1000).map((o) => (o.status === 'fulfilled' ? o.value : 'rejected')));
        expect([...codes]).toEqual(['BADARGUMENTS']);
      } finally {
        process.off('uncaughtException', onUncaught);
      }
    }, 60_000);
  });

  describe('in-flight bound: a realistic trigger', () => {
    // The session is expired on the server while the client has no link. The TypeScript client
    // refuses requests while it has no link (CONNECTIONLOSS, synchronously: 40 000 of them settle in
    // one loop). The addon's C client takes a window of them and queues them; when the server says
    // the session expired the handle closes: those fail with CLOSING, the backlog behind them with
    // INVALIDSTATE (in one loop).
    const expectedCodes = { typescript: ['CONNECTIONLOSS'], addon: ['CLOSING', 'INVALIDSTATE'] }[client];
    it('a burst sent while the session is expired on the server and the link is down settles (no stack overflow, no hang)', async () => {
      const proxy = await TcpProxy.start(zkConnectString());
      const uncaught: unknown[] = [];
      const onUncaught = (error: unknown) => uncaught.push(error);
      process.on('uncaughtException', onUncaught);
      try {
        const c = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
        const session = c.session!;
        proxy.cut();
        await killSession(session.id, session.password);
        const burst = Array.from({ length: 40_000 }, () => session.exists('/').then(() => 'ok', (e: { codeName?: string }) => e.codeName ?? 'other'));
        proxy.restore();
        const outcomes = await within(Promise.all(burst), 20_000, 'every request of the burst settles');
        expect(uncaught.map(String)).toEqual([]);
        expect([...new Set(outcomes)].sort()).toEqual(expectedCodes);
        // The connection goes on with a new session.
        await eventually(() => c.state === 'connected' && c.session !== session, 30_000);
        expect(await within(c.session!.exists('/'), 10_000, 'new session')).not.toBeNull();
      } finally {
        process.off('uncaughtException', onUncaught);
        await proxy.close();
      }
    }, 60_000);
  });
});
