// Deep queues shared with Curator (a Java peer): Curator waiters between ours that time out,
// LeaderLatches interleaved with our leadership participants, and Curator mutexes churning beside
// ours. One holder (or leader) at a time, in queue order, no hang. Skipped without Java/Curator.
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../../support/curator-peer.js';
import { closeAll, connect, engine, eventually, uniquePath, zkConnectString } from '../../support/helpers.js';
import { contenders, delay, untilChildCount, untilWatching, within } from '../../support/lock-test-helpers.js';
import { prng } from '../../support/prng.js';
import { checkLowest, churn, Monitor, queueAll, seedFor } from '../../support/queue-monitor.js';

afterEach(closeAll);
afterAll(closeAll);

const curatorUnavailable = curatorPeerUnavailableReason();
if (curatorUnavailable) console.warn(`Skipping the deep-queue tests with Curator peers: ${curatorUnavailable}`);
const describeCurator = curatorUnavailable ? describe.skip : describe;

describeCurator('Deep queue: Curator waiters in the same queue', () => {
  let curator: CuratorPeer;
  beforeAll(async () => {
    curator = await CuratorPeer.start(zkConnectString());
  }, 120_000);
  afterAll(async () => {
    await curator?.close();
  });

  it('ours and Curator alternate in a deep queue; Curator waiters time out between ours: one holder at a time, in order', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-curator');
    const { engines, locks } = await contenders(path, 4);
    for (const id of ['c1', 'c2', 'c3']) await curator.mutex(`${path}:${id}`, path);
    const monitor = new Monitor();
    const head = await locks[0]!.acquire();
    const hHold = monitor.grant('h', head);
    // head(ours), c1, w1(ours), c2 (times out), w2(ours), c3, w3(ours)
    const curatorAcquire = (id: string, timeoutMs: number) => {
      let settled = false;
      const work = curator.acquire(`${path}:${id}`, timeoutMs).then((got) => {
        if (got) monitor.foreignGranted(id);
        return got;
      });
      const tracked = work.finally(() => (settled = true));
      tracked.catch(() => undefined);
      return { promise: tracked, settled: () => settled };
    };
    const c1 = curatorAcquire('c1', 60_000);
    await untilChildCount(observer, path, 2);
    const [w1] = await queueAll(observer, path, [locks[1]!]);
    // Long enough to still be queued after w2 and c3 joined behind it, on a loaded machine too.
    const c2 = curatorAcquire('c2', 8_000);
    await untilChildCount(observer, path, 4);
    const [w2] = await queueAll(observer, path, [locks[2]!]);
    const c3 = curatorAcquire('c3', 60_000);
    await untilChildCount(observer, path, 6);
    const [w3] = await queueAll(observer, path, [locks[3]!]);
    // w2 (index 4) watches w1 (index 2); w3 (index 6) watches w2 (index 4). c2 leaves on its timeout.
    expect(await c2.promise).toBe(false);
    await untilChildCount(observer, path, 6);
    // w2 still watches w1 (now two ahead of it again); w3 watches w2? (index 5 now: it watches c3's
    // predecessor w2 at index 3 -> it was watching w2 already).
    await untilWatching(`${path}/${w1!.node}`, engines[2]!.connection.sessionId!);
    monitor.end(hHold);
    await head.release();
    expect(await within(c1.promise, 15_000, 'c1')).toBe(true);
    await delay(100);
    expect(w1!.settled()).toBe(false);
    monitor.foreignHolders.delete('c1');
    await curator.release(`${path}:c1`);
    for (const [who, q, next] of [['w1', w1!, undefined], ['w2', w2!, c3], ['w3', w3!, undefined]] as const) {
      const lease = await within(q.acquiring, 15_000, who);
      const h = monitor.grant(who, lease);
      await checkLowest(observer, path, h, monitor);
      await delay(50);
      monitor.end(h);
      await lease.release();
      if (next) {
        expect(await within(next.promise, 15_000, 'c3')).toBe(true);
        await delay(50);
        monitor.foreignHolders.delete('c3');
        await curator.release(`${path}:c3`);
      }
    }
    expect(monitor.violations).toEqual([]);
    await untilChildCount(observer, path, 0);
  }, 90_000);

  it('an election of 3 of ours and 2 LeaderLatches interleaved: leadership passes in queue order as leaders close or step down, never two', async () => {
    const path = uniquePath('dqr-latch');
    const engines = await Promise.all(Array.from({ length: 3 }, () => engine()));
    const ours = engines.map((e, i) => new Leadership(e, path, path, { participantId: `ours-${i}` }));
    const violations: string[] = [];
    const latches = new Set<string>();
    const curatorLeads = async () => {
      for (const id of latches) if (await curator.hasLeadership(id).catch(() => false)) return true;
      return false;
    };
    for (const l of ours) {
      l.on('gained', () => {
        for (const other of ours) if (other !== l && other.isLeader) violations.push(`${l.participantId} gained while ${other.participantId} leads`);
        void curatorLeads().then((c) => c && l.isLeader && violations.push(`${l.participantId} leads while a LeaderLatch leads`));
      });
    }
    const participantsNow = async () => (await ours[0]!.participants()).map((p) => p.id);
    // Queue: ours-0, j1, ours-1, j2, ours-2
    ours[0]!.start();
    await eventually(() => ours[0]!.isLeader, 20_000, 10);
    await curator.latch(`${path}:j1`, path, 'java-1');
    latches.add(`${path}:j1`);
    await eventually(async () => (await participantsNow()).length === 2, 20_000, 20);
    ours[1]!.start();
    await eventually(async () => (await participantsNow()).length === 3, 20_000, 20);
    await curator.latch(`${path}:j2`, path, 'java-2');
    latches.add(`${path}:j2`);
    await eventually(async () => (await participantsNow()).length === 4, 20_000, 20);
    ours[2]!.start();
    await eventually(async () => (await participantsNow()).length === 5, 20_000, 20);
    expect(await participantsNow()).toEqual(['ours-0', 'java-1', 'ours-1', 'java-2', 'ours-2']);

    await ours[0]!.stepDown(); // to the tail: java-1 leads
    await eventually(() => curator.hasLeadership(`${path}:j1`), 20_000, 20);
    expect(ours.some((l) => l.isLeader)).toBe(false);
    latches.delete(`${path}:j1`);
    await curator.latchClose(`${path}:j1`); // ours-1 leads
    await eventually(() => ours[1]!.isLeader, 20_000, 10);
    expect(await participantsNow()).toEqual(['ours-1', 'java-2', 'ours-2', 'ours-0']);
    await ours[2]!.close(); // a waiter two back leaves: ours-0 (two behind java-2) must notice nothing wrong
    await ours[1]!.close(); // java-2 leads
    await eventually(() => curator.hasLeadership(`${path}:j2`), 20_000, 20);
    expect(ours.some((l) => l.isLeader)).toBe(false);
    latches.delete(`${path}:j2`);
    await curator.latchClose(`${path}:j2`); // ours-0 leads
    await eventually(() => ours[0]!.isLeader, 20_000, 10);
    expect(await participantsNow()).toEqual(['ours-0']);
    await ours[0]!.close();
    expect(violations).toEqual([]);
  }, 90_000);

  it('chaos with 2 Curator mutexes churning beside 5 of ours: one holder at a time, no hang', async () => {
    const seed = seedFor('curator chaos');
    const observer = await connect();
    const path = uniquePath('dqr-curator-chaos');
    const { locks } = await contenders(path, 5);
    const monitor = new Monitor();
    const stats = { timeouts: 0, aborts: 0, holds: 0 };
    const until = Date.now() + 10_000;
    const running = () => Date.now() < until;
    const curatorLoop = async (id: string, random: () => number) => {
      await curator.mutex(`${path}:${id}`, path);
      let holds = 0;
      while (running()) {
        const timeout = random() < 0.3 ? Math.floor(random() * 100) : 30_000;
        const got = await curator.acquire(`${path}:${id}`, timeout);
        if (!got) continue;
        monitor.foreignGranted(id);
        holds++;
        await delay(random() * 10);
        monitor.foreignHolders.delete(id);
        await curator.release(`${path}:${id}`);
      }
      return holds;
    };
    const results = await Promise.all([
      ...locks.map((lock, i) => churn(`o${i}`, lock, observer, path, monitor, prng(seed + i), running, stats).then(() => 0)),
      curatorLoop('k1', prng(seed + 100)),
      curatorLoop('k2', prng(seed + 101)),
    ]);
    console.log(`curator chaos: ${JSON.stringify({ ...stats, curatorHolds: results.slice(-2) })}`);
    expect(monitor.violations).toEqual([]);
    await untilChildCount(observer, path, 0);
  }, 120_000);
});
