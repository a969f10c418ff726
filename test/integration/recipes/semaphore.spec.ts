// Semaphore (Curator InterProcessSemaphoreV2 layout) against a real ZooKeeper: layout, counting,
// all-or-nothing multi-permit acquires, clean-up on every way out, and faults (closed clients,
// expired sessions, cut connections). Ports Curator's TestInterProcessSemaphore and kazoo's
// TestSemaphore where they apply.
import { execFile } from 'node:child_process';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { InvalidOptionError, LockNotAcquiredError } from '../../../lib/core/errors.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { LeaseGroup } from '../../../lib/core/leases/multi-lease.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { RECIPE_WORKER, runRecipeWorkers, maxOverlap, trackMaxChildren, stopChildCountTrackers } from '../../support/recipe-workers.js';
import { fourLetter } from '../../support/zk-server.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { nameOf, notAcquired, within, untilChildCount, nodesOf, sessionIdOf, sessionsWatching, untilWatching, delay } from '../../support/lock-test-helpers.js';

// Tests open many sessions: close them after each test so they do not pile up.
afterEach(closeAll);
afterEach(stopChildCountTrackers);
afterAll(closeAll);


/** `_c_` + a v4 UUID (36 characters) + `-lease-` + the server's 10-digit sequence. */
const LEASE_NODE = /^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lease-\d{10}$/;
const LOCK_NODE = /^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-\d{10}$/;

/** The node names of a semaphore lease group (one per permit). */
function namesOf(group: Lease): string[] {
  return (group as LeaseGroup).leases.map(nameOf);
}

/** The InvalidOptionError thrown by `fn` (sync or async). */
async function invalidOption(fn: () => unknown): Promise<InvalidOptionError> {
  let caught: unknown;
  try {
    await fn();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(InvalidOptionError);
  return caught as InvalidOptionError;
}

/** Collects the warnings of the engines into one list. */
function warningsOf(...engines: LockEngine[]): string[] {
  const warnings: string[] = [];
  for (const e of engines) e.onWarning((message) => warnings.push(message));
  return warnings;
}

describe('Semaphore against a real ZooKeeper', () => {
  describe('layout (Curator InterProcessSemaphoreV2)', () => {
    it('holds a lease as <path>/leases/_c_<uuid>-lease-<seq> and leaves no internal lock node once acquire returns', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('sem-layout');
      const group = await new Semaphore(e, 'layout', path, { permits: 3 }).acquire();

      expect(group).toBeInstanceOf(LeaseGroup);
      expect((group as LeaseGroup).leases).toHaveLength(1);
      expect(group.path).toMatch(new RegExp(`^${path}/leases/`));
      const leases = await childrenOf(observer, `${path}/leases`);
      expect(leases).toEqual([nameOf(group)]);
      expect(leases[0]).toMatch(LEASE_NODE);
      // The internal mutex is released before acquire returns (its dir may already be reaped).
      expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
      // Only the two Curator sub-directories live under the semaphore path.
      expect((await childrenOf(observer, path)).filter((c) => c !== 'locks').sort()).toEqual(['leases']);
      await group.release();
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
    });

    it('a waiter holds the internal <path>/locks mutex (one _c_<uuid>-lock-<seq> node) and has one pending lease node', async () => {
      const holderEngine = await engine();
      const waiterEngine = await engine();
      const observer = await connect();
      const path = uniquePath('sem-waiter-layout');
      const holder = await new Semaphore(holderEngine, 'wl', path, { permits: 1 }).acquire();

      const waiting = new Semaphore(waiterEngine, 'wl', path, { permits: 1 }).acquire();
      const leases = await untilChildCount(observer, `${path}/leases`, 2);
      const locks = await untilChildCount(observer, `${path}/locks`, 1);
      expect(locks[0]).toMatch(LOCK_NODE);
      for (const name of leases) expect(name).toMatch(LEASE_NODE);
      expect(await nodesOf(observer, `${path}/locks`, waiterEngine.connection.sessionId!)).toEqual(locks);

      await holder.release();
      const lease = await within(waiting, 20_000, 'waiter');
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(lease)]);
      expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
      await lease.release();
    });

    it('creates the semaphore path, leases and locks as containers that ZooKeeper reaps after use (CURATOR-173)', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('sem-reap');
      const lease = await new Semaphore(e, 'reap', path, { permits: 2 }).acquire();
      expect(await exists(observer, `${path}/leases`)).toBe(true);
      await lease.release();
      await eventually(async () => !(await exists(observer, path)), 30_000, 200);
    });
  });

  describe('counting', () => {
    it('never lets more than `permits` holders in across processes, and reaches `permits` (3 processes × 4 workers, permits 4)', async () => {
      const PERMITS = 4;
      const observer = await connect();
      const path = uniquePath('sem-procs');
      const intervals = await runRecipeWorkers(3, {
        RECIPE: 'semaphore',
        LOCK_PATH: path,
        WORKERS: '4',
        ITERATIONS: '5',
        HOLD_MS: '100',
        PERMITS: String(PERMITS),
      });
      expect(intervals).toHaveLength(3 * 4 * 5);
      const max = maxOverlap(intervals);
      expect(max).toBeLessThanOrEqual(PERMITS);
      expect(max).toBe(PERMITS);
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
    }, 180_000);

    it('never lets more than `permits` holders in across connections of one process, and reaches `permits`', async () => {
      const PERMITS = 3;
      const path = uniquePath('sem-conns');
      const observer = await connect();
      const engines = await Promise.all(Array.from({ length: 4 }, () => engine()));
      const warnings = warningsOf(...engines);
      let holding = 0;
      let max = 0;
      await Promise.all(
        engines.flatMap((e) => {
          const semaphore = new Semaphore(e, 'conns', path, { permits: PERMITS });
          return [0, 1, 2].map(async () => {
            for (let i = 0; i < 4; i++) {
              await semaphore.withLock(async () => {
                max = Math.max(max, ++holding);
                await delay(50);
                holding--;
              });
            }
          });
        }),
      );
      expect(max).toBeLessThanOrEqual(PERMITS);
      expect(max).toBe(PERMITS);
      expect(holding).toBe(0);
      expect(warnings).toEqual([]);
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
    }, 120_000);

    it('testRelease1AtATime: 10 clients, 5 permits → exactly 5 hold until fewer remain, all 10 get a lease, none left', async () => {
      const PERMITS = 5;
      const path = uniquePath('sem-1at');
      const observer = await connect();
      const engines = await Promise.all(Array.from({ length: 10 }, () => engine()));
      const warnings = warningsOf(...engines);
      const held: Lease[] = [];
      let max = 0;
      const acquired = engines.map((e) =>
        new Semaphore(e, 'one-at-a-time', path, { permits: PERMITS }).acquire().then((lease) => {
          held.push(lease);
          max = Math.max(max, held.filter((l) => l.isHeld).length);
          return lease;
        }),
      );
      let released = 0;
      while (released < engines.length) {
        const expected = Math.min(PERMITS, engines.length - released);
        await eventually(() => held.filter((l) => l.isHeld).length === expected, 20_000, 10);
        const next = held.find((l) => l.isHeld)!;
        await next.release();
        released++;
      }
      await Promise.all(acquired);
      expect(held).toHaveLength(10);
      expect(max).toBe(PERMITS);
      expect(warnings).toEqual([]);
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
    }, 120_000);

    it('testReleaseInChunks: 40 acquirers, 11 permits, random release chunks → never more than 11, refilled to 11, count back to 0', async () => {
      const PERMITS = 11;
      const TOTAL = 40;
      const path = uniquePath('sem-chunks');
      const observer = await connect();
      const engines = await Promise.all(Array.from({ length: 4 }, () => engine()));
      const warnings = warningsOf(...engines);
      const semaphores = engines.map((e) => new Semaphore(e, 'chunks', path, { permits: PERMITS }));
      const held: Lease[] = [];
      let max = 0;
      const acquired = Array.from({ length: TOTAL }, (_, i) =>
        semaphores[i % semaphores.length]!.acquire().then((lease) => {
          held.push(lease);
          max = Math.max(max, held.filter((l) => l.isHeld).length);
        }),
      );
      const nodeCounts = trackMaxChildren(observer, `${path}/leases`);
      let released = 0;
      while (released < TOTAL) {
        const expected = Math.min(PERMITS, TOTAL - released);
        await eventually(() => held.filter((l) => l.isHeld).length === expected, 30_000, 10);
        const holding = held.filter((l) => l.isHeld);
        const chunk = holding.slice(0, 1 + Math.floor(Math.random() * Math.min(5, holding.length)));
        await Promise.all(chunk.map((l) => l.release()));
        released += chunk.length;
      }
      await Promise.all(acquired);
      expect(held).toHaveLength(TOTAL);
      expect(max).toBeLessThanOrEqual(PERMITS);
      // At most the holders plus the one pending node of whoever holds the internal lock.
      expect(await nodeCounts.stop()).toBeLessThanOrEqual(PERMITS + 1);
      expect(warnings).toEqual([]);
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
      expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
    }, 120_000);
  });

  describe('multi-permit, try-once, abort', () => {
    it('a multi-permit acquire is all-or-nothing: asking 2 of 3 with 1 free times out without taking the free one, and leaves no node', async () => {
      const otherEngine = await engine();
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('sem-all-or-none');
      const other = await new Semaphore(otherEngine, 'aon', path, { permits: 3 }).acquire({ permits: 2 });
      expect((other as LeaseGroup).leases).toHaveLength(2);
      const otherNames = namesOf(other).sort();

      const nodeCounts = trackMaxChildren(observer, `${path}/leases`);
      const started = Date.now();
      const error = await notAcquired(new Semaphore(e, 'aon', path, { permits: 3 }).acquire({ permits: 2, waitMs: 500 }));
      const waited = Date.now() - started;
      expect(error.reason).toBe('timeout');
      expect(error.lockName).toBe('aon');
      expect(waited).toBeGreaterThanOrEqual(450);
      expect(waited).toBeLessThan(5000);
      // Its one node waited for two free permits: it never held the free one alone.
      expect(await nodeCounts.stop()).toBe(3);
      await e.drain();
      expect((await childrenOf(observer, `${path}/leases`)).sort()).toEqual(otherNames);
      expect(await nodesOf(observer, `${path}/leases`, e.connection.sessionId!)).toEqual([]);
      expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
      await other.release();
    });

    it('two callers each asking for all 2 permits at once do not deadlock (no partial holding while waiting)', async () => {
      const observer = await connect();
      const path = uniquePath('sem-hold-and-wait');
      const nodeCounts = trackMaxChildren(observer, `${path}/leases`);
      let inUse = 0;
      let maxInUse = 0;
      const callers = await Promise.all([engine(), engine(), engine()]);
      const rounds = await Promise.all(
        callers.map(async (e, i) => {
          const semaphore = new Semaphore(e, 'hw', path, { permits: 2 });
          const taken: number[] = [];
          for (let round = 0; round < 5; round++) {
            const lease = await semaphore.acquire({ permits: i === 2 ? 1 : 2, waitMs: 20_000 });
            const permits = (lease as LeaseGroup).leases.length;
            taken.push(permits);
            maxInUse = Math.max(maxInUse, (inUse += permits));
            await delay(5);
            inUse -= permits;
            await lease.release();
          }
          return taken;
        }),
      );
      expect(rounds).toEqual([[2, 2, 2, 2, 2], [2, 2, 2, 2, 2], [1, 1, 1, 1, 1]]);
      expect(maxInUse).toBe(2);
      expect(await nodeCounts.stop()).toBeLessThanOrEqual(3); // 2 held + one waiting for room
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
    }, 60_000);

    it('a multi-permit lease group releases its leases one by one or all at once', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('sem-group');
      const group = (await new Semaphore(e, 'group', path, { permits: 3 }).acquire({ permits: 3 })) as LeaseGroup;
      expect(group.leases).toHaveLength(3);
      expect(new Set(group.leases.map((l) => l.path)).size).toBe(3);
      await group.leases[1]!.release();
      expect((await childrenOf(observer, `${path}/leases`)).sort()).toEqual([nameOf(group.leases[0]!), nameOf(group.leases[2]!)].sort());
      expect(group.isHeld).toBe(false); // it no longer holds all it asked for
      expect(group.leases.map((l) => l.isHeld)).toEqual([true, false, true]);
      await group.release();
      expect(group.leases.map((l) => l.isHeld)).toEqual([false, false, false]);
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
    });

    it('tryAcquire() with no free permit returns null promptly and leaves no node', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('sem-try');
      const holder = await new Semaphore(holderEngine, 'try', path, { permits: 1 }).acquire();

      const started = Date.now();
      expect(await new Semaphore(other, 'try', path, { permits: 1 }).tryAcquire()).toBeNull();
      expect(Date.now() - started).toBeLessThan(2000);
      await other.drain();
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(holder)]);
      expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
      await holder.release();
    });

    it('tryAcquire() returns null promptly also while another client waits for a permit (and so holds the internal lock)', async () => {
      const holderEngine = await engine();
      const waiterEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('sem-try-waiter');
      const holder = await new Semaphore(holderEngine, 'try-w', path, { permits: 1 }).acquire();
      const waiting = new Semaphore(waiterEngine, 'try-w', path, { permits: 1 }).acquire();
      await untilChildCount(observer, `${path}/locks`, 1); // the waiter holds <path>/locks while it waits

      const started = Date.now();
      expect(await new Semaphore(other, 'try-w', path, { permits: 1 }).tryAcquire()).toBeNull();
      const took = Date.now() - started;
      await other.drain();
      expect(await nodesOf(observer, `${path}/leases`, other.connection.sessionId!)).toEqual([]);
      expect(await nodesOf(observer, `${path}/locks`, other.connection.sessionId!)).toEqual([]);
      await holder.release();
      await (await within(waiting, 20_000, 'waiter')).release();
      expect(took).toBeLessThan(1000);
    });

    it('testSimple2: 3 permits → three acquires succeed, the 4th try gets null; after one release an acquire succeeds', async () => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('sem-simple2');
      const semaphore = new Semaphore(e, 'simple2', path, { permits: 3 });
      const leases = [await semaphore.tryAcquire(), await semaphore.tryAcquire(), await semaphore.tryAcquire()];
      for (const lease of leases) expect(lease).not.toBeNull();
      expect(await semaphore.tryAcquire()).toBeNull();
      await e.drain();
      expect(await childrenOf(observer, `${path}/leases`)).toHaveLength(3);

      await leases[1]!.release();
      const again = await semaphore.acquire({ waitMs: 10_000 });
      expect((await childrenOf(observer, `${path}/leases`)).sort()).toEqual([leases[0]!, leases[2]!, again].map(nameOf).sort());
      await Promise.all([leases[0]!.release(), leases[2]!.release(), again.release()]);
    });

    it('a non-reentrant semaphore with 1 permit blocks a second acquire by the same caller (kazoo test_lock_one)', async () => {
      const e = await engine();
      const path = uniquePath('sem-one');
      const semaphore = new Semaphore(e, 'one', path, { permits: 1 });
      await semaphore.withLock(async () => {
        expect(await semaphore.tryAcquire()).toBeNull();
        const error = await notAcquired(semaphore.acquire({ waitMs: 300 }));
        expect(error.reason).toBe('timeout');
      });
      const lease = await semaphore.acquire({ waitMs: 5000 });
      await lease.release();
    });

    it('aborting while waiting deletes the pending lease node (CURATOR-462), and a later acquire works', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('sem-abort');
      const holder = await new Semaphore(holderEngine, 'abort', path, { permits: 1 }).acquire();
      const semaphore = new Semaphore(other, 'abort', path, { permits: 1 });

      const controller = new AbortController();
      const waiting = semaphore.acquire({ signal: controller.signal });
      waiting.catch(() => undefined);
      await untilChildCount(observer, `${path}/leases`, 2); // the waiter's lease node is pending
      const why = new Error('caller gave up');
      controller.abort(why);
      const error = await notAcquired(waiting);
      expect(error.reason).toBe('aborted');
      await other.drain();
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(holder)]);
      expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);

      await holder.release();
      const later = await semaphore.acquire({ waitMs: 10_000 });
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(later)]);
      await later.release();
    });
  });

  describe('faults', () => {
    it('testClientClose: closing the holder\'s connection frees its lease for a waiting client', async () => {
      const holderEngine = await engine();
      const other = await engine();
      const observer = await connect();
      const path = uniquePath('sem-close');
      await new Semaphore(holderEngine, 'close', path, { permits: 1 }).acquire();
      const waiting = new Semaphore(other, 'close', path, { permits: 1 }).acquire();
      await untilChildCount(observer, `${path}/leases`, 2);

      await holderEngine.connection.close();
      const lease = await within(waiting, 20_000, 'waiter after the holder closed');
      expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(lease)]);
      await lease.release();
    });

    describe('with the waiter behind a TCP proxy', () => {
      let proxy: TcpProxy;
      beforeEach(async () => {
        proxy = await TcpProxy.start(zkConnectString());
      });
      afterEach(async () => {
        await proxy.close();
      });

      /** Cuts the waiter off, expires its session on the server, lets it reconnect (new session). */
      async function expireWhileCut(waiterEngine: LockEngine): Promise<void> {
        const connection = waiterEngine.connection;
        const id = connection.sessionId!;
        const password = connection.session!.password;
        proxy.cut();
        await within(killSession(id, password), 20_000, 'killSession');
        const lost = nextEvent(connection, 'lost', 60_000);
        const connected = nextEvent(connection, 'connected', 60_000);
        proxy.restore();
        await within(lost, 20_000, 'the waiter\'s "lost" after the restore');
        await within(connected, 20_000, 'the waiter\'s "connected" (new session)');
      }

      it('a waiter whose session expires while it waits still gets the lease when the holder releases (kazoo test_handle_session_loss)', async () => {
        const holderEngine = await engine();
        const waiterEngine = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
        const observer = await connect();
        const path = uniquePath('sem-expire');
        const holder = await new Semaphore(holderEngine, 'expire', path, { permits: 1 }).acquire();
        const waiting = new Semaphore(waiterEngine, 'expire', path, { permits: 1 }).acquire();
        waiting.catch(() => undefined);
        await untilChildCount(observer, `${path}/leases`, 2);

        const oldSession = waiterEngine.connection.sessionId!;
        await expireWhileCut(waiterEngine);
        expect(waiterEngine.connection.sessionId).not.toBe(oldSession);

        await holder.release();
        const lease = await within(waiting, 20_000, 'waiter after its session expired');
        expect(lease.sessionId).toBe(waiterEngine.connection.sessionId);
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(lease)]);
        await lease.release();
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
      });

      it('after its session expired, a re-queued waiter and a newcomer both get the lease in turn; never more than permits + 1 lease nodes', async () => {
        const holderEngine = await engine();
        const waiterEngine = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
        const newcomerEngine = await engine();
        const observer = await connect();
        const path = uniquePath('sem-expire-newcomer');
        const warnings = warningsOf(holderEngine, waiterEngine, newcomerEngine);
        const holder = await new Semaphore(holderEngine, 'expire2', path, { permits: 1 }).acquire();
        const waiting = new Semaphore(waiterEngine, 'expire2', path, { permits: 1 }).acquire();
        waiting.catch(() => undefined);
        await untilChildCount(observer, `${path}/leases`, 2);

        await expireWhileCut(waiterEngine);
        // The waiter queues again in its new session.
        await eventually(async () => (await nodesOf(observer, `${path}/leases`, waiterEngine.connection.sessionId!)).length === 1, 20_000, 20);
        const nodeCounts = trackMaxChildren(observer, `${path}/leases`);

        // A newcomer arrives while the holder still holds.
        const newcomer = new Semaphore(newcomerEngine, 'expire2', path, { permits: 1 }).acquire();
        newcomer.catch(() => undefined);
        // Wait until the newcomer is queued somewhere (internal lock or a lease node).
        await eventually(
          async () =>
            (await nodesOf(observer, `${path}/locks`, newcomerEngine.connection.sessionId!)).length +
              (await nodesOf(observer, `${path}/leases`, newcomerEngine.connection.sessionId!)).length >
            0,
          20_000,
          20,
        );

        await holder.release();
        // On a hang, say what ZooKeeper shows (a pending lease node that does not hold the internal lock).
        const explain = async (error: Error): Promise<never> => {
          const leases = await childrenOf(observer, `${path}/leases`);
          const locks = await childrenOf(observer, `${path}/locks`);
          throw new Error(
            `${error.message}; holder released; lease nodes now ${leases.length} (max seen ${nodeCounts.max}), ` +
              `internal lock nodes ${locks.length}; warnings: ${JSON.stringify(warnings)}`,
          );
        };
        try {
          const first = await within(Promise.race([waiting, newcomer]), 20_000, 'first of re-queued waiter and newcomer').catch(explain);
          await first.release();
          const second = await within(Promise.all([waiting, newcomer]), 20_000, 'second of re-queued waiter and newcomer').catch(explain);
          await Promise.all(second.map((l) => l.release()));
        } finally {
          // A still-waiting waiter is closed while connected, before the proxy is torn down (a
          // waiter closed while cut off once ended in the unhandled rejection tested below).
          await waiterEngine.connection.close();
        }

        expect(await nodeCounts.stop()).toBeLessThanOrEqual(2);
        expect(warnings).toEqual([]);
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
      });

      it('closing the connection while an acquire waits out a lost reply rejects the acquire and does not crash the process (unhandled rejection)', async () => {
        // In a child process: an unhandled rejection ends the process it happens in.
        const output = await new Promise<string>((resolve, reject) =>
          execFile(
            process.execPath,
            [RECIPE_WORKER],
            { env: { ...process.env, ZK_CONNECT: zkConnectString(), RECIPE: 'close-after-lost-reply', LOCK_PATH: uniquePath('sem-lost-reply') }, timeout: 60_000 },
            (error, stdout, stderr) => (error ? reject(new Error(`the scenario process died (${error.message.split('\n')[0]})\n${stderr}`)) : resolve(stdout)),
          ),
        );
        expect(JSON.parse(output.trim())).toEqual({ outcome: 'LockNotAcquiredError', reason: 'connection' });
      });

      it('a waiter cut off while its requests are in flight is always told: "suspended" comes in each of 8 rounds', async () => {
        // In a child process (like the test above): a missed disconnection can end in the
        // unhandled rejection when the connection is closed.
        const output = await new Promise<string>((resolve, reject) =>
          execFile(
            process.execPath,
            [RECIPE_WORKER],
            { env: { ...process.env, ZK_CONNECT: zkConnectString(), RECIPE: 'cut-in-flight', LOCK_PATH: uniquePath('sem-in-flight'), ROUNDS: '8' }, timeout: 110_000 },
            (error, stdout, stderr) => (error ? reject(new Error(`the scenario process died (${error.message.split('\n')[0]})\n${stderr}`)) : resolve(stdout)),
          ),
        );
        expect(JSON.parse(output.trim())).toEqual({ rounds: 8, missed: [], stuck: [] });
      }, 120_000);

      it('no orphaned lease after a cut while waiting on the leases (CURATOR-335): the holder releases during the cut, the waiter gets its lease on reconnect', async () => {
        const holderEngine = await engine();
        const waiterEngine = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
        const observer = await connect();
        const path = uniquePath('sem-cut');
        const holder = await new Semaphore(holderEngine, 'cut', path, { permits: 1 }).acquire();
        const nodeCounts = trackMaxChildren(observer, `${path}/leases`);
        const waiting = new Semaphore(waiterEngine, 'cut', path, { permits: 1 }).acquire();
        waiting.catch(() => undefined);
        await untilChildCount(observer, `${path}/leases`, 2);
        const session = waiterEngine.connection.sessionId!;

        const suspended = nextEvent(waiterEngine.connection, 'suspended');
        proxy.cut();
        await suspended;
        await holder.release(); // the waiter cannot hear this
        await untilChildCount(observer, `${path}/leases`, 1);
        const reconnected = nextEvent(waiterEngine.connection, 'reconnected');
        proxy.restore();
        await reconnected;

        const lease = await within(waiting, 20_000, 'waiter after reconnecting');
        expect(lease.sessionId).toBe(session);
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(lease)]);
        await lease.release();
        expect(await nodeCounts.stop()).toBeLessThanOrEqual(2);
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
        expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
      });

      it('no orphaned nodes after a cut while queued on the internal lock: both waiters get the lease in turn', async () => {
        const holderEngine = await engine();
        const firstEngine = await engine();
        const waiterEngine = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
        const observer = await connect();
        const path = uniquePath('sem-cut-locks');
        const holder = await new Semaphore(holderEngine, 'cut2', path, { permits: 1 }).acquire();
        const nodeCounts = trackMaxChildren(observer, `${path}/leases`);
        const first = new Semaphore(firstEngine, 'cut2', path, { permits: 1 }).acquire();
        await untilChildCount(observer, `${path}/leases`, 2); // first waits on the leases, holding locks
        const waiting = new Semaphore(waiterEngine, 'cut2', path, { permits: 1 }).acquire();
        waiting.catch(() => undefined);
        const locks = await untilChildCount(observer, `${path}/locks`, 2); // the waiter queues on the internal lock
        const firstLock = (await nodesOf(observer, `${path}/locks`, firstEngine.connection.sessionId!))[0]!;
        expect(locks).toContain(firstLock);
        await untilWatching(`${path}/locks/${firstLock}`, waiterEngine.connection.sessionId!); // asleep on its watch

        const suspended = nextEvent(waiterEngine.connection, 'suspended');
        proxy.cut();
        await suspended;
        await holder.release();
        const firstLease = await within(first, 20_000, 'first waiter');
        const reconnected = nextEvent(waiterEngine.connection, 'reconnected');
        proxy.restore();
        await reconnected;
        await firstLease.release();

        const lease = await within(waiting, 20_000, 'waiter after reconnecting');
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([nameOf(lease)]);
        await lease.release();
        expect(await nodeCounts.stop()).toBeLessThanOrEqual(2);
        expect(await childrenOf(observer, `${path}/leases`)).toEqual([]);
        expect(await childrenOf(observer, `${path}/locks`)).toEqual([]);
      });
    });
  });

  describe('permit disagreement and options', () => {
    it('a participant with fewer permits than the holders use is not granted, and the engine warns about the disagreement', async () => {
      const bigEngine = await engine();
      const smallEngine = await engine();
      const observer = await connect();
      const path = uniquePath('sem-mismatch');
      const bigWarnings = warningsOf(bigEngine);
      const warnings = warningsOf(smallEngine);
      const big = await new Semaphore(bigEngine, 'mismatch', path, { permits: 3 }).acquire({ permits: 3 });
      expect(bigWarnings).toEqual([]);

      const small = new Semaphore(smallEngine, 'mismatch', path, { permits: 1 });
      const error = await notAcquired(small.acquire({ waitMs: 1000 }));
      expect(error.reason).toBe('timeout');
      expect(warnings.length).toBeGreaterThanOrEqual(1);
      expect(warnings[0]).toContain('permits=1');
      expect(warnings[0]).toContain('3 leases');
      expect(warnings[0]).toContain(path);
      expect(await small.tryAcquire()).toBeNull();
      await smallEngine.drain();
      expect((await childrenOf(observer, `${path}/leases`)).sort()).toEqual(namesOf(big).sort());
      await big.release();
    });

    it.each([
      ['0', 0],
      ['-1', -1],
      ['1.5', 1.5],
      ['NaN', Number.NaN],
      ['the string "3"', '3'],
      ['Infinity', Number.POSITIVE_INFINITY],
      ['null', null],
    ])('rejects permits %s with InvalidOptionError naming "permits"', async (_label, permits) => {
      const e = await engine();
      const error = await invalidOption(() => new Semaphore(e, 'bad', uniquePath('sem-bad'), { permits } as never));
      expect(error.option).toBe('permits');
    });

    it('rejects a missing permits option (or no options at all) with InvalidOptionError naming "permits"', async () => {
      const e = await engine();
      expect((await invalidOption(() => new Semaphore(e, 'bad', uniquePath('sem-bad'), undefined as never))).option).toBe('permits');
      expect((await invalidOption(() => new Semaphore(e, 'bad', uniquePath('sem-bad'), {} as never))).option).toBe('permits');
    });

    it('rejects a bad leaseMs with InvalidOptionError naming "leaseMs"', async () => {
      const e = await engine();
      expect((await invalidOption(() => new Semaphore(e, 'bad', uniquePath('sem-bad'), { permits: 2, leaseMs: 0 }))).option).toBe('leaseMs');
    });

    it.each([
      ['more than the semaphore has', 5],
      ['0', 0],
      ['1.5', 1.5],
      ['the string "2"', '2'],
    ])('acquire({ permits: %s }) on a 3-permit semaphore rejects with InvalidOptionError naming "permits", creating nothing', async (_label, permits) => {
      const e = await engine();
      const observer = await connect();
      const path = uniquePath('sem-bad-acquire');
      const semaphore = new Semaphore(e, 'bad-acquire', path, { permits: 3 });
      const error = await invalidOption(() => semaphore.acquire({ permits } as never));
      expect(error.option).toBe('permits');
      expect(await exists(observer, path)).toBe(false);
    });
  });
});
