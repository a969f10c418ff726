// The leader-election commands of a bench agent (bench/agent.mjs): this process is one participant
// of one election, on the agent's own session; and the raw ZooKeeper floor of a handover (one
// process deletes a node, another hears of it through an exists watch). bench/election.mjs drives
// them across processes.
//
// Times are CLOCK_MONOTONIC milliseconds (process.hrtime; Java's System.nanoTime reads the same
// clock on Linux), so one process's close() and another's `gained` event can be subtracted.
import { CreateMode, Leadership } from '../dist/index.js';

export const monoMs = () => Number(process.hrtime.bigint()) / 1e6;

const EMPTY = Buffer.alloc(0);
const WAIT_MS = 10_000;

/**
 * @param {object} agent
 * @param {import('../dist/index.js').LockEngine} agent.engine
 * @param {(session: import('../dist/index.js').ZkSession, path: string) => Promise<void>} agent.ensurePath
 */
export function electionCommands({ engine, ensurePath }) {
  /** @type {Leadership | undefined} */
  let leadership;
  let gains = 0;
  /** The latest term this process gained: when, its token, when its signal aborted. */
  let last = { at: NaN, token: '', lostAt: /** @type {number | undefined} */ (undefined) };
  /** @type {(() => void)[]} */
  let onGain = [];

  const session = () => {
    const s = engine.connection.session;
    if (!s) throw new Error('not connected');
    return s;
  };

  /** A new participant (a closed Leadership does not start again). */
  function join(/** @type {string} */ path, /** @type {string} */ id) {
    const l = new Leadership(engine, 'bench-election', path, { participantId: id });
    l.on('gained', (term) => {
      const record = { at: monoMs(), token: String(term.fencingToken), lostAt: /** @type {number | undefined} */ (undefined) };
      term.signal.addEventListener('abort', () => (record.lostAt = monoMs()), { once: true });
      last = record;
      gains++;
      for (const wake of onGain.splice(0)) wake();
    });
    leadership = l.start();
  }

  const leader = () => {
    if (!leadership) throw new Error('not in an election (electJoin first)');
    return leadership;
  };

  /** @type {Promise<number> | undefined} */
  let watched;
  const madeParents = new Set();

  return {
    /** Joins the election at `path` as participant `id`. */
    async electJoin({ path, id }) {
      join(path, id);
      return {};
    },
    /** Whether this process leads, how many terms it gained so far, and the queue's ids in order. */
    async electStatus() {
      const l = leader();
      return { isLeader: l.isLeader, gains, participants: (await l.participants()).map((p) => p.id) };
    },
    /** Resolves once this process has gained more than `gains` terms: when the latest began. */
    async electAwait({ gains: after }) {
      if (gains <= after) {
        await new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no leadership gained within ${WAIT_MS} ms`)), WAIT_MS);
          onGain.push(() => (clearTimeout(timer), resolve(undefined)));
        });
      }
      return { gainedAt: last.at, token: last.token };
    },
    /**
     * The leader gives up its term: `close` leaves the election (the graceful shutdown path; the
     * coordinator has it join again once the successor leads), `stepDown` ends the term and queues
     * again at the tail. `t` is taken just before the call; lostAt is when the term's signal aborted.
     */
    async electHandover({ mode }) {
      const l = leader();
      await l.whenLeader(AbortSignal.timeout(WAIT_MS));
      const term = last;
      const t = monoMs();
      await (mode === 'close' ? l.close() : l.stepDown());
      return { t, lostAt: term.lostAt, token: term.token };
    },
    async electLeave() {
      await leadership?.close();
      leadership = undefined;
      onGain = [];
      return {};
    },

    /** The floor, step 1 (the deleting process): an ephemeral node at `path`. */
    async floorCreate({ path }) {
      const parent = path.slice(0, path.lastIndexOf('/'));
      if (!madeParents.has(parent)) await ensurePath(session(), parent);
      madeParents.add(parent);
      await session().create(path, EMPTY, CreateMode.EPHEMERAL);
      return {};
    },
    /** Step 2 (the watching process): an exists watch on it. */
    async floorArm({ path }) {
      /** @type {(at: number) => void} */
      let fired = () => undefined;
      watched = new Promise((resolve) => (fired = resolve));
      if (!(await session().exists(path, () => fired(monoMs())))) throw new Error(`${path} is missing`);
      return {};
    },
    /** Step 3, sent with floorDelete: when the watch event arrived. */
    async floorAwait() {
      if (!watched) throw new Error('floorArm first');
      const at = await watched;
      watched = undefined;
      return { at };
    },
    /** Step 3 (the deleting process): the delete; `t` is taken just before the call. */
    async floorDelete({ path }) {
      const t = monoMs();
      await session().delete(path);
      return { t };
    },
  };
}
