// Deep queues under seeded churn: mutex contenders (fair, unfair, coalesced across processes) that
// time out and abort while a foreign client sets, revokes and deletes waiting nodes; a semaphore's
// internal lock with a deep queue of acquirers; leadership with many participants stepping down,
// closing and being asked to let go. One holder at a time (or at most the permits), no hang.
// DEEP_QUEUE_SEED replays a run (each test prints its seed).
import { LockNotAcquiredError } from '../../../lib/core/errors.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { Leadership, type LeadershipTerm } from '../../../lib/core/recipes/leadership.js';
import { sortChildren } from '../../../lib/core/paths.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { REVOKE_MARKER, revokeHolders } from '../../../lib/core/recipes/revocation.js';
import { Semaphore } from '../../../lib/core/recipes/semaphore.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath } from '../../support/helpers.js';
import { contenders, delay, untilChildCount, within } from '../../support/lock-test-helpers.js';
import { prng } from '../../support/prng.js';
import { churn, MARKERS, Monitor, seedFor } from '../../support/queue-monitor.js';

afterEach(closeAll);
afterAll(closeAll);

describe('Deep queue: seeded churn with foreign sets, revocations and deletes (DEEP_QUEUE_SEED replays)', () => {
  it('8 sessions churn with timeouts and aborts while a foreign client sets, revokes and deletes waiting nodes: one holder at a time, no hang', async () => {
    const seed = seedFor('mutex chaos');
    const random = prng(seed);
    const observer = await connect();
    const path = uniquePath('dqr-chaos');
    const { locks } = await contenders(path, 8);
    const monitor = new Monitor();
    const stats = { timeouts: 0, aborts: 0, holds: 0 };
    const until = Date.now() + 12_000;
    const running = () => Date.now() < until;
    const loops = locks.map((lock, i) => churn(`c${i}`, lock, observer, path, monitor, prng(seed + i + 1), running, stats));
    let foreign = { sets: 0, revokes: 0, deletes: 0 };
    const chaos = (async () => {
      while (running()) {
        await delay(5 + random() * 30);
        const sorted = sortChildren(await childrenOf(observer, path), MARKERS);
        if (sorted.length === 0) continue;
        const action = random();
        try {
          if (action < 0.4) {
            const node = sorted[Math.floor(random() * sorted.length)]!;
            await observer.session!.setData(`${path}/${node}`, Buffer.from('chaos'));
            foreign.sets++;
          } else if (action < 0.6) {
            await revokeHolders(observer, path);
            foreign.revokes++;
          } else if (action < 0.75 && sorted.length > 3) {
            // A waiting node well back (index >= 3: it cannot have become the holder since the listing,
            // short of three releases in one round trip; if it did, the monitor excuses that holder).
            const index = 3 + Math.floor(random() * (sorted.length - 3));
            const node = sorted[index]!;
            monitor.foreignDeleted.set(node, performance.now());
            await observer.session!.delete(`${path}/${node}`);
            foreign.deletes++;
          }
        } catch {
          // the node went meanwhile
        }
      }
    })();
    await Promise.all([...loops, chaos]);
    console.log(`mutex chaos: ${JSON.stringify({ ...stats, grants: monitor.grants, ...foreign })}`);
    expect(monitor.violations).toEqual([]);
    expect(stats.holds).toBeGreaterThan(50);
    await untilChildCount(observer, path, 0);
  }, 90_000);

  it('fair and unfair (fair: false) contenders on one path, and coalesced ones from 3 processes: one holder at a time, no hang', async () => {
    const seed = seedFor('mixed chaos');
    const observer = await connect();
    const path = uniquePath('dqr-mixed');
    const engines = await Promise.all(Array.from({ length: 6 }, () => engine()));
    const locks = [
      new Mutex(engines[0]!, 'review', path, { coalesce: false }),
      new Mutex(engines[1]!, 'review', path, { coalesce: false }),
      new Mutex(engines[2]!, 'review', path, { coalesce: false, fair: false }),
      // Coalesced: three local callers each behind one node per process, few local handoffs.
      ...[3, 4, 5].flatMap((e) => [0, 1, 2].map(() => new Mutex(engines[e]!, 'review', path, { maxLocalHandoffs: 2, reentrant: false }))),
    ];
    const monitor = new Monitor();
    const stats = { timeouts: 0, aborts: 0, holds: 0 };
    const until = Date.now() + 10_000;
    const running = () => Date.now() < until;
    await Promise.all(locks.map((lock, i) => churn(`m${i}`, lock, observer, path, monitor, prng(seed + i), running, stats)));
    console.log(`mixed chaos: ${JSON.stringify({ ...stats, grants: monitor.grants })}`);
    expect(monitor.violations).toEqual([]);
    expect(stats.holds).toBeGreaterThan(50);
    await untilChildCount(observer, path, 0);
  }, 90_000);
});

describe('Deep queue: a semaphore\'s internal lock (mutexSpec) with a deep queue of acquirers', () => {
  it('8 sessions churn on a 2-permit semaphore, with timeouts: never more than 2 leases live, no hang', async () => {
    const seed = seedFor('semaphore churn');
    const path = uniquePath('dqr-semaphore');
    const engines = await Promise.all(Array.from({ length: 8 }, () => engine()));
    const sems = engines.map((e) => new Semaphore(e, 'review-sem', path, { permits: 2 }));
    const live = new Set<Lease>();
    const violations: string[] = [];
    let holds = 0;
    let timeouts = 0;
    const until = Date.now() + 8_000;
    await Promise.all(
      sems.map(async (sem, i) => {
        const random = prng(seed + i);
        while (Date.now() < until) {
          const options = random() < 0.3 ? { waitMs: Math.floor(random() * 200) } : {};
          let lease: Lease;
          try {
            lease = await within(sem.acquire(options), 30_000, `s${i}`);
          } catch (error) {
            if (error instanceof LockNotAcquiredError) {
              timeouts++;
              continue;
            }
            throw error;
          }
          holds++;
          const others = [...live].filter((l) => !l.signal.aborted);
          if (others.length >= 2) violations.push(`s${i} got a lease while ${others.length} are live`);
          live.add(lease);
          await delay(random() * 10);
          live.delete(lease);
          await lease.release();
        }
      }),
    );
    console.log(`semaphore churn: ${holds} leases, ${timeouts} timeouts`);
    expect(violations).toEqual([]);
    expect(holds).toBeGreaterThan(20);
  }, 90_000);
});

describe('Deep queue: leadership with many participants', () => {
  it('6 participants step down, close (and start again) and are asked to let go (revocable or not) in random orders: never two live terms, always a leader again', async () => {
    const seed = seedFor('leadership chaos');
    const random = prng(seed);
    const path = uniquePath('dqr-election');
    const engines = await Promise.all(Array.from({ length: 6 }, () => engine()));
    const violations: string[] = [];
    const live = new Map<LeadershipTerm, string>();
    let gains = 0;
    const make = (i: number, n: number) => {
      // Half of them step down on a revocation request; the others write their id back over it.
      const l = new Leadership(engines[i]!, path, path, { participantId: `p${i}.${n}`, revocable: i % 2 === 0 });
      l.on('gained', (term) => {
        gains++;
        for (const [other, who] of live) if (!other.signal.aborted) violations.push(`p${i}.${n} gained while ${who} leads`);
        live.set(term, `p${i}.${n}`);
        term.signal.addEventListener('abort', () => live.delete(term), { once: true });
      });
      return l.start();
    };
    const revoker = await connect();
    const generation = engines.map(() => 0);
    const leaders = engines.map((_, i) => make(i, 0));
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      await delay(random() * 40);
      const i = Math.floor(random() * leaders.length);
      const action = random();
      if (action < 0.25) await revokeHolders(revoker, path).catch(() => undefined);
      else if (action < 0.6) await leaders[i]!.stepDown();
      else {
        await leaders[i]!.close();
        leaders[i] = make(i, ++generation[i]!);
      }
    }
    // Liveness: a leader shows up, it is the lowest node, and every node carries its participant's
    // id. Right after the chaos that takes a moment, from the last actions' requests: a revocable
    // leader asked to let go steps down and queues again in the background (a loaded run listed
    // five participants before its new node was made); a request written on the next leader's node
    // before it heard of its term ends that term as soon as it starts (a loaded CI run saw the
    // leader step down while its listing was read); a leader that is not revocable writes its id
    // back over the request. So: wait for a leader that leads before and after such a listing.
    const someone = () => leaders.find((l) => l.isLeader);
    let last = 'no leader';
    await eventually(async () => {
      const leader = someone();
      if (leader === undefined) return false;
      const parts = await leader.participants();
      last = `${leader.participantId} (${leader.isLeader ? 'still' : 'no longer'} leading) listed ${parts.map((p) => p.id).join(', ')}`;
      return leader.isLeader && parts.length === 6 && parts[0]!.id === leader.participantId && parts.every((p) => p.id !== REVOKE_MARKER);
    }, 20_000, 20).catch((error: Error) => {
      throw new Error(`${error.message}; last seen: ${last}`);
    });
    // Then everyone leads in turn as the leaders step down one by one (each one once).
    const seen = new Set<string>();
    for (let k = 0; k < 6; k++) {
      let now: Leadership | undefined;
      await eventually(() => (now = someone()) !== undefined, 20_000, 10);
      if (!now) throw new Error('unreachable');
      seen.add(now.participantId);
      await now.close();
    }
    expect(seen.size).toBe(6);
    console.log(`leadership chaos: ${gains} terms`);
    expect(violations).toEqual([]);
    await Promise.all(leaders.map((l) => l.close()));
  }, 90_000);
});
