// Mutex behaviour under faults: disconnections, killed and expired sessions, lost replies, and
// nodes deleted behind the library's back. One client at a time is partitioned with a TcpProxy.
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { LockLostError, LockNotAcquiredError } from '../../../lib/core/errors.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { fourLetter } from '../../support/zk-server.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { nameOf, notAcquired, untilChildCount, nodesOf, sessionIdOf, sessionsWatching, untilWatching, delay, whenAborted } from '../../support/lock-test-helpers.js';

afterEach(closeAll);
afterAll(closeAll);

let proxy: TcpProxy;
beforeEach(async () => {
  proxy = await TcpProxy.start(zkConnectString());
});
afterEach(async () => {
  await proxy.close();
});

describe('Mutex under faults (real ZooKeeper, one client behind a TcpProxy)', () => {
  describe('disconnections', () => {
    it('completes a release() called while disconnected once the session reconnects', async () => {
      const observer = await connect();
      const path = uniquePath('release-cut');
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const sessionBefore = h.connection.sessionId;
      const lease = await new Mutex(h, 'rc', path).acquire();

      const suspended = nextEvent(h.connection, 'suspended');
      proxy.cut();
      await suspended;
      const releasing = lease.release();
      expect(lease.isHeld).toBe(false);
      await delay(200); // the delete cannot get through meanwhile
      expect(await exists(observer, lease.path)).toBe(true);

      proxy.restore();
      await releasing;
      expect(await exists(observer, lease.path)).toBe(false);
      // Deleted by us through the same session, not by an expiry.
      expect(h.connection.sessionId).toBe(sessionBefore);
      const next = await new Mutex(await engine(), 'rc', path).acquire({ waitMs: 0 });
      await next.release();
    });

    it('recovers from a release() issued in the same tick as the connection drop: the node goes and the engine works again', async () => {
      // The delete is sent on a socket the peer has just closed, before the event loop polled it.
      const observer = await connect();
      const path = uniquePath('release-same-tick');
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lease = await new Mutex(h, 'rst', path).acquire();
      const suspended = nextEvent(h.connection, 'suspended', 5000).then(
        () => true,
        () => false,
      );

      proxy.cut();
      const releasing = lease.release();
      await delay(200);
      proxy.restore();
      const noticedDisconnect = await suspended;
      const released = await Promise.race([releasing.then(() => true), delay(10_000).then(() => false)]);
      // Within the session timeout the node must be gone because we deleted it, not because the session expired.
      const nodeGone = !(await exists(observer, lease.path));
      const again = await Promise.race([
        new Mutex(h, 'rst', path).acquire({ waitMs: 0 }).then(
          (l) => l.release().then(() => 'acquired'),
          (e: unknown) => `failed: ${String(e)}`,
        ),
        delay(15_000).then(() => 'hung'),
      ]);
      expect({ noticedDisconnect, released, nodeGone, again }).toEqual({
        noticedDisconnect: true,
        released: true,
        nodeGone: true,
        again: 'acquired',
      });
    }, 45_000);

    it('a waiter survives a short disconnection and acquires when the holder releases later (kazoo PR #170)', async () => {
      const observer = await connect();
      const path = uniquePath('waiter-cut');
      const holder = await new Mutex(await engine(), 'wc', path).acquire();
      const w = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const waiterSession = w.connection.sessionId!;
      const waiting = new Mutex(w, 'wc', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await eventually(async () => (await nodesOf(observer, path, waiterSession)).length === 1, 20_000, 20);
      const [waiterNode] = await nodesOf(observer, path, waiterSession);
      await untilWatching(holder.path, waiterSession);

      const suspended = nextEvent(w.connection, 'suspended');
      proxy.cut();
      await suspended;
      const reconnected = nextEvent(w.connection, 'reconnected');
      proxy.restore();
      expect(await reconnected).toEqual([waiterSession]);
      await untilWatching(holder.path, waiterSession);

      const releasedAt = Date.now();
      await holder.release();
      const lease = await waiting;
      expect(Date.now() - releasedAt).toBeLessThan(5000);
      expect(nameOf(lease)).toBe(waiterNode); // it kept its place: same node, same session
      expect(lease.sessionId).toBe(waiterSession);
      await lease.release();
    });

    it('a waiter acquires after reconnecting when the holder released during the disconnection', async () => {
      const observer = await connect();
      const path = uniquePath('waiter-cut2');
      const holder = await new Mutex(await engine(), 'wc2', path).acquire();
      const w = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const waiterSession = w.connection.sessionId!;
      const waiting = new Mutex(w, 'wc2', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);
      await untilWatching(holder.path, waiterSession);

      const suspended = nextEvent(w.connection, 'suspended');
      proxy.cut();
      await suspended;
      await holder.release();
      await untilChildCount(observer, path, 1); // only the waiter's node, which cannot learn it yet
      proxy.restore();
      const lease = await waiting;
      expect(lease.sessionId).toBe(waiterSession);
      expect(await childrenOf(observer, path)).toEqual([nameOf(lease)]);
      await lease.release();
    });
  });

  describe('killed and expired sessions', () => {
    it('(a) holder session killed while cut off: the waiter acquires; after reconnect the holder hears "session-expired"', async () => {
      const observer = await connect();
      const path = uniquePath('kill-holder');
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const lease = await new Mutex(h, 'kh', path).acquire();
      const signal = lease.signal;
      await untilWatching(lease.path, h.connection.sessionId!); // the holder's own-node watch is armed
      const waiting = new Mutex(await engine(), 'kh', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);

      const suspended = nextEvent(h.connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(h.connection.session!.id, h.connection.session!.password);
      const next = await waiting;
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);

      const lost = nextEvent(h.connection, 'lost');
      proxy.restore();
      expect((await lost)[0]).toBe('session-expired');
      const reason = await whenAborted(signal);
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'session-expired', lockName: 'kh' });
      expect(lease.isHeld).toBe(false);
      await expect(lease.release()).resolves.toBeUndefined(); // releasing a lost lease is a no-op
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await next.release();
    });

    it('(b) holder cut off past its session timeout: its signal aborts with "session-timeout" and the waiter acquires once the server expires it', async () => {
      const observer = await connect();
      const path = uniquePath('timeout-holder');
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 2000 });
      const lease = await new Mutex(h, 'th', path).acquire();
      const signal = lease.signal;
      await untilWatching(lease.path, h.connection.sessionId!);
      const waiting = new Mutex(await engine(), 'th', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);

      const cutAt = Date.now();
      proxy.cut();
      let abortedAt = Infinity;
      const aborted = whenAborted(signal).then((reason) => ((abortedAt = Date.now()), reason));
      const [reason, next] = await Promise.all([aborted, waiting]);
      const acquiredAt = Date.now();
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason).toMatchObject({ reason: 'session-timeout' });
      // Not before a third of the timeout (a short blip is only a suspension), and before the
      // other process could take the lock.
      expect(abortedAt - cutAt).toBeGreaterThanOrEqual(2000 / 3 - 300);
      expect(abortedAt).toBeLessThanOrEqual(acquiredAt);
      expect(lease.isHeld).toBe(false);
      expect(await childrenOf(observer, path)).toEqual([nameOf(next)]);
      await next.release();
    });

    it('(b2) holder behind a silent partition (nothing passes, nothing closes): its signal aborts before anyone else can acquire', async () => {
      // The client notices silence only after 2/3 of the timeout, so "lost one timeout after the
      // disconnection was noticed" would come 2/3 of a timeout after the server freed the lock.
      const observer = await connect();
      const path = uniquePath('silent-holder');
      const timeoutMs = 3000;
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: timeoutMs });
      const lease = await new Mutex(h, 'sh', path).acquire();
      const signal = lease.signal;
      await untilWatching(lease.path, h.connection.sessionId!);
      let acquiredAt = Infinity;
      const waiting = new Mutex(await engine(), 'sh', path).acquire({ waitMs: 30_000 }).then((next) => ((acquiredAt = Date.now()), next));
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);

      const silentAt = Date.now();
      proxy.blackhole();
      const reason = await whenAborted(signal, 20_000);
      const abortedAt = Date.now();
      expect(reason).toMatchObject({ reason: 'session-timeout' });
      expect(acquiredAt).toBe(Infinity); // nobody else holds yet
      const next = await waiting;
      expect(acquiredAt).toBeGreaterThanOrEqual(abortedAt);
      expect(abortedAt - silentAt).toBeLessThanOrEqual(timeoutMs + 500);
      expect(lease.isHeld).toBe(false);
      await next.release();
      proxy.restore();
    });

    it('(d) a holder cut off while it sends a request still learns that it lost the lock', async () => {
      // Same as (b), but the holder touches ZooKeeper (reading lease.signal arms a watch) in the same
      // tick as the drop. Without the lost signal two parties would believe they hold the lock.
      const observer = await connect();
      const path = uniquePath('cut-in-flight');
      const h = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 2000 });
      const lease = await new Mutex(h, 'cif', path).acquire();
      const waiting = new Mutex(await engine(), 'cif', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);

      proxy.cut();
      const signal = lease.signal; // sends an exists() on the dead socket
      const next = await waiting; // the server expired the holder's session
      const reason = await whenAborted(signal, 10_000).catch(() => 'never aborted');
      expect({ reason: (reason as LockLostError).reason ?? reason, holderConnectionState: h.connection.state }).toEqual({
        reason: 'session-timeout',
        holderConnectionState: expect.stringMatching(/^(lost|connecting)$/),
      });
      expect(lease.isHeld).toBe(false);
      await next.release();
    }, 45_000);

    it('(c) a waiter whose session is killed re-queues in its new session and gets the lock after the holder releases (kazoo test_handle_session_loss)', async () => {
      const observer = await connect();
      const path = uniquePath('kill-waiter');
      const holder = await new Mutex(await engine(), 'kw', path).acquire();
      const w = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const oldSession = w.connection.sessionId!;
      const waiting = new Mutex(w, 'kw', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);
      await untilWatching(holder.path, oldSession); // idle: waiting on its watch

      const suspended = nextEvent(w.connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(oldSession, w.connection.session!.password);
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]); // its node died with the session

      const connected = nextEvent(w.connection, 'connected');
      proxy.restore();
      const [newSession] = await connected;
      expect(newSession).not.toBe(oldSession);
      await eventually(async () => (await nodesOf(observer, path, newSession)).length === 1, 20_000, 20);
      const [requeued] = await nodesOf(observer, path, newSession);

      await holder.release();
      const lease = await waiting;
      expect(lease.sessionId).toBe(newSession);
      expect(nameOf(lease)).toBe(requeued);
      expect(await childrenOf(observer, path)).toEqual([requeued]);
      await lease.release();
    });
  });

  describe('lost create reply (protected mode)', () => {
    it('finds its node by the protected prefix after reconnecting instead of creating a second one', async () => {
      const observer = await connect();
      const path = uniquePath('lost-reply');
      const holder = await new Mutex(await engine(), 'lr', path).acquire();
      const c = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 });
      const cSession = c.connection.sessionId!;

      proxy.dropReplies();
      const acquiring = new Mutex(c, 'lr', path).acquire({ waitMs: 20_000 });
      acquiring.catch(() => undefined);
      let cNodes: string[] = [];
      await eventually(async () => (cNodes = await nodesOf(observer, path, cSession)).length > 0, 10_000, 20);
      expect(cNodes).toHaveLength(1);

      const counts: number[] = [];
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          counts.push((await nodesOf(observer, path, cSession)).length);
          await delay(20);
        }
      })();
      try {
        const reconnected = nextEvent(c.connection, 'reconnected');
        proxy.restore();
        expect(await reconnected).toEqual([cSession]);
        await untilWatching(holder.path, cSession); // C is waiting again, behind the holder
        expect(await nodesOf(observer, path, cSession)).toEqual(cNodes);

        await holder.release();
        const lease = await acquiring;
        expect(nameOf(lease)).toBe(cNodes[0]);
        expect(lease.sessionId).toBe(cSession);
        expect(await childrenOf(observer, path)).toEqual(cNodes);
        await lease.release();
      } finally {
        sampling = false;
        await sampler;
      }
      // Until its release, C had exactly one node at every sample (the delete may be seen by the
      // sampler a few samples before release() resolves on C, behind the proxy).
      expect(counts.length).toBeGreaterThan(0);
      const released = counts.indexOf(0) === -1 ? counts.length : counts.indexOf(0);
      expect(released).toBeGreaterThan(0);
      expect(counts.slice(0, released).every((n) => n === 1)).toBe(true);
      expect(counts.slice(released).every((n) => n === 0)).toBe(true);
    });

    it('leaves nothing behind when the acquire is aborted while the create reply is lost', async () => {
      const observer = await connect();
      const path = uniquePath('lost-abort');
      const holder = await new Mutex(await engine(), 'la', path).acquire();
      const c = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 });
      const cSession = c.connection.sessionId!;

      proxy.dropReplies();
      const controller = new AbortController();
      const acquiring = new Mutex(c, 'la', path).acquire({ signal: controller.signal });
      acquiring.catch(() => undefined);
      await eventually(async () => (await nodesOf(observer, path, cSession)).length === 1, 10_000, 20);

      controller.abort();
      const error = await notAcquired(acquiring);
      expect(error.reason).toBe('aborted');

      proxy.restore();
      await c.drain();
      expect(c.connection.sessionId).toBe(cSession); // the session survived: the node had to be deleted by us
      expect(await nodesOf(observer, path, cSession)).toEqual([]);
      expect(await childrenOf(observer, path)).toEqual([nameOf(holder)]);
      await holder.release();
    });
  });

  describe('closing the connection', () => {
    it('rejects with LockNotAcquiredError("connection") when the connection is closed while the acquire waits for a reconnect', async () => {
      const path = uniquePath('close-suspended');
      const w = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const suspended = nextEvent(w.connection, 'suspended');
      proxy.cut();
      await suspended;
      const acquiring = new Mutex(w, 'cs', path).acquire();
      acquiring.catch(() => undefined);
      await delay(100); // no event: the acquire now waits for the connection
      await w.connection.close();
      const error = await notAcquired(acquiring);
      expect(error.reason).toBe('connection');
    });
  });

  describe('a waiter\'s node deleted by someone else', () => {
    it('re-queues instead of taking the lock with a node that no longer exists', async () => {
      const observer = await connect();
      const path = uniquePath('ghost');
      const holder = await new Mutex(await engine(), 'ghost', path).acquire();
      const w = await engine();
      const waiterSession = w.connection.sessionId!;
      const waiting = new Mutex(w, 'ghost', path).acquire({ waitMs: 30_000 });
      waiting.catch(() => undefined);
      await untilChildCount(observer, path, 2);
      await untilWatching(holder.path, waiterSession);
      const [ghost] = await nodesOf(observer, path, waiterSession);
      await observer.session!.delete(`${path}/${ghost}`); // e.g. an operator cleaning up

      // The waiter hears of its own node's deletion (it watches it while relying on its
      // predecessor) and queues again with a new node, before anyone releases.
      await eventually(async () => {
        const nodes = await nodesOf(observer, path, waiterSession);
        return nodes.length === 1 && nodes[0] !== ghost;
      }, 10_000, 20);

      // A third contender queues behind the waiter's new node.
      const x = await engine();
      const xWaiting = new Mutex(x, 'ghost', path).acquire({ waitMs: 30_000 });
      xWaiting.catch(() => undefined);
      await untilChildCount(observer, path, 3);

      await holder.release();
      const lease = await waiting;
      expect(nameOf(lease)).not.toBe(ghost);
      expect(await exists(observer, lease.path)).toBe(true);
      // X still waits behind the waiter: never two holders.
      expect(await Promise.race([xWaiting.then(() => 'x acquired'), new Promise((r) => setTimeout(() => r('x waits'), 300))])).toBe('x waits');
      await lease.release();
      await (await xWaiting).release();
    });
  });
});
