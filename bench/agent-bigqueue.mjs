// The big-queue command of a bench agent (bench/agent.mjs): a lock with a crowd of waiters queued
// behind its two contenders, handed over between them. bench/bigqueue.mjs drives it.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { CreateMode, LockChannels, LockEngine, Mutex } from '../dist/index.js';

/** Creates in flight at once while the crowd queues. */
const CROWD_BURST = 5_000;

/**
 * @param {object} agent
 * @param {(sessionTimeoutMs?: number) => Promise<import('../dist/index.js').ZkConnection>} agent.openConnection
 * @param {(session: import('../dist/index.js').ZkSession, path: string) => Promise<void>} agent.ensurePath
 */
export function bigQueueCommands({ openConnection, ensurePath }) {
  /**
   * `waiters` nodes of another session queue in `path`, named like Curator's protected lock nodes
   * but with sequence numbers from 9 000 000 000 up: they sort behind every node ZooKeeper numbers,
   * so the two contenders here (a session each) take the lock in turn ahead of them, and every
   * acquire lists the whole queue (its create and listing, one round trip). Each round: the
   * holder waits until the other contender waits behind it (its `contended` event) and `holdMs`
   * more, then releases; handoff = the other's acquire() resolving − the release() call.
   * @param {{ waiters: number, releases: number, warmup: number, holdMs: number, path: string }} args
   */
  async function bigQueueHandoff({ waiters, releases, warmup, holdMs, path }) {
    const crowd = await openConnection(60_000);
    const crowdSession = /** @type {import('../dist/index.js').ZkSession} */ (crowd.session);
    const sides = [];
    /** State changes other than to 'connected' on any of the three connections: none on a stable link. */
    const linkChanges = [];
    const errors = [];
    const handoffs = [];
    const enqueues = [];
    try {
      await ensurePath(crowdSession, path);
      const queuedAt = performance.now();
      for (let from = 0; from < waiters; from += CROWD_BURST) {
        const burst = Array.from({ length: Math.min(CROWD_BURST, waiters - from) }, (_, i) =>
          crowdSession.create(`${path}/_c_${randomUUID()}-lock-${9_000_000_000 + from + i}`, Buffer.alloc(0), CreateMode.EPHEMERAL),
        );
        await Promise.all(burst);
      }
      const crowdMs = performance.now() - queuedAt;
      for (let i = 0; i < 2; i++) {
        const connection = await openConnection(30_000);
        const engine = new LockEngine(connection, { app: 'bench' });
        sides.push({ connection, engine, lock: new Mutex(engine, 'bigqueue', path, { coalesce: false }) });
      }
      for (const connection of [crowd, ...sides.map((s) => s.connection)]) connection.on('state', (state) => state !== 'connected' && linkChanges.push(state));
      /** @type {(() => void) | undefined} */
      let onContended;
      const contended = (/** @type {any} */ event) => event.path === path && onContended?.();
      LockChannels.contended.subscribe(contended);
      try {
        let holder = 0;
        let lease = await sides[holder].lock.acquire();
        for (let round = 0; round < warmup + releases; round++) {
          const next = 1 - holder;
          const waiting = new Promise((resolve) => (onContended = () => resolve(undefined)));
          const startedAt = performance.now();
          const granted = sides[next].lock.acquire().then((l) => ({ lease: l, at: performance.now() }));
          granted.catch(() => undefined);
          await Promise.race([waiting, granted]);
          const enqueueMs = performance.now() - startedAt;
          await sleep(holdMs);
          const releasedAt = performance.now();
          await lease.release();
          const grant = await granted;
          if (round >= warmup) {
            handoffs.push(grant.at - releasedAt);
            enqueues.push(enqueueMs);
          }
          lease = grant.lease;
          holder = next;
        }
        await lease.release();
      } finally {
        LockChannels.contended.unsubscribe(contended);
      }
      const { numChildren } = (await sides[0].connection.session?.exists(path)) ?? { numChildren: NaN };
      // A copy: closing the connections below adds 'closed'.
      return { waiters, crowdMs, handoffs, enqueues, linkChanges: [...linkChanges], left: numChildren - waiters, errors };
    } catch (error) {
      errors.push(String(error?.stack ?? error));
      return { waiters, handoffs, enqueues, linkChanges: [...linkChanges], errors };
    } finally {
      await crowd.close();
      await sides[0]?.connection.session?.delete(path).catch(() => undefined);
      for (const { connection, engine } of sides) {
        await engine.drain();
        await connection.close();
      }
    }
  }

  return { bigQueueHandoff };
}
