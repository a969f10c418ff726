// Deep queues (one session per waiter) whose waiters leave, are deleted or are written to: a waiter
// at index >= 2 watches the node two ahead of it (sorted[index-2]) and lists again when that node
// changes or goes; at index 1 it holds on the head's deletion alone (with a watch on its own node
// armed). Leavers in every order relative to the node two ahead, a long queue with leavers, the queue
// changing between a listing and the watch it leads to, foreign sets, revocation markers and deletes.
// Every test checks both safety (no two holders whose signals are live; a holder's node is the
// lowest in the queue) and liveness (every acquire that should hold does, within a bound).
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import { sortChildren } from '../../../lib/core/paths.js';
import { revokeHolders } from '../../../lib/core/recipes/revocation.js';
import { childrenOf, closeAll, connect, eventually, uniquePath } from '../../support/helpers.js';
import { contenders, delay, nameOf, notAcquired, untilChildCount, untilWatching, within } from '../../support/lock-test-helpers.js';
import { prng } from '../../support/prng.js';
import { checkLowest, MARKERS, Monitor, queueAll, seedFor, type Hold } from '../../support/queue-monitor.js';

afterEach(closeAll);
afterAll(closeAll);

describe('Deep queue: waiters leaving in every order (real ZooKeeper, one session per waiter)', () => {
  it('the node two ahead and the predecessor leave together while the head holds: the waiter moves to index 1 and holds on the release', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-both-leave');
    const { engines, locks } = await contenders(path, 5);
    const head = await locks[0]!.acquire();
    const a = new AbortController();
    const p = new AbortController();
    const [qa, qp, w, x] = await queueAll(observer, path, locks.slice(1), (i) => (i === 0 ? { signal: a.signal } : i === 1 ? { signal: p.signal } : {}));
    // w (index 3) watches a (index 1); x (index 4) watches p (index 2).
    await untilWatching(`${path}/${qa!.node}`, engines[3]!.connection.sessionId!);
    await untilWatching(`${path}/${qp!.node}`, engines[4]!.connection.sessionId!);
    a.abort();
    p.abort();
    await notAcquired(qa!.acquiring);
    await notAcquired(qp!.acquiring);
    await untilChildCount(observer, path, 3);
    // Both listed again: w is right behind the head, x two behind it; both watch the head.
    await untilWatching(head.path, engines[3]!.connection.sessionId!);
    await untilWatching(head.path, engines[4]!.connection.sessionId!);
    expect(w!.settled()).toBe(false);
    expect(x!.settled()).toBe(false);
    await head.release();
    const wLease = await within(w!.acquiring, 10_000, 'w');
    expect(nameOf(wLease)).toBe(w!.node);
    await untilWatching(wLease.path, engines[4]!.connection.sessionId!);
    expect(x!.settled()).toBe(false);
    await wLease.release();
    const xLease = await within(x!.acquiring, 10_000, 'x');
    await xLease.release();
    await untilChildCount(observer, path, 0);
  });

  it('the predecessor leaves while the waiter watches the head from index 2 (it is really next): the release still wakes it', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-pred-leaves');
    const { engines, locks } = await contenders(path, 4);
    const head = await locks[0]!.acquire();
    const p = new AbortController();
    const [qp, w, x] = await queueAll(observer, path, locks.slice(1), (i) => (i === 0 ? { signal: p.signal } : {}));
    await untilWatching(head.path, engines[2]!.connection.sessionId!);
    p.abort();
    await notAcquired(qp!.acquiring);
    await untilChildCount(observer, path, 3);
    // x (index 3 before, watching p) lists again: now index 2, watching the head.
    await untilWatching(head.path, engines[3]!.connection.sessionId!);
    // w watched the head without the shortcut; its own node is not watched yet.
    await head.release();
    const wLease = await within(w!.acquiring, 10_000, 'w');
    expect(nameOf(wLease)).toBe(w!.node);
    await delay(100);
    expect(x!.settled()).toBe(false);
    await wLease.release();
    await (await within(x!.acquiring, 10_000, 'x')).release();
  });

  it('the predecessor leaves right after the head released (before the waiter two back lists again): one holder at a time, all hold', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-pred-after-release');
    const { locks } = await contenders(path, 4);
    const monitor = new Monitor();
    for (let round = 0; round < 6; round++) {
      const head = await locks[0]!.acquire();
      const hHold = monitor.grant('h', head);
      const p = new AbortController();
      const [qp, w, x] = await queueAll(observer, path, locks.slice(1), (i) => (i === 0 ? { signal: p.signal } : {}));
      // Release and abort in the same tick: p may hold for a moment (then its acquire resolves
      // and the abort does nothing) or leave without holding.
      monitor.end(hHold);
      const releasing = head.release();
      p.abort();
      await releasing;
      const holders: Lease[] = [];
      const pOutcome = await qp!.acquiring.then(
        (lease) => lease,
        () => undefined,
      );
      if (pOutcome) {
        const h = monitor.grant('p', pOutcome);
        await checkLowest(observer, path, h, monitor);
        monitor.end(h);
        await pOutcome.release();
      }
      for (const [who, q] of [['w', w!], ['x', x!]] as const) {
        const lease = await within(q.acquiring, 15_000, `${who} round ${round}`);
        const h = monitor.grant(who, lease);
        await checkLowest(observer, path, h, monitor);
        holders.push(lease);
        monitor.end(h);
        await lease.release();
      }
      await untilChildCount(observer, path, 0);
    }
    expect(monitor.violations).toEqual([]);
  });

  it('a waiter two back whose session is closed, and the node two ahead of another closing too, in either order', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-sessions');
    const { engines, locks } = await contenders(path, 6);
    const head = await locks[0]!.acquire();
    const qs = await queueAll(observer, path, locks.slice(1));
    // queue: head, q1, q2, q3, q4, q5. q3 watches q1, q4 watches q2, q5 watches q3.
    await engines[3]!.connection.close(); // q3 (watched by q5) goes with its session
    await engines[1]!.connection.close(); // q1 (watched by q3, gone) goes
    await notAcquired(qs[0]!.acquiring);
    await notAcquired(qs[2]!.acquiring);
    await untilChildCount(observer, path, 4);
    // head, q2, q4, q5: q2 is right behind the head; q4 and q5 list again / still watch.
    const monitor = new Monitor();
    monitor.grant('head', head);
    monitor.end([...monitor.active][0]!);
    await head.release();
    for (const i of [1, 3, 4]) {
      const lease = await within(qs[i]!.acquiring, 15_000, `q${i + 1}`);
      const h = monitor.grant(`q${i + 1}`, lease);
      await checkLowest(observer, path, h, monitor);
      monitor.end(h);
      await lease.release();
    }
    expect(monitor.violations).toEqual([]);
  });
});

describe('Deep queue: a long queue stays FIFO while waiters leave', () => {
  it('20 sessions queue; a third of them leave (timeouts, aborts, closed sessions) at random moments while the chain of releases runs: the rest hold one at a time, in queue order', async () => {
    const seed = seedFor('fifo with leavers');
    const random = prng(seed);
    const observer = await connect();
    const path = uniquePath('dqr-fifo');
    const { engines, locks } = await contenders(path, 21);
    const head = await locks[0]!.acquire();
    const controllers = locks.map(() => new AbortController());
    const plan = locks.map((_, i) => (i === 0 ? 'stay' : (['stay', 'stay', 'abort', 'timeout', 'close', 'stay'] as const)[Math.floor(random() * 6)]!));
    // The leavers go from START_MS on, once the whole queue stands (queueing 20 sessions on a
    // loaded machine took longer than a timeout of 300 ms: the queue never reached its length).
    const START_MS = 8_000;
    const startAt = performance.now() + START_MS;
    const untilStart = () => delay(Math.max(0, startAt - performance.now()));
    const queued = await queueAll(observer, path, locks.slice(1), (i) =>
      plan[i + 1] === 'abort' ? { signal: controllers[i + 1]!.signal } : plan[i + 1] === 'timeout' ? { waitMs: START_MS + Math.floor(random() * 600) } : {},
    );
    const leavers = queued.map((q, i) => ({ q, i: i + 1 })).filter(({ i }) => plan[i] !== 'stay');
    const monitor = new Monitor();
    const order: number[] = [];
    // Leave at random moments over the next 600 ms (timeouts leave on their own).
    const leaving = Promise.all(
      leavers.map(async ({ i }) => {
        await untilStart();
        await delay(random() * 600);
        if (plan[i] === 'abort') controllers[i]!.abort();
        if (plan[i] === 'close') await engines[i]!.connection.close();
      }),
    );
    const stayers = queued.map((q, k) => ({ q, i: k + 1 })).filter(({ i }) => plan[i] === 'stay');
    const hold = async (i: number, lease: Lease) => {
      order.push(i);
      const h = monitor.grant(`q${i}`, lease);
      await checkLowest(observer, path, h, monitor);
      await delay(random() * 40);
      monitor.end(h);
      await lease.release();
    };
    const outcomes = Promise.all(
      queued.map(async (q, k) => {
        const i = k + 1;
        const lease = await q.acquiring.catch(() => undefined);
        if (lease) await hold(i, lease);
        return lease !== undefined;
      }),
    );
    await untilStart();
    await delay(random() * 100);
    await head.release();
    const got = await within(outcomes, 60_000, 'the queue');
    await leaving;
    // Everyone who stayed held, in queue order; a leaver may have held before it left.
    for (const { i } of stayers) expect(got[i - 1]).toBe(true);
    const stayOrder = order.filter((i) => plan[i] === 'stay');
    expect(stayOrder).toEqual([...stayOrder].sort((a, b) => a - b));
    expect(order).toEqual([...order].sort((a, b) => a - b));
    console.log(`fifo with leavers: plan ${plan.slice(1).join(',')}; held ${order.join(',')}`);
    expect(monitor.violations).toEqual([]);
  }, 120_000);
});

describe('Deep queue: the queue changing between a listing and the watch it leads to (instrumented session)', () => {
  /**
   * Holds back w's getData on `target` (the watch its verdict asks for) until `before` has run:
   * the queue changes between w's listing and its watch request, with w's own-node watch
   * (requested first, pipelined) already answered.
   */
  function holdBackWatch(e: LockEngine, target: string, before: () => Promise<void>): { used: () => boolean } {
    const session = e.connection.session!;
    const original = session.getData.bind(session);
    let used = false;
    session.getData = ((path: string, watch?: never) => {
      if (path !== target || used) return original(path, watch);
      used = true;
      return before().then(() => original(path, watch));
    }) as typeof session.getData;
    return { used: () => used };
  }

  it('after the head goes, the predecessor holds and releases before the waiter two back (listing done) arms its watch on it: the waiter holds on NONODE, its own node watched', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-nonode-holds');
    const { engines, locks } = await contenders(path, 4);
    const head = await locks[0]!.acquire();
    const leave = new AbortController();
    const [p, w, x] = await queueAll(observer, path, locks.slice(1), (i) => (i === 0 ? { signal: leave.signal } : {}));
    await untilWatching(head.path, engines[2]!.connection.sessionId!);
    const hook = holdBackWatch(engines[2]!, `${path}/${p!.node}`, async () => {
      // p holds by now (it was next): it "leaves" by releasing at once, before w's watch request.
      const pLease = await p!.acquiring;
      await pLease.release();
      await eventually(async () => !(await childrenOf(observer, path)).includes(p!.node), 10_000, 5);
    });
    await head.release();
    const wLease = await within(w!.acquiring, 10_000, 'w');
    expect(hook.used()).toBe(true);
    expect(nameOf(wLease)).toBe(w!.node);
    const monitor = new Monitor();
    const h = monitor.grant('w', wLease);
    await checkLowest(observer, path, h, monitor);
    expect(x!.settled()).toBe(false);
    monitor.end(h);
    await wLease.release();
    await (await within(x!.acquiring, 10_000, 'x')).release();
    expect(monitor.violations).toEqual([]);
    leave.abort();
  });

  it('same, but the waiter\'s own node is deleted by someone just before: it queues again and does not hold beside the one behind it', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-nonode-own-gone');
    const { engines, locks } = await contenders(path, 4);
    const head = await locks[0]!.acquire();
    const [p, w, x] = await queueAll(observer, path, locks.slice(1));
    await untilWatching(head.path, engines[2]!.connection.sessionId!);
    const monitor = new Monitor();
    let pHold: Hold | undefined;
    const hook = holdBackWatch(engines[2]!, `${path}/${p!.node}`, async () => {
      monitor.foreignDeleted.set(w!.node, performance.now());
      await observer.session!.delete(`${path}/${w!.node}`);
      const pLease = await p!.acquiring;
      pHold = monitor.grant('p', pLease);
      monitor.end(pHold);
      await pLease.release();
      await eventually(async () => !(await childrenOf(observer, path)).includes(p!.node), 10_000, 5);
    });
    await head.release();
    // x (behind w) is next now: it holds; w must queue again behind it.
    const xLease = await within(x!.acquiring, 10_000, 'x');
    expect(hook.used()).toBe(true);
    const xHold = monitor.grant('x', xLease);
    await checkLowest(observer, path, xHold, monitor);
    await eventually(async () => (await childrenOf(observer, path)).length === 2, 10_000, 10);
    await delay(100);
    expect(w!.settled()).toBe(false);
    monitor.end(xHold);
    await xLease.release();
    const wLease = await within(w!.acquiring, 10_000, 'w');
    expect(nameOf(wLease)).not.toBe(w!.node);
    monitor.grant('w', wLease);
    expect(monitor.violations).toEqual([]);
    await wLease.release();
  });

  it('the node two ahead goes between the waiter\'s listing and its watch request (NONODE at index >= 2): it lists again, no hold, no hang', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-nonode-two-ahead');
    const { engines, locks } = await contenders(path, 5);
    const head = await locks[0]!.acquire();
    const leave = new AbortController();
    const [a, b, c, d] = await queueAll(observer, path, locks.slice(1), (i) => (i === 1 ? { signal: leave.signal } : {}));
    // d (index 4) watches b (index 2). A set on b makes d list again; its new watch request on b is
    // held back until b has left (aborted): it meets NONODE, lists again and watches a instead.
    await untilWatching(`${path}/${b!.node}`, engines[4]!.connection.sessionId!);
    const hook = holdBackWatch(engines[4]!, `${path}/${b!.node}`, async () => {
      leave.abort();
      await notAcquired(b!.acquiring);
      await eventually(async () => !(await childrenOf(observer, path)).includes(b!.node), 10_000, 5);
    });
    await observer.session!.setData(`${path}/${b!.node}`, Buffer.from('poke'));
    await eventually(() => hook.used(), 10_000, 5);
    await untilWatching(`${path}/${a!.node}`, engines[4]!.connection.sessionId!);
    expect(d!.settled()).toBe(false);
    const monitor = new Monitor();
    await head.release();
    for (const [who, q] of [['a', a!], ['c', c!], ['d', d!]] as const) {
      const lease = await within(q.acquiring, 10_000, who);
      const h = monitor.grant(who, lease);
      await checkLowest(observer, path, h, monitor);
      monitor.end(h);
      await lease.release();
    }
    expect(monitor.violations).toEqual([]);
  });
});

describe('Deep queue: foreign writes and deletes of queue nodes', () => {
  it('a foreign set on the node two ahead, on the head, and on the waiter\'s own node: no spurious hold, the waiter still holds in order', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-foreign-set');
    const { engines, locks } = await contenders(path, 4);
    const head = await locks[0]!.acquire();
    const [a, b, c] = await queueAll(observer, path, locks.slice(1));
    const cSession = engines[3]!.connection.sessionId!;
    await untilWatching(`${path}/${a!.node}`, cSession);
    // c (index 3) watches a: a data change of a wakes c, which lists and watches a again.
    await observer.session!.setData(`${path}/${a!.node}`, Buffer.from('foreign'));
    await untilWatching(`${path}/${a!.node}`, cSession);
    // Sets on the head (a revocation marker as well), and on every waiting node, twice over.
    for (let i = 0; i < 2; i++) {
      await revokeHolders(observer, path);
      for (const q of [a!, b!, c!]) await observer.session!.setData(`${path}/${q.node}`, Buffer.from(`set ${i}`));
      await observer.session!.setData(head.path, Buffer.from(`head ${i}`));
    }
    await delay(200);
    expect([a!.settled(), b!.settled(), c!.settled()]).toEqual([false, false, false]);
    expect(head.signal.aborted).toBe(false);
    // The waiters still watch the right nodes (after their watches were spent by the sets).
    await untilWatching(head.path, engines[1]!.connection.sessionId!);
    await untilWatching(head.path, engines[2]!.connection.sessionId!);
    await untilWatching(`${path}/${a!.node}`, cSession);
    const monitor = new Monitor();
    await head.release();
    for (const [who, q] of [['a', a!], ['b', b!], ['c', c!]] as const) {
      const lease = await within(q.acquiring, 15_000, who);
      expect(nameOf(lease)).toBe(q.node);
      const h = monitor.grant(who, lease);
      await checkLowest(observer, path, h, monitor);
      // A set on the new head while the next one is on the shortcut: it re-arms, no hold.
      await observer.session!.setData(lease.path, Buffer.from('while held'));
      await delay(50);
      monitor.end(h);
      await lease.release();
    }
    expect(monitor.violations).toEqual([]);
  });

  it('the node two ahead (a waiter) deleted by someone else: the waiter behind lists again, and its owner queues anew at the tail', async () => {
    const observer = await connect();
    const path = uniquePath('dqr-foreign-delete-two-ahead');
    const { engines, locks } = await contenders(path, 4);
    const head = await locks[0]!.acquire();
    const [a, b, c] = await queueAll(observer, path, locks.slice(1));
    await untilWatching(`${path}/${a!.node}`, engines[3]!.connection.sessionId!);
    await observer.session!.delete(`${path}/${a!.node}`);
    // c lists again and watches the head (index 2); a notices its node gone and queues again.
    await untilWatching(head.path, engines[3]!.connection.sessionId!);
    await eventually(async () => (await childrenOf(observer, path)).length === 4, 20_000, 20);
    const order = sortChildren(await childrenOf(observer, path), MARKERS);
    expect(order.slice(0, 3)).toEqual([nameOf(head), b!.node, c!.node]);
    const monitor = new Monitor();
    await head.release();
    for (const [who, q] of [['b', b!], ['c', c!], ['a', a!]] as const) {
      const lease = await within(q.acquiring, 15_000, who);
      const h = monitor.grant(who, lease);
      await checkLowest(observer, path, h, monitor);
      monitor.end(h);
      await lease.release();
    }
    expect(monitor.violations).toEqual([]);
  });
});
