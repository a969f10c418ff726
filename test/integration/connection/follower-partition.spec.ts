import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { uniquePath } from '../../support/helpers.js';
import { startEnsemble, TICK_TIME_MS, waitFor, type ZkEnsembleHandle } from '../../support/zk-server.js';

// A follower cut off from the leader (its client port up) keeps answering its clients' reads and
// pings until it gives up on the leader (syncLimit × tickTime: 5 s on these servers). The leader,
// hearing nothing of the sessions on it, expires them after their timeout, and another client
// takes the lock. From the holder's own view, its lease must be gone before that. (A holder given
// every server may instead take its session to one that reaches the leader in time, and rightly
// keep the lock: then the other client is granted once it lets go.)
// One 3-server ensemble whose servers reach each other through forwarders in this process
// (isolate(id) silences one server's links, closing nothing); shared by the tests, each of which
// lets the cut-off follower rejoin before the next.

const SERVERS = [1, 2, 3];
let ensemble: ZkEnsembleHandle;
const connections: ZkConnection[] = [];

beforeAll(async () => {
  ensemble = await startEnsemble({ peerLinks: true });
}, 120_000);
afterEach(async () => {
  await Promise.all(connections.splice(0).map((c) => c.close().catch(() => undefined)));
}, 60_000);
afterAll(async () => {
  await ensemble?.stop();
}, 60_000);

const address = (id: number) => `127.0.0.1:${ensemble.server(id).port}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The promise's value, or undefined if it has not settled within `ms`. */
async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function open(connectString: string, sessionTimeoutMs: number): Promise<ZkConnection> {
  // The servers tick at TICK_TIME_MS: the lost signal allows for a follower's report of that length.
  const connection = new ZkConnection({ connectString, sessionTimeoutMs, serverTickTimeMs: TICK_TIME_MS });
  connections.push(connection);
  await connection.connect();
  return connection;
}

/** Whether server `id`'s `cons` lists the session. */
async function servesSession(id: number, sessionId: string): Promise<boolean> {
  const cons = await ensemble.fourLetter(id, 'cons').catch(() => '');
  return cons.includes(`sid=0x${sessionId}`);
}

/**
 * A's connection, on server `follower`: given that server alone, or all three (the C client
 * picks one at random: open connections until one lands there).
 */
async function connectA(follower: number, sessionTimeoutMs: number, alone: boolean): Promise<ZkConnection> {
  if (alone) return open(address(follower), sessionTimeoutMs);
  const all = [follower, ...SERVERS.filter((id) => id !== follower)].map(address).join(',');
  for (let attempt = 0; attempt < 30; attempt++) {
    const connection = await open(all, sessionTimeoutMs);
    if (await servesSession(follower, connection.sessionId!)) return connection;
    await connection.close();
  }
  throw new Error(`no connection to all three servers landed on server ${follower} in 30 tries`);
}

/** A hold from its holder's own view. */
interface Hold {
  readonly signal: AbortSignal;
  /** Whether the holder still takes itself to hold (the library's own check, deadline included). */
  held(): boolean;
  release(): Promise<void>;
}

interface Recipe {
  name: string;
  take(engine: LockEngine, path: string, who: string): Promise<Hold>;
}

const RECIPES: Recipe[] = [
  {
    name: 'mutex',
    take: async (engine, path) => {
      const lease = await new Mutex(engine, 'follower-partition', path).acquire();
      return { signal: lease.signal, held: () => lease.isHeld, release: () => lease.release() };
    },
  },
  {
    name: 'semaphore',
    take: async (engine, path) => {
      const lease = await new Semaphore(engine, 'follower-partition', path, { permits: 1 }).acquire();
      return { signal: lease.signal, held: () => lease.isHeld, release: () => lease.release() };
    },
  },
  {
    name: 'read-write lock (write half)',
    take: async (engine, path) => {
      const lease = await new ReadWriteLock(engine, 'follower-partition', path).write.acquire();
      return { signal: lease.signal, held: () => lease.isHeld, release: () => lease.release() };
    },
  },
  {
    name: 'leader election',
    take: async (engine, path, who) => {
      const election = new Leadership(engine, 'follower-partition', path, { participantId: who }).start();
      const term = await election.whenLeader();
      return { signal: term.signal, held: () => election.term === term, release: () => election.close() };
    },
  },
];

/** Ephemeral nodes under `path`, at any depth (the recipes' layouts differ). */
async function ephemeralsUnder(connection: ZkConnection, path: string): Promise<number> {
  const session = connection.session!;
  const children = await session.getChildren(path).then((r) => r.children, () => [] as string[]);
  let count = 0;
  for (const child of children) {
    const stat = await session.exists(`${path}/${child}`);
    if (stat && stat.ephemeralOwner !== '0') count++;
    count += await ephemeralsUnder(connection, `${path}/${child}`);
  }
  return count;
}

const CONFIGURATIONS = [
  { label: 'connected to that follower alone', alone: true, sessionTimeoutMs: 2000 },
  { label: 'given all three servers', alone: false, sessionTimeoutMs: 4000 },
];

describe.each(CONFIGURATIONS)('a holder whose follower is cut off from the leader ($label, session timeout $sessionTimeoutMs ms)', ({ alone, sessionTimeoutMs }) => {
  it.each(RECIPES)('$name: the holder lets go before the other process is granted', async (recipe) => {
    const { follower, others } = await ensemble.healthy();
    const aConnection = await connectA(follower, sessionTimeoutMs, alone);
    const bConnection = await open(others.map(address).join(','), 4000);
    const path = uniquePath('follower-partition');

    const a = await recipe.take(new LockEngine(aConnection, { app: 'jest-a' }), path, 'A');
    let aAbortedAt: number | undefined;
    a.signal.addEventListener('abort', () => (aAbortedAt = performance.now()), { once: true });
    // B queues behind A (its node is there) before the cut.
    let grant: { at: number; aHeld: boolean; aAborted: boolean; aState: string } | undefined;
    const bTaking = recipe.take(new LockEngine(bConnection, { app: 'jest-b' }), path, 'B').then((hold) => {
      // A's own view at the moment B holds: held() runs the library's deadline check first.
      const aHeld = a.held();
      grant = { at: performance.now(), aHeld, aAborted: a.signal.aborted, aState: aConnection.state };
      return hold;
    });
    bTaking.catch(() => undefined);
    await waitFor('B to queue behind A', async () => ((await ephemeralsUnder(bConnection, path)) >= 2 ? true : undefined), 20_000, 50);
    await sleep(300);
    expect(grant).toBeUndefined();
    expect(a.held()).toBe(true);
    expect(await servesSession(follower, aConnection.sessionId!)).toBe(true);

    const cutAt = performance.now();
    ensemble.isolate(follower);
    let movedTo: { id: number; at: number } | undefined;
    let b: Hold | undefined;
    try {
      // Either the leader expires A's session about a timeout after the cut and B is granted (A
      // must have let go by then), or A's client gives up on the follower (which stops answering
      // its pings while a sync waits for the leader) and takes the session to a server that
      // reaches the leader before the timeout: then A rightly keeps the lock and B waits.
      await waitFor('B to be granted, A to let go, or its session to move', async () => {
        if (grant || !a.held()) return true;
        for (const id of others) {
          if (await servesSession(id, aConnection.sessionId!)) {
            movedTo = { id, at: performance.now() };
            return true;
          }
        }
        return undefined;
      }, sessionTimeoutMs + 30_000, 50);
      if (movedTo && !grant && a.held()) {
        // Past the moment the leader would have expired the session had it not moved: B is not
        // granted meanwhile (or only once A let go).
        await sleep(sessionTimeoutMs);
      } else {
        b = await settledWithin(bTaking, 30_000);
        await waitFor("A's signal to abort", async () => (a.signal.aborted ? true : undefined), 30_000, 20).catch(() => undefined);
      }
    } finally {
      ensemble.rejoin(follower);
    }
    const aHeldAfterCut = a.held();
    let aReleasedAt: number | undefined;
    if (!grant && aHeldAfterCut) {
      // A kept the lock through the cut: B is granted once A lets go.
      aReleasedAt = performance.now();
      await a.release();
      b = await settledWithin(bTaking, 30_000);
    }
    const since = (t: number | undefined) => (t !== undefined ? `${Math.round(t - cutAt)} ms` : '-');
    const figures =
      `cut → B granted ${since(grant?.at)}, cut → A's signal aborted ${since(aAbortedAt)}` +
      (movedTo ? `, cut → A's session on server ${movedTo.id} ${since(movedTo.at)}` : '') +
      (aReleasedAt !== undefined ? `, A still held after the cut and released ${since(aReleasedAt)}` : '') +
      (grant ? `; when B was granted A's connection was ${grant.aState}, its signal ${grant.aAborted ? 'aborted' : 'live'}` : '');
    if (process.env.ZK_TEST_FIGURES) process.stderr.write(`follower-partition ${recipe.name} (alone ${alone}, T ${sessionTimeoutMs}): ${figures}\n`);
    await waitFor(`server ${follower} to rejoin`, async () => ((await ensemble.mode(follower, 1000)) === 'follower' ? true : undefined), 60_000);
    await b?.release().catch(() => undefined);
    await a.release().catch(() => undefined);

    expect(b ? 'B granted' : `B not granted: ${figures}`).toBe('B granted');
    expect(grant!.aHeld ? `A still held when B was granted: ${figures}` : 'A let go first').toBe('A let go first');
  }, 120_000);
});
