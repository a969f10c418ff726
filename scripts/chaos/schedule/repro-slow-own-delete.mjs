// A fault-schedule finding made deterministic (seeds 1013, 1016 and, on the ensemble, 5001 of
// `npm run chaos -- --schedules N --schedule-ms 8000 --faults-per-second 2`): a waiter whose link
// is slow (answers delayed, nothing disconnected) and whose own node a foreign client deletes
// right after the head's. ZooKeeper delivers the two deletions in order; on the first (the head's)
// the waiter holds at once, while the second (its own node's) is still on its way, so it holds
// beside the next holder until that event arrives.
//
//   node scripts/chaos/schedule/repro-slow-own-delete.mjs [path/to/core/index.js]   (default dist/core)
//
// Starts a standalone server of its own. Exit code 1 when the waiter was granted after its node
// was deleted, while the other holder's signal was live (two holders); 0 otherwise.
import { setTimeout as sleep } from 'node:timers/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TcpProxy } from '../../support/tcp-proxy.mjs';
import { REPO_ROOT, startStandalone } from '../../support/zookeeper.mjs';

const lib = await import(pathToFileURL(resolve(process.argv[2] ?? `${REPO_ROOT}/dist/core/index.js`)).href);
const server = await startStandalone();
const t0 = performance.now();
const now = () => (performance.now() - t0).toFixed(1);
/** @type {string[]} */
const log = [];
let exitCode = 0;
try {
  const cs = server.connectString;
  const open = async (/** @type {string} */ connectString) => {
    const c = new lib.ZkConnection({ connectString, sessionTimeoutMs: 8000 });
    await c.connect();
    return c;
  };
  const observer = await open(cs);
  const slow = await TcpProxy.start(cs);
  const [a, b, c] = [new lib.LockEngine(await open(cs)), new lib.LockEngine(await open(slow.connectString)), new lib.LockEngine(await open(cs))];
  const path = `/repro/slow-own-delete-${process.pid}`;
  const mutex = (/** @type {any} */ engine) => new lib.Mutex(engine, 'repro', path, { coalesce: false });
  /** @type {Record<string, { grantedAt: number, abortedAt?: number }>} */
  const holds = {};
  const held = (/** @type {string} */ who, /** @type {any} */ lease) => {
    holds[who] = { grantedAt: performance.now() };
    log.push(`${now()} ${who} granted ${lease.path.slice(-10)}`);
    lease.signal.addEventListener('abort', () => {
      holds[who].abortedAt = performance.now();
      log.push(`${now()} ${who} signal aborted (${lease.signal.reason?.reason})`);
    });
    return lease;
  };
  const children = async () => (await observer.session.getChildren(path)).children;
  const leaseA = held('A', await mutex(a).acquire());
  const waitingB = mutex(b).acquire().then((l) => held('B', l));
  while ((await children()).length < 2) await sleep(20);
  const waitingC = mutex(c).acquire().then((l) => held('C', l));
  while ((await children()).length < 3) await sleep(20);
  await sleep(500);
  const [nodeA, nodeB] = (await children()).sort((x, y) => x.slice(-10).localeCompare(y.slice(-10)));
  slow.slowReplies(100);
  log.push(`${now()} B's link slow (answers at 100 bytes/s)`);
  await observer.session.delete(`${path}/${nodeA}`);
  log.push(`${now()} foreign delete of A's node answered`);
  await observer.session.delete(`${path}/${nodeB}`);
  const deletedB = performance.now();
  log.push(`${now()} foreign delete of B's node answered`);
  const [leaseB, leaseC] = await Promise.all([waitingB, waitingC]);
  await sleep(4000);
  slow.restore();
  await sleep(500);
  const B = holds.B;
  const C = holds.C;
  const twoHolders = B.grantedAt > deletedB && B.grantedAt < (C.abortedAt ?? Infinity) && C.grantedAt < (B.abortedAt ?? Infinity);
  log.push(twoHolders ? `TWO HOLDERS: B granted ${(B.grantedAt - deletedB).toFixed(0)} ms after its node was deleted, while C held; for ${(Math.min(B.abortedAt ?? Infinity, C.abortedAt ?? Infinity) - B.grantedAt).toFixed(0)} ms` : 'one holder at a time');
  exitCode = twoHolders ? 1 : 0;
  await Promise.all([leaseA, leaseB, leaseC].map((l) => l.release()));
  for (const e of [a, b, c]) {
    await e.shutdown();
    await e.connection.close();
  }
  await observer.close();
  await slow.close();
} finally {
  await server.stop();
}
console.log(log.join('\n'));
process.exit(exitCode);
