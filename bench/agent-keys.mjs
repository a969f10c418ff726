// The key-churn command of a bench agent (bench/agent.mjs): every acquisition takes a lock that was
// never used before (a lock per order, say), so each leaves an empty lock path behind it.
// bench/keys.mjs drives it and counts the znodes left on the server.
import { CreateMode, Mutex } from '../dist/index.js';

const EMPTY = Buffer.alloc(0);

/**
 * @param {object} agent
 * @param {import('../dist/index.js').LockEngine} agent.engine
 * @param {(session: import('../dist/index.js').ZkSession, path: string) => Promise<void>} agent.ensurePath
 */
export function keyCommands({ engine, ensurePath }) {
  /**
   * `workers` loops for `seconds`, each taking fresh keys under `base`: `ours` with a Mutex per key;
   * `containers` as Curator does it (a container path per key, a node in it, the node deleted),
   * leaving the empty paths to ZooKeeper's reaper.
   * @param {{ peer: 'ours' | 'containers', seconds: number, base: string, workers?: number }} args
   */
  async function keyChurn({ peer, seconds, base, workers = 16 }) {
    const session = engine.connection.session;
    if (!session) throw new Error('not connected');
    await ensurePath(session, base);
    let next = 0;
    const until = performance.now() + seconds * 1000;
    const errors = [];
    const cycle = async () => {
      const key = `${base}/o${next++}`;
      if (peer === 'ours') {
        await new Mutex(engine, key, key).withLock(() => undefined);
        return;
      }
      await session.create(key, EMPTY, CreateMode.CONTAINER).catch((e) => (e?.codeName === 'NODEEXISTS' ? undefined : Promise.reject(e)));
      const node = await session.create(`${key}/lock-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL);
      await session.delete(node);
    };
    await Promise.all(
      Array.from({ length: workers }, async () => {
        while (performance.now() < until && errors.length < 5) {
          try {
            await cycle();
          } catch (error) {
            errors.push(String(error));
          }
        }
      }),
    );
    return { keys: next, seconds, errors };
  }
  return { keyChurn };
}
