// Side by side in one run, against one throw-away standalone ZooKeeper: create+delete pairs per
// second through the C addon (NativeZkSession) and the TypeScript wire client (WireZkSession,
// opt-in for now), serially and 5 000 at once, two rounds each, alternating. A figure, not a goal:
// `npm run build && node bench/wire-client.mjs`.
import { randomUUID } from 'node:crypto';
import { CreateMode, NativeZkSession } from '../dist/core/index.js';
import { WireZkSession } from '../dist/core/zookeeper/session.js';
import { startStandalone } from '../scripts/support/zookeeper.mjs';

const EMPTY = Buffer.alloc(0);
const SERIAL_PAIRS = 1000;
const PARALLEL_PAIRS = 5000;
const quiet = { onConnected: () => undefined, onConnecting: () => undefined, onClosed: () => undefined };

async function connected(session) {
  for (const until = Date.now() + 10_000; !session.isConnectedNatively; ) {
    if (Date.now() > until) throw new Error('no session within 10 s');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return session;
}

async function measure(session) {
  const base = `/bench-wire-${randomUUID().slice(0, 8)}`;
  await session.create(base, EMPTY, CreateMode.PERSISTENT);
  for (let i = 0; i < 100; i++) await session.delete(await session.create(`${base}/warm`, EMPTY, CreateMode.EPHEMERAL));
  let started = performance.now();
  for (let i = 0; i < SERIAL_PAIRS; i++) await session.delete(await session.create(`${base}/n`, EMPTY, CreateMode.EPHEMERAL));
  const serial = SERIAL_PAIRS / ((performance.now() - started) / 1000);
  started = performance.now();
  await Promise.all(Array.from({ length: PARALLEL_PAIRS }, async (_, i) => session.delete(await session.create(`${base}/p${i}`, EMPTY, CreateMode.EPHEMERAL))));
  const parallel = PARALLEL_PAIRS / ((performance.now() - started) / 1000);
  await session.delete(base);
  return { serial, parallel };
}

const server = await startStandalone();
try {
  const init = { connectString: server.connectString, sessionTimeoutMs: 10_000 };
  const clients = { addon: await connected(new NativeZkSession(init, quiet)), wire: await connected(new WireZkSession(init, quiet)) };
  const rows = { addon: [], wire: [] };
  for (let round = 0; round < 2; round++) for (const name of ['addon', 'wire']) rows[name].push(await measure(clients[name]));
  const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  const best = (name, key) => Math.round(median(rows[name].map((r) => r[key])));
  console.log(`| create+delete pairs/s | C addon | wire client | wire / addon |\n|---|---:|---:|---:|`);
  for (const [key, label] of [['serial', `serial (${SERIAL_PAIRS})`], ['parallel', `${PARALLEL_PAIRS} at once`]]) {
    console.log(`| ${label} | ${best('addon', key)} | ${best('wire', key)} | ${(best('wire', key) / best('addon', key)).toFixed(2)}× |`);
  }
  clients.addon.close();
  await clients.wire.close();
} finally {
  await server.stop();
}
