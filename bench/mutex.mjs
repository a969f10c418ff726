// Mutex micro-benchmark: uncontended lock+unlock against the raw ZooKeeper round trips it is made
// of, and handoff latency between two sessions. Rounds alternate between the peers so that noise
// on this 2-core machine hits all of them alike; the table shows medians over rounds.
//   npm run bench            (starts a throw-away ZooKeeper unless ZK_CONNECT is set)
import { LockEngine, Mutex, ZkConnection, CreateMode } from '../dist/index.js';
import { withZooKeeper, percentile, median, printTable } from './support.mjs';

const ROUNDS = Number(process.env.ROUNDS ?? 5);
const ROUND_MS = Number(process.env.ROUND_MS ?? 2000);

async function rate(fn) {
  const started = performance.now();
  let n = 0;
  while (performance.now() - started < ROUND_MS) {
    await fn();
    n++;
  }
  return (n * 1000) / (performance.now() - started);
}

async function latencies(fn, count) {
  const out = [];
  for (let i = 0; i < count; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

await withZooKeeper(async (connectString) => {
  const open = async () => {
    const c = new ZkConnection({ connectString, sessionTimeoutMs: 10_000 });
    await c.connect();
    return c;
  };
  const a = await open();
  const b = await open();
  const engineA = new LockEngine(a, { app: 'bench' });
  const engineB = new LockEngine(b, { app: 'bench' });
  const path = `/bench/mutex-${process.pid}`;
  const session = a.session;
  await engineA.ensureContainers(session, path);
  // A persistent child keeps the container from being reaped between cycles (it sorts last: "~").
  await session.create(`${path}/~keep`, Buffer.alloc(0), CreateMode.EPHEMERAL);
  const mutexA = new Mutex(engineA, 'bench', path);
  const mutexB = new Mutex(engineB, 'bench', path);

  const peers = {
    'raw create+delete (serial)': () => session.create(`${path}/_c_raw-lock-`, Buffer.alloc(0), CreateMode.EPHEMERAL_SEQUENTIAL).then((p) => session.delete(p)),
    'exists round trip': () => session.exists(path),
    'mutex acquire+release (W1)': async () => (await mutexA.acquire()).release(),
  };
  const rates = Object.fromEntries(Object.keys(peers).map((k) => [k, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, fn] of Object.entries(peers)) rates[name].push(await rate(fn));
  }

  const acquireMs = await latencies(async () => {
    const lease = await mutexA.acquire();
    await lease.release();
  }, 500);
  const existsMs = await latencies(() => session.exists(path), 500);

  // Handoff: B waits behind A; time from A's release() call to B's acquire() resolving.
  const handoffMs = [];
  for (let i = 0; i < 200; i++) {
    const held = await mutexA.acquire();
    const waiting = mutexB.acquire();
    while ((await session.getChildren(path)).children.length < 3) await new Promise((r) => setImmediate(r));
    const t = performance.now();
    void held.release();
    const lease = await waiting;
    handoffMs.push(performance.now() - t);
    await lease.release();
  }

  const raw = median(rates['raw create+delete (serial)']);
  const w1 = median(rates['mutex acquire+release (W1)']);
  printTable(
    ['measure', 'median', 'p50 ms', 'p99 ms', 'ratio'],
    [
      ['raw create+delete (serial), ops/s', raw.toFixed(0), '', '', '1.00'],
      ['mutex acquire+release (W1), cycles/s', w1.toFixed(0), percentile(acquireMs, 50).toFixed(2), percentile(acquireMs, 99).toFixed(2), (w1 / raw).toFixed(2) + ' of raw'],
      ['exists round trip, ops/s', median(rates['exists round trip']).toFixed(0), percentile(existsMs, 50).toFixed(2), percentile(existsMs, 99).toFixed(2), ''],
      ['handoff (release → next acquire)', '', percentile(handoffMs, 50).toFixed(2), percentile(handoffMs, 99).toFixed(2), (percentile(handoffMs, 50) / percentile(existsMs, 50)).toFixed(2) + ' × exists p50'],
    ],
  );
  console.log(`rounds: ${ROUNDS} × ${ROUND_MS} ms per peer, alternating; ${new Date().toISOString()}`);
  await a.close();
  await b.close();
});
