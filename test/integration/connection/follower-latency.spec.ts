// A holder on a follower whose answers come late, the follower cut off from the leader right after
// it answered a heartbeat sync. The leader hears of a session on a follower only through the
// follower's replies to its pings (every tickTime/2), so an answered sync does not show that the
// leader heard of it: the deadline counts from a request sent a report's time before it (see
// RequestClock). With the slow link, heartbeats pile up unanswered; counted from the newest
// answered sync, the deadline came after the leader had expired the session (another client held
// while our signal was live). Nor does the send time of a request that waited on its way (a
// stalled link) and reached the server together with a later one: only answers say when the
// follower had a request.
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { TEST_SERVER_TICK_MS, uniquePath } from '../../support/helpers.js';
import { startEnsemble, waitFor, type ZkEnsembleHandle } from '../../support/zk-server.js';

let ensemble: ZkEnsembleHandle;
const connections: ZkConnection[] = [];
const servers: Server[] = [];
const sockets = new Set<Socket>();

beforeAll(async () => {
  ensemble = await startEnsemble({ peerLinks: true });
}, 120_000);
afterEach(async () => {
  await Promise.all(connections.splice(0).map((c) => c.close().catch(() => undefined)));
  for (const s of sockets) s.destroy();
  for (const s of servers.splice(0)) s.close();
}, 60_000);
afterAll(async () => {
  await ensemble?.stop();
}, 60_000);

const address = (id: number) => `127.0.0.1:${ensemble.server(id).port}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A proxy to `targetPort` whose two directions each pass bytes through a function: `toServer` and
 * `toClient` get the bytes and what writes them on (at once, later, or together with others).
 */
async function shapingProxy(
  targetPort: number,
  shape: { toServer?: (bytes: Buffer, write: (b: Buffer) => void) => void; toClient?: (bytes: Buffer, write: (b: Buffer) => void) => void },
): Promise<number> {
  const server = createServer((client) => {
    sockets.add(client);
    const upstream = netConnect(targetPort, '127.0.0.1');
    sockets.add(upstream);
    const toServer = (b: Buffer) => void (upstream.writable && upstream.write(b));
    const toClient = (b: Buffer) => void (client.writable && client.write(b));
    client.on('data', (d) => (shape.toServer ?? ((b, w) => w(b)))(d, toServer));
    upstream.on('data', (d) => (shape.toClient ?? ((b, w) => w(b)))(d, toClient));
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) socket.on('close', end).on('error', end);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return (server.address() as { port: number }).port;
}

/** A proxy that passes requests at once and answers `delay.ms` late (order kept). */
function latencyProxy(targetPort: number, delay: { ms: number }): Promise<number> {
  let lastAt = 0;
  return shapingProxy(targetPort, {
    toClient: (bytes, write) => {
      const at = Math.max(performance.now() + delay.ms, lastAt);
      lastAt = at;
      setTimeout(() => write(bytes), at - performance.now());
    },
  });
}

/** Client->server bytes are held while `gate.held`, then written at once on release(). */
function holdingProxy(targetPort: number, gate: { held: boolean; release?: () => void }): Promise<number> {
  let buffered: Buffer[] = [];
  let writeOn: ((bytes: Buffer) => void) | undefined;
  gate.release = () => {
    gate.held = false;
    if (buffered.length > 0) writeOn?.(Buffer.concat(buffered));
    buffered = [];
  };
  return shapingProxy(targetPort, {
    toServer: (bytes, write) => {
      writeOn = write;
      if (gate.held) buffered.push(bytes);
      else write(bytes);
    },
  });
}

const T = 4000;
const D = Number(process.env.LATENCY_MS ?? 1000);
const CUT_AFTER_MS = Number(process.env.CUT_AFTER_MS ?? 30);

it(`a holder on a follower whose answers come ${D} ms late, cut off from the leader ${CUT_AFTER_MS} ms after a heartbeat: it lets go before another process is granted`, async () => {
  const results: string[] = [];
  let violations = 0;
  for (let round = 0; round < Number(process.env.ROUNDS ?? 3); round++) {
    const { follower, others } = await ensemble.healthy();
    const delay = { ms: 0 };
    const port = await latencyProxy(ensemble.server(follower).port, delay);
    const a = new ZkConnection({ connectString: `127.0.0.1:${port}`, sessionTimeoutMs: T, serverTickTimeMs: TEST_SERVER_TICK_MS });
    const b = new ZkConnection({ connectString: others.map(address).join(','), sessionTimeoutMs: T, serverTickTimeMs: TEST_SERVER_TICK_MS });
    connections.push(a, b);
    await a.connect();
    await b.connect();
    const path = uniquePath('follower-latency');
    const lease = await new Mutex(new LockEngine(a, { app: 'a' }), 'm', path).acquire();
    let abortedAt: number | undefined;
    lease.signal.addEventListener('abort', () => (abortedAt = performance.now()), { once: true });
    let grant: { at: number; aborted: boolean; deadline: number } | undefined;
    const bTaking = new Mutex(new LockEngine(b, { app: 'b' }), 'm', path).acquire().then((l) => {
      grant = { at: performance.now(), aborted: lease.signal.aborted, deadline: a.sessionDeadline };
      return l;
    });
    bTaking.catch(() => undefined);
    await sleep(500);
    delay.ms = D;
    await sleep(3 * D + 500); // heartbeats settle into their slow rhythm

    const session = a.session!;
    const sends: number[] = [];
    let cutAt: number | undefined;
    const original = session.sync.bind(session);
    session.sync = (p: string) => {
      const now = performance.now();
      sends.push(now);
      if (cutAt === undefined) {
        cutAt = now + CUT_AFTER_MS;
        setTimeout(() => ensemble.isolate(follower), CUT_AFTER_MS);
      }
      return original(p);
    };
    await waitFor('B granted or A lost', async () => (grant || abortedAt !== undefined ? true : undefined), 30_000, 10);
    await sleep(500);
    const at = (t: number | undefined) => (t === undefined ? '-' : `${Math.round(t - cutAt!)} ms`);
    const lastAnswered = session.lastAnsweredSentAt;
    const line =
      `round ${round}: follower ${follower}; heartbeat sends relative to the cut: ${sends.map((s) => Math.round(s - cutAt!)).join(', ')}; ` +
      `A's lastAnsweredSentAt ${at(lastAnswered)}; B granted ${at(grant?.at)} (A's signal then ${grant ? (grant.aborted ? 'aborted' : 'LIVE') : '-'}); A's signal aborted ${at(abortedAt)}`;
    results.push(line);
    process.stderr.write(line + '\n');
    if (grant && !grant.aborted) violations++;
    ensemble.rejoin(follower);
    const bLease = await Promise.race([bTaking, sleep(20_000).then(() => undefined)]);
    await bLease?.release().catch(() => undefined);
    await Promise.all(connections.splice(0).map((c) => c.close().catch(() => undefined)));
    await waitFor(`server ${follower} to rejoin`, async () => ((await ensemble.mode(follower, 1000)) === 'follower' ? true : undefined), 60_000);
  }
  expect(violations === 0 ? 'A always let go first' : `${violations} violation(s):\n${results.join('\n')}`).toBe('A always let go first');
}, 600_000);

const HOLD = Number(process.env.HOLD_MS ?? 2000);

it(`a holder whose requests wait ${HOLD} ms on the way to its follower and arrive together, the follower cut off right after: it lets go before another process is granted`, async () => {
  const results: string[] = [];
  let violations = 0;
  for (let round = 0; round < Number(process.env.ROUNDS ?? 2); round++) {
    const { follower, others } = await ensemble.healthy();
    const gate: { held: boolean; release?: () => void } = { held: false };
    const port = await holdingProxy(ensemble.server(follower).port, gate);
    const a = new ZkConnection({ connectString: `127.0.0.1:${port}`, sessionTimeoutMs: T, serverTickTimeMs: TEST_SERVER_TICK_MS });
    const b = new ZkConnection({ connectString: others.map(address).join(','), sessionTimeoutMs: T, serverTickTimeMs: TEST_SERVER_TICK_MS });
    connections.push(a, b);
    await a.connect();
    await b.connect();
    const path = uniquePath('held-requests');
    const lease = await new Mutex(new LockEngine(a, { app: 'a' }), 'm', path).acquire();
    let abortedAt: number | undefined;
    lease.signal.addEventListener('abort', () => (abortedAt = performance.now()), { once: true });
    let grant: { at: number; aborted: boolean } | undefined;
    const bTaking = new Mutex(new LockEngine(b, { app: 'b' }), 'm', path).acquire().then((l) => {
      grant = { at: performance.now(), aborted: lease.signal.aborted };
      return l;
    });
    bTaking.catch(() => undefined);
    await sleep(1000);

    const session = a.session!;
    const holdAt = performance.now();
    gate.held = true;
    // Ordinary application traffic during the hold: a read every 100 ms, one sync near its end.
    const reads = setInterval(() => void session.exists('/').catch(() => undefined), 100);
    await sleep(HOLD - 60);
    clearInterval(reads);
    const before = session.lastAnsweredSentAt;
    let syncAnsweredAt: number | undefined;
    let cutAt: number | undefined;
    void session.sync('/').then(
      () => {
        syncAnsweredAt = performance.now();
        ensemble.isolate(follower); // the moment the leader answered the held sync
        cutAt = performance.now();
      },
      () => undefined,
    );
    await sleep(50);
    const releasedAt = performance.now();
    gate.release!();
    await sleep(200);
    if (cutAt === undefined) {
      ensemble.isolate(follower);
      cutAt = performance.now();
    }
    await waitFor('B granted or A lost', async () => (grant || abortedAt !== undefined ? true : undefined), 30_000, 10);
    await sleep(300);
    const rel = (t: number | undefined) => (t === undefined ? '-' : `${Math.round(t - holdAt)}`);
    const line =
      `round ${round}: (ms from hold start) lastAnsweredSentAt before ${rel(before)}, after ${rel(session.lastAnsweredSentAt)}; released ${rel(releasedAt)}, ` +
      `sync answered ${rel(syncAnsweredAt)}, cut ${rel(cutAt)}; B granted ${rel(grant?.at)} (A's signal then ${grant ? (grant.aborted ? 'aborted' : 'LIVE') : '-'}); A aborted ${rel(abortedAt)}`;
    results.push(line);
    process.stderr.write(line + '\n');
    if (grant && !grant.aborted) violations++;
    ensemble.rejoin(follower);
    const bLease = await Promise.race([bTaking, sleep(20_000).then(() => undefined)]);
    await bLease?.release().catch(() => undefined);
    await Promise.all(connections.splice(0).map((c) => c.close().catch(() => undefined)));
    await waitFor(`server ${follower} to rejoin`, async () => ((await ensemble.mode(follower, 1000)) === 'follower' ? true : undefined), 60_000);
  }
  expect(violations === 0 ? 'A always let go first' : `${violations} violation(s):\n${results.join('\n')}`).toBe('A always let go first');
}, 600_000);
