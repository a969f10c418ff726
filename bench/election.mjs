// The leadership handover workload of a bench run: N participants, one process and one session
// each, in one election; the leader gives up (close(): the graceful shutdown path, or stepDown())
// and the time from that call to the successor's `gained` event is measured, round after round.
// Peers, alternating batch by batch: ZooKeeper's own floor across processes (one process deletes a
// node, another hears of it through an exists watch) and Curator's LeaderLatch (close(), then the
// successor's isLeader()) in N JVMs. The agents' side is bench/agent-election.mjs and the Election
// class of bench/java/CuratorBench.java.
import { BASE, fail, opts, wants } from './options.mjs';
import { percentile, sleep } from './support.mjs';

/**
 * One election implementation's commands on an agent.
 * @typedef {object} ElectionApi
 * @property {(agent: import('./support.mjs').Agent, path: string) => Promise<any>} join
 * @property {(agent: import('./support.mjs').Agent) => Promise<{ isLeader: boolean, gains: number, participants: string[] }>} status
 * @property {(agent: import('./support.mjs').Agent, gains: number) => Promise<{ gainedAt: number, token?: string }>} await
 * @property {(agent: import('./support.mjs').Agent, mode: string) => Promise<{ t: number, lostAt?: number, token?: string }>} handover
 * @property {(agent: import('./support.mjs').Agent) => Promise<any>} leave
 */

/** @type {ElectionApi} */
const OURS = {
  join: (a, path) => a.request({ cmd: 'electJoin', path, id: a.name }),
  status: (a) => a.request({ cmd: 'electStatus' }),
  await: (a, gains) => a.request({ cmd: 'electAwait', gains }),
  handover: (a, mode) => a.request({ cmd: 'electHandover', mode }),
  leave: (a) => a.request({ cmd: 'electLeave' }),
};

/** @type {ElectionApi} */
const CURATOR = {
  join: (a, path) => a.request(`latchJoin ${path} ${a.name}`),
  status: (a) => a.request('latchStatus'),
  await: (a, gains) => a.request(`latchAwait ${gains}`),
  handover: (a) => a.request('latchHandover'),
  leave: (a) => a.request('latchLeave'),
};

const round3 = (/** @type {number} */ x) => Math.round(x * 1000) / 1000;

/**
 * One election on `agents`: handover() measures one change of leader.
 * @param {ElectionApi} api
 * @param {import('./support.mjs').Agent[]} agents
 * @param {string} path
 */
async function election(api, agents, path) {
  const byName = new Map(agents.map((a) => [a.name, a]));
  for (const a of agents) await api.join(a, path);
  let asked = agents[0];
  return {
    /**
     * Waits until all N are queued, then the leader gives up (`mode`) and the successor's gain is
     * timed. Checked (ours): the successor's term began after the old one's signal aborted, with a
     * greater fencing token.
     * @param {string} mode
     */
    async handover(mode) {
      let queue = await api.status(asked);
      for (const deadline = Date.now() + 10_000; queue.participants.length < agents.length; ) {
        if (Date.now() > deadline) throw new Error(`${path}: ${queue.participants.length} of ${agents.length} participants queued after 10 s`);
        await sleep(1);
        queue = await api.status(asked);
      }
      const leader = /** @type {import('./support.mjs').Agent} */ (byName.get(queue.participants[0]));
      const next = /** @type {import('./support.mjs').Agent} */ (byName.get(queue.participants[1]));
      const { gains } = next === asked ? queue : await api.status(next);
      await sleep(opts.electionSettleMs);
      const [gone, gained] = await Promise.all([api.handover(leader, mode), api.await(next, gains)]);
      // A closed participant takes part anew (as a restarted instance would), off the measured path.
      if (mode === 'close') await api.join(leader, path);
      asked = next;
      const ms = gained.gainedAt - gone.t;
      const ok =
        ms > 0 &&
        (gone.token === undefined || (gone.lostAt !== undefined && gone.lostAt <= gained.gainedAt && BigInt(/** @type {string} */ (gained.token)) > BigInt(gone.token)));
      return { ms: round3(ms), ok };
    },
    leave: () => Promise.all(agents.map((a) => api.leave(a))),
  };
}

/**
 * ZooKeeper's floor across processes: agent i creates a node, agent i+1 watches it, agent i deletes
 * it; the time from the delete call to the watch event.
 * @param {import('./support.mjs').Agent[]} agents
 * @param {string} path
 * @param {number} i
 */
async function floorOnce(agents, path, i) {
  const [a, b] = [agents[i % agents.length], agents[(i + 1) % agents.length]];
  const node = `${path}/n`;
  await a.request({ cmd: 'floorCreate', path: node });
  await b.request({ cmd: 'floorArm', path: node });
  await sleep(opts.electionSettleMs);
  const [deleted, event] = await Promise.all([a.request({ cmd: 'floorDelete', path: node }), b.request({ cmd: 'floorAwait' })]);
  const ms = event.at - deleted.t;
  return { ms: round3(ms), ok: ms > 0 };
}

/**
 * Leadership handover, alternating batch by batch between our close() and stepDown(), the floor
 * and Curator's LeaderLatch.
 * @param {import('./workloads.mjs').BenchContext} ctx
 * @param {{ procs: import('./support.mjs').Agent[], curatorProcs: import('./support.mjs').Agent[] }} agents
 */
export async function runLeadership({ results }, { procs, curatorProcs }) {
  if (!wants('leader')) return;
  process.stdout.write(`leadership handover (${procs.length} participants, one process each):`);
  const ours = await election(OURS, procs, `${BASE}/election`);
  const curator = curatorProcs.length ? await election(CURATOR, curatorProcs, `${BASE}/election-curator`) : undefined;
  let floors = 0;
  /** @type {Record<string, () => Promise<{ ms: number, ok: boolean }>>} */
  const peers = {
    close: () => ours.handover('close'),
    stepDown: () => ours.handover('stepDown'),
    floor: () => floorOnce(procs, `${BASE}/election-floor`, floors++),
  };
  if (curator) peers.curator = () => curator.handover('close');
  /** @type {Record<string, { times: number[], ok: boolean }>} */
  const samples = Object.fromEntries(Object.keys(peers).map((k) => [k, { times: [], ok: true }]));
  try {
    process.stdout.write(' warm-up');
    for (const run of Object.values(peers)) for (let i = 0; i < opts.electionWarmup; i++) await run();
    for (let r = 0; r < opts.rounds; r++) {
      process.stdout.write(` · round ${r + 1}/${opts.rounds}`);
      const order = r % 2 === 0 ? Object.keys(peers) : Object.keys(peers).reverse();
      for (const peer of order) {
        for (let i = 0; i < opts.electionSamples; i++) {
          const { ms, ok } = await peers[peer]();
          samples[peer].times.push(ms);
          if (!ok && samples[peer].ok) fail(`leadership ${peer}: a successor led before the old term ended (or the clock ran back): ${ms} ms`);
          samples[peer].ok &&= ok;
        }
      }
    }
  } finally {
    await ours.leave();
    await curator?.leave();
    process.stdout.write('\n');
  }
  results.leadership = {
    participants: procs.length,
    ...Object.fromEntries(
      Object.entries(samples).map(([peer, s]) => [
        peer,
        { p50: percentile(s.times, 50), p99: percentile(s.times, 99), samples: s.times.length, check: s.ok ? 'ok' : 'FAILED' },
      ]),
    ),
  };
}
