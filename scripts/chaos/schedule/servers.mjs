// The fault schedules' hold on servers of their own (a standalone server or a 3-server ensemble
// started with peer links): which server leads, kills, restarts (with a new maxSessionTimeout),
// a follower cut off or lagging. run-schedule.mjs runs one server fault at a time; main.mjs and
// test/chaos/fault-schedule.spec.ts start the servers and hand them over.
import { setTimeout as sleep } from 'node:timers/promises';

/** @typedef {import('../../support/zookeeper.mjs').ZkServerHandle} ZkServerHandle */
/** @typedef {import('../../support/zookeeper.mjs').ZkEnsembleHandle} ZkEnsembleHandle */

/**
 * @typedef {object} ServerControl
 * @property {'standalone' | 'ensemble'} kind
 * @property {number[]} ids the servers, in the order of `targets`
 * @property {string[]} targets their client addresses (each client gets a proxy per server)
 * @property {() => Promise<{ leader: number, followers: number[] }>} roles on a standalone server: it "leads"
 * @property {(kind: string, ms: number, note: (text: string) => void) => Promise<void>} fault
 *   leader-kill, follower-kill (SIGKILL, started again after `ms`), follower-isolate (for `ms`)
 * @property {(id: number, downMs: number, maxSessionTimeoutMs: number | undefined) => Promise<void>} restart
 *   a clean stop (SIGTERM), `downMs`, a start (with that bound in its config from then on); resolves once a leader serves
 * @property {(id: number) => void} isolate
 * @property {(id: number) => Promise<void>} rejoin resolves once a leader serves
 * @property {(id: number, peer: number, delays: { outMs: number, inMs: number }) => void} lag
 * @property {() => Promise<void>} reset every server back to the session timeout bounds it started with
 */

/** The bound scripts/zookeeper.sh writes unless told otherwise. */
const DEFAULT_MAX_SESSION_TIMEOUT_MS = 60_000;

/**
 * @param {ZkServerHandle | ZkEnsembleHandle} handle
 * @param {'standalone' | 'ensemble'} kind
 * @returns {ServerControl}
 */
export function serverControl(handle, kind) {
  const ids = handle.servers.map((s) => s.id);
  const ensemble = kind === 'ensemble' ? /** @type {ZkEnsembleHandle} */ (handle) : undefined;
  /** Servers started with another maxSessionTimeout than their first. @type {Set<number>} */
  const changed = new Set();
  const serving = async () => {
    if (ensemble) await ensemble.waitForLeader([], 60_000);
  };
  const roles = async () => {
    if (!ensemble) return { leader: ids[0], followers: [] };
    const leader = await ensemble.waitForLeader([], 30_000);
    return { leader, followers: ids.filter((id) => id !== leader) };
  };
  const needEnsemble = () => {
    if (!ensemble) throw new Error('this server fault needs an ensemble');
    return ensemble;
  };
  /** @type {ServerControl['restart']} */
  const restart = async (id, downMs, maxSessionTimeoutMs) => {
    await handle.stopServer(id, 'SIGTERM');
    await sleep(downMs);
    await handle.restartServer(id, maxSessionTimeoutMs === undefined ? {} : { maxSessionTimeoutMs });
    if (maxSessionTimeoutMs !== undefined) {
      if (maxSessionTimeoutMs === DEFAULT_MAX_SESSION_TIMEOUT_MS) changed.delete(id);
      else changed.add(id);
    }
    await serving();
  };
  return {
    kind,
    ids,
    targets: handle.servers.map((s) => `127.0.0.1:${s.port}`),
    roles,
    async fault(faultKind, ms, note) {
      const e = needEnsemble();
      const { leader, followers } = await roles();
      const id = faultKind === 'leader-kill' ? leader : followers[Math.floor(Math.random() * followers.length)];
      if (faultKind === 'follower-isolate') {
        note(`server ${id} cut off from the others for ${ms} ms`);
        e.isolate(id);
        await sleep(ms);
        e.rejoin(id);
      } else {
        note(`server ${id} (${id === leader ? 'leader' : 'follower'}) killed for ${ms} ms`);
        await e.stopServer(id, 'SIGKILL');
        await sleep(ms);
        await e.restartServer(id);
      }
      await serving();
      note(`server ${id} back, a leader serves`);
    },
    restart,
    isolate: (id) => needEnsemble().isolate(id),
    async rejoin(id) {
      needEnsemble().rejoin(id);
      await serving();
    },
    lag: (id, peer, delays) => needEnsemble().lag(id, peer, delays),
    async reset() {
      for (const id of [...changed]) await restart(id, 0, DEFAULT_MAX_SESSION_TIMEOUT_MS);
    },
  };
}
