// The 3-node ensemble under test, seen through scripts/zookeeper.sh and four-letter words only:
// this process holds no ZooKeeper session (what it observes must not depend on the library).
import { setTimeout as sleep } from 'node:timers/promises';
import { newZkDir, ZkEnsembleHandle } from '../support/zookeeper.mjs';
import { now } from './clock.mjs';
import { args } from './options.mjs';

export const SERVER_IDS = [1, 2, 3];
// Made before the ensemble starts: the cleanup stops it whatever point the run reached.
export const ZK = new ZkEnsembleHandle(newZkDir('chaos'), { echoStderr: args.verbose });
export const serverPort = (/** @type {number} */ id) => ZK.server(id).port;
/** The one leader's id (not one of `exclude`), or undefined after `timeoutMs`: a fault records that instead of failing. */
export const waitForLeader = (/** @type {number} */ timeoutMs, /** @type {number[]} */ exclude = []) =>
  ZK.waitForLeader(exclude, timeoutMs).catch(() => undefined);

/** Session ids (bigint) that own ephemeral nodes, from the `dump` of server `id`. */
export async function sessionsWithEphemerals(id) {
  const text = await ZK.fourLetter(id, 'dump', 2000);
  const start = text.indexOf('Sessions with Ephemerals');
  if (start < 0) throw new Error('no ephemerals section in dump');
  const end = text.indexOf('Connections dump', start);
  const section = text.slice(start, end < 0 ? undefined : end);
  return new Set([...section.matchAll(/^0x([0-9a-fA-F]+):$/gm)].map((m) => BigInt(`0x${m[1]}`)));
}
export const sid = (hex) => BigInt(`0x${String(hex).replace(/^0x/i, '')}`);

/**
 * Polls the leader's `dump` until the session's ephemeral nodes are gone. `lastSeenAt` is when a
 * poll that still showed them was sent (they certainly existed then), `goneAt` when the first poll
 * without them came back (they were certainly gone by then).
 */
export function watchSession(sessionHex) {
  const target = sid(sessionHex);
  /** @type {{ lastSeenAt?: number, goneAt?: number, stopped: boolean, errors: number, done?: Promise<void>, stop: () => Promise<void> }} */
  const watch = { lastSeenAt: undefined, goneAt: undefined, stopped: false, errors: 0, stop: async () => {} };
  let leader;
  watch.done = (async () => {
    while (!watch.stopped && watch.goneAt === undefined) {
      const sentAt = now();
      try {
        leader ??= (await ZK.leaders())[0];
        if (leader === undefined) throw new Error('no leader');
        const present = (await sessionsWithEphemerals(leader)).has(target);
        if (present) watch.lastSeenAt = sentAt;
        else watch.goneAt = now();
      } catch {
        watch.errors++;
        leader = undefined;
      }
      await sleep(50);
    }
  })();
  watch.stop = async () => {
    watch.stopped = true;
    await watch.done;
  };
  return watch;
}

/** Every ephemeral node (path → session, bigint) in the `dump` of server `id`. */
export async function ephemeralNodes(id) {
  const text = await ZK.fourLetter(id, 'dump', 2000);
  const start = text.indexOf('Sessions with Ephemerals');
  if (start < 0) throw new Error('no ephemerals section in dump');
  const end = text.indexOf('Connections dump', start);
  const nodes = new Map();
  let session;
  for (const line of text.slice(start, end < 0 ? undefined : end).split('\n')) {
    const header = /^0x([0-9a-fA-F]+):$/.exec(line.trim());
    if (header) session = BigInt(`0x${header[1]}`);
    else if (session !== undefined && line.trim().startsWith('/')) nodes.set(line.trim(), session);
  }
  return nodes;
}
