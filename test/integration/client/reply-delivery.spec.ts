// How replies and events reach their callbacks when many arrive together, on each client: the
// TypeScript one (WireZkSession, the default) hands each frame over in its own macrotask; the C
// addon (NativeZkSession, fix 8) reads every reply the socket holds, up to 256, in one readable
// callback and hands them over one per native callback. Against the real ZooKeeper: events before
// the replies they caused, a close or an auth failure in the middle of a burst of replies, timers
// during long bursts, and a grant whose replies are read right after the deadline declared its
// session lost (the gap between ZkConnection's 'lost' and the old handle's close): never handed out
// as held.
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { CLIENT_KINDS } from '../../../lib/core/connection/connection-options.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { addonFixVersion, requiredAddonFixVersion } from '../../../lib/core/client/addon-session.js';
import { ZkCode, type ZkError } from '../../../lib/core/client/zk-error.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { closeAll, connect, deleteTree, engine, eventually, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { parentAndNode, setLastAnsweredSentAt, windowOf } from '../../support/addon-client.js';
import { whenAborted, within } from '../../support/lock-test-helpers.js';

afterAll(closeAll);

describe('the addon reads many replies per readable callback', () => {
  it('runs the patched build the library requires (the reply draining came with fix 8)', () => {
    expect(addonFixVersion()).toBeGreaterThanOrEqual(requiredAddonFixVersion());
  });
});

describe.each(CLIENT_KINDS)('%s client: many replies at once', (client) => {
    afterEach(closeAll);

    it('watch events and replies in one batch: each event reaches its listener before the reply to the write that caused it', async () => {
      const connection = await connect({ client });
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
      const connection = await connect({ client });
      const session = connection.session!;
      const path = await parentAndNode(session, 'close-in-batch');
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
              session.close(); // in the middle of a burst of replies (on the addon: inside its read loop, a microtask of a native callback)
            }
          },
          () => undefined,
        );
      }
      const settled = await within(Promise.allSettled(requests), 20_000, 'close in batch');
      expect(closedAt).toBe(50);
      // Each reply's continuations ran before the next reply was handed over: none was answered
      // after the close. The rest failed: CLOSING if they were in flight, INVALIDSTATE if they were
      // still in the backlog.
      const rejected = settled.filter((a) => a.status === 'rejected') as PromiseRejectedResult[];
      expect(settled.length - rejected.length).toBe(50);
      const codes = new Set(rejected.map((r) => (r.reason as ZkError).codeName));
      expect([...codes].filter((c) => c !== 'CLOSING' && c !== 'INVALIDSTATE')).toEqual([]);
      expect(codes.has('CLOSING')).toBe(true);
      expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
      const again = await connect({ client });
      expect(await again.session!.exists('/')).not.toBeNull();
    }, 60_000);

    it('the server closing the socket mid-batch: the client reconnects to the same session and nothing hangs', async () => {
      const proxy = await TcpProxy.start(zkConnectString());
      try {
        const connection = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
        const session = connection.session!;
        const path = await parentAndNode(session, 'fin-in-batch');
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
        // (The heartbeat sent on reconnect may still be in flight.)
        await eventually(() => windowOf(session).inFlight === 0 && windowOf(session).backlog === 0, 10_000, 10);
      } finally {
        await proxy.close();
      }
    }, 60_000);

    it('timers still run during a long burst (the read loop is bounded)', async () => {
      const connection = await connect({ client });
      const session = connection.session!;
      const path = await parentAndNode(session, 'lag');
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
      // Generous: a loaded 2-core machine; one addon callback takes at most 257 replies, the
      // TypeScript client hands over one frame per macrotask.
      expect(worst).toBeLessThan(1000);
    }, 120_000);

    it("the bench's negative control still loses updates: replies of one batch run their continuations in turn, yet no lock means lost updates", async () => {
      const connection = await connect({ client });
      const session = connection.session!;
      const path = await parentAndNode(session, 'negative');
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

    it('an auth failure answered among a burst of replies closes the handle; the rest settle', async () => {
      const connection = await connect({ client });
      const closed = nextEvent(connection, 'closed', 20_000);
      const session = connection.session!;
      const path = await parentAndNode(session, 'authfail-batch');
      const requests: Promise<unknown>[] = [];
      for (let i = 0; i < 300; i++) requests.push(session.exists(path));
      requests.push(session.addAuth('no-such-scheme', 'x'));
      for (let i = 0; i < 300; i++) requests.push(session.exists(path));
      const settled = await within(Promise.allSettled(requests), 20_000, 'auth failure in batch');
      if (process.env.REVIEW_DEBUG) console.log({ client, auth: settled[300], state: connection.state, lastLinkError: session.lastLinkError });
      // (The server answers an auth packet as it reads it, ahead of the requests before it in its
      // pipeline, and closes the connection: some of those are failed by the client, not answered.)
      // The server's answer is the reason: AUTHFAILED, not a connection loss; and it ends the
      // session for good (the connection closes, it does not reconnect).
      expect(settled[300]!.status).toBe('rejected');
      const code = ((settled[300] as PromiseRejectedResult).reason as ZkError).codeName;
      if (client === 'addon' && code === 'CONNECTIONLOSS') {
        // The C client keeps writing behind the auth; a write after the server closed (EPIPE) can
        // take the unread answer with it, and the addon reconnects instead (docs/zookeeper-client.md,
        // What remains with the addon). The TypeScript client holds requests behind an auth.
        closed.catch(() => undefined);
        return;
      }
      expect(code).toBe('AUTHFAILED');
      await closed;
      expect(session.isClosed).toBe(true);
      expect(windowOf(session)).toMatchObject({ inFlight: 0, backlog: 0 });
      const again = await connect({ client });
      expect(await again.session!.exists('/')).not.toBeNull();
    }, 60_000);

    it('a session expired while a burst is pending: the handle closes, every request settles, the lease aborted in time', async () => {
      const proxy = await TcpProxy.start(zkConnectString());
      try {
        const h = await engine({ client, connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
        const session = h.connection.session!;
        const lease = await new Mutex(h, 'exp', uniquePath('expire-burst')).acquire();
        const path = await parentAndNode(session, 'expire-burst-n');
        const suspended = nextEvent(h.connection, 'suspended', 10_000);
        proxy.cut();
        await suspended;
        const requests: Promise<unknown>[] = [];
        for (let i = 0; i < 3000; i++) requests.push(session.exists(path));
        const outcomes = Promise.allSettled(requests);
        await killSession(session.id, session.password);
        const lost = nextEvent(h.connection, 'lost', 30_000);
        proxy.restore();
        const [reason] = await lost;
        expect(['session-expired', 'session-timeout']).toContain(reason);
        expect(lease.signal.aborted).toBe(true);
        const settled = await within(outcomes, 30_000, 'burst over an expired session');
        expect(settled.every((a) => a.status === 'rejected')).toBe(true);
        // The TypeScript client refuses requests while it has no link; the C client queues them and
        // fails them once the handle is given up (SESSIONEXPIRED), closed (CLOSING if handed to the C
        // client, INVALIDSTATE if still in the backlog).
        const codes = new Set(settled.map((a) => ((a as PromiseRejectedResult).reason as ZkError).codeName));
        const allowed = client === 'addon' ? ['CLOSING', 'CONNECTIONLOSS', 'INVALIDSTATE', 'SESSIONEXPIRED'] : ['CONNECTIONLOSS'];
        expect([...codes].filter((c) => !allowed.includes(c!))).toEqual([]);
        await eventually(() => session.isClosed && windowOf(session).inFlight === 0 && windowOf(session).backlog === 0, 20_000, 10);
      } finally {
        await proxy.close();
      }
    }, 90_000);

    // SAFETY: a stall past the deadline right after the acquire's pipelined create + listing went
    // out. Whichever runs first after the stall, the replies (poll) or the deadline timer (timers),
    // the grant is refused or made afresh on the next session: the deadline timer declares the
    // session lost and gives it up (abandon: no later answer resolves a request), or the client's
    // own receive timeout (2/3 T without a byte) drops the link, and from a timer callback the poll
    // comes first and acquire()'s clock check refuses the grant (the documented path). On the
    // TypeScript client the replies read in the poll phase are handed over in the check phase, after
    // the close that the loss queued there. The gap after a false loss (below) is the case the
    // receive timeout does not cover: replies still arriving, so the link is not dropped.
    it('a grant read right after the deadline declared its session lost is never handed out as held', async () => {
      const h = await engine({ client, sessionTimeoutMs: 2000 });
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
        const other = await engine({ client });
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

    // SAFETY, the gap after a false loss: a grant whose replies are read right after the deadline
    // timer declared the session lost. ZkConnection.sessionLost() makes the successor current, emits
    // 'lost' (the engine ends the leases it tracks) and closes the old handle only in setImmediate;
    // the poll phase in between still reads the old socket (on the addon with fix 8, the create's
    // and the listing's replies in one callback). Were they to complete the acquire on the lost
    // session, acquire() would hand out a lease that says held on a session the library gave up and
    // closes a moment later: its node goes, another client acquires, and our lease still says held
    // with its signal never aborting. (It did on the addon before ZkSession.abandon().)
    // Made deterministic: the newest answered send time is moved back by a timeout just after the
    // create + listing went out (as when a slow server's answers trickle in: the client keeps
    // receiving, so its own receive timeout does not drop the link) and checkDeadline() is called
    // as the deadline timer calls it; the real server answers both during the 50 ms busy-wait; the
    // next poll phase reads them before the check phase closes the old handle.
    it('a grant whose create and listing replies are read after the deadline declared the session lost is refused', async () => {
      const h = await engine({ client, sessionTimeoutMs: 4000 });
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
          setLastAnsweredSentAt(session, performance.now() - timeoutMs);
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
      expect(trace.filter((t) => t.startsWith('lost'))).toEqual(['lost session-timeout']);
      if (process.env.REVIEW_DEBUG) console.log({ client, fix: client === 'addon' ? addonFixVersion() : undefined, trace, oldId, outcome: 'lease' in outcome ? { held: outcome.heldOnArrival, s: outcome.sessionId } : outcome.error });
      if (!('lease' in outcome)) {
        expect(outcome.error.reason).toBe('connection');
        return;
      }
      // Handed out: then never on the session the library declared lost (and closed).
      const onLostSession = outcome.sessionId === oldId;
      let overlap = false;
      if (onLostSession) {
        const competitor = await new Mutex(await engine({ client }), 'gig', lockPath).acquire({ waitMs: 5000 }).then(
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

    // SAFETY, the gap after a false loss, other door: the create's reply is handed over first and the
    // deadline timer runs in the next turn; when the listing's reply is read only after it (an addon
    // build before fix 8 read one reply per readable callback), the listing alone would complete the
    // grant on the lost session. When both replies are read together (the addon since fix 8; the
    // TypeScript client when they came in one chunk), the listing is handed over before the timer
    // runs: the grant completes first and the loss that follows ends it. The next test makes this
    // door deterministic.
    it('a grant whose listing alone is read after the deadline declared the session lost is refused', async () => {
      const h = await engine({ client, sessionTimeoutMs: 4000 });
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
            setLastAnsweredSentAt(session, performance.now() - timeoutMs);
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
      if (process.env.REVIEW_DEBUG) console.log({ client, fix: client === 'addon' ? addonFixVersion() : undefined, trace, oldId, outcome: 'lease' in outcome ? { s: outcome.sessionId, held: outcome.lease.isHeld } : outcome.error });
      if (!('lease' in outcome)) {
        expect(outcome.error.reason).toBe('connection');
        return;
      }
      // Granted before the loss (the listing read with the create's answer), the loss ends it; or on
      // the next session. Never held on the lost one.
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

    // The door above made deterministic on either client: the loss is declared inside the create's
    // answer (as a deadline check by code resuming there would), so the listing's answer, behind it
    // on the link, is handed over only after the loss.
    it("a grant whose listing is answered after the loss declared between the create's answer and the listing's is refused", async () => {
      const h = await engine({ client, sessionTimeoutMs: 4000 });
      const session = h.connection.session!;
      const oldId = session.id;
      const lockPath = uniquePath('listing-after-loss');
      const trace: string[] = [];
      h.connection.on('lost', (reason) => trace.push(`lost ${reason}`));
      const originalCreate = session.create.bind(session);
      const originalList = session.getChildren.bind(session);
      let armed = false;
      (session as { create: typeof session.create }).create = (path, data, mode, acl, options) => {
        const created = originalCreate(path, data, mode, acl, options);
        if (!armed && path.startsWith(`${lockPath}/`)) {
          armed = true;
          // Attached before the caller's continuation: runs first when the answer is handed over.
          void created.then(() => {
            trace.push('create answered');
            setLastAnsweredSentAt(session, performance.now() - session.timeoutMs);
            trace.push(`deadline met ${h.connection.checkDeadline()}`);
          }, () => undefined);
        }
        return created;
      };
      (session as { getChildren: typeof session.getChildren }).getChildren = (path, watch) => {
        const sent = originalList(path, watch);
        if (armed && path === lockPath) sent.then(() => trace.push('list answered'), (e) => trace.push(`list failed ${(e as ZkError).codeName}`));
        return sent;
      };
      const outcome = await new Mutex(h, 'lal', lockPath).acquire({ waitMs: 10_000 }).then(
        (lease: Lease) => ({ lease, sessionId: lease.sessionId }),
        (error: { reason?: string }) => ({ error }),
      );
      if (process.env.REVIEW_DEBUG) console.log({ client, trace, oldId, outcome: 'lease' in outcome ? { s: outcome.sessionId, held: outcome.lease.isHeld } : outcome.error });
      // The scenario happened: the create was answered, the loss declared, and only then the listing
      // on the old session settled (failed: its session was given up).
      expect(trace.slice(0, 4)).toEqual(['create answered', 'lost session-timeout', 'deadline met false', 'list failed SESSIONEXPIRED']);
      if (!('lease' in outcome)) {
        expect(outcome.error.reason).toBe('connection');
        return;
      }
      // Granted afresh on the next session: held there, and not on the lost one.
      expect({ onLostSession: outcome.sessionId === oldId, held: outcome.lease.isHeld }).toEqual({ onLostSession: false, held: true });
      await outcome.lease.release();
    }, 60_000);

    // The gap after a false loss, end to end without touching internals: a slowdown like the one of
    // the adaptive window's first test (request-window.spec.ts) under a stream of acquires of free
    // locks on the same session, slow enough that the window cannot save the session. Answers come
    // a few per proxy pump (10 ms), each long after its send, so the deadline timer fires between
    // two of them; the answer read in the poll phase right after it (before the check phase closes
    // the old handle) may be the listing that completes a grant. Tries twice (coverage: it may not
    // hit the gap); fails if any acquire resolved with a lease on the lost session that still says
    // held after that session was closed.
    it('no acquire completed just after a false loss hands out a lease on the lost session', async () => {
      const outcomes = { onLost: 0, refused: 0, granted: 0, onOldSessionEnded: 0, attempts: 0, slowedAt: [] as number[] };
      for (let attempt = 0; attempt < 2 && outcomes.onLost === 0; attempt++) {
        outcomes.attempts++;
        const trialProxy = await TcpProxy.start(zkConnectString());
        const base = uniquePath('e2e-gap');
        try {
          const h = await engine({ client, connectString: trialProxy.connectString, sessionTimeoutMs: 2000 });
          const session = h.connection.session!;
          const oldId = session.id;
          let lostAt = -1;
          h.connection.on('lost', () => (lostAt = performance.now()));
          const leases: Promise<Lease | undefined>[] = [];
          let slowed = false;
          // Acquires keep coming until the loss (or 8 000 of them): the slowdown once the window
          // grew, or after 1 000 acquires if it did not (a loaded machine). At 2 000 bytes a second
          // even the smallest window (64 answers of ~100 bytes) takes longer than the timeout.
          for (let i = 0; i < 8000 && lostAt < 0; i++) {
            leases.push(new Mutex(h, `g${i}`, `${base}/k${i}`).acquire({ waitMs: 30_000 }).then((l: Lease) => l, () => undefined));
            if (i % 50 === 49) {
              await new Promise((resolve) => setImmediate(resolve));
              const now = windowOf(session);
              if (!slowed && ((now.window >= 300 && now.inFlight >= 200) || i >= 1000)) {
                slowed = true;
                outcomes.slowedAt.push(i);
                trialProxy.slowReplies(2_000);
              }
            }
          }
          await eventually(() => lostAt >= 0, 30_000, 10).catch((error: Error) => {
            throw new Error(`${error.message}: no loss (${JSON.stringify({ slowed, window: windowOf(session), acquires: leases.length })})`);
          });
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
          await deleteTree(await connect({ client }), base);
          await closeAll();
        }
      }
      if (process.env.REVIEW_DEBUG) console.log(outcomes);
      expect(outcomes.onLost).toBe(0);
    }, 300_000);
});
