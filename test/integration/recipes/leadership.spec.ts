import { once } from 'node:events';
import { LockLostError } from '../../../lib/core/errors.js';
import { inspectLock } from '../../../lib/core/inspect.js';
import { Leadership, type LeadershipTerm } from '../../../lib/core/recipes/leadership.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath, zkConnectString } from '../../support/helpers.js';

afterAll(closeAll);

/** `count` participants, each on its own connection (one "process" each). */
async function participants(path: string, count: number): Promise<{ engines: LockEngine[]; leaders: Leadership[] }> {
  const engines = await Promise.all(Array.from({ length: count }, () => engine()));
  const leaders = engines.map((e, i) => new Leadership(e, path, path, { participantId: `p${i}` }));
  return { engines, leaders };
}

/** Records, across participants, who leads when: at most one at any moment from their own views. */
function watchTerms(leaders: Leadership[]) {
  const log: string[] = [];
  let leading = 0;
  let maxLeading = 0;
  for (const leader of leaders) {
    leader.on('gained', () => {
      leading++;
      maxLeading = Math.max(maxLeading, leading);
      log.push(`gained ${leader.participantId}`);
    });
    leader.on('lost', (_term, reason) => {
      leading--;
      log.push(`lost ${leader.participantId} ${reason}`);
    });
  }
  return { log, maxLeading: () => maxLeading };
}

const gained = (leader: Leadership, timeoutMs = 20_000) =>
  once(leader, 'gained', { signal: AbortSignal.timeout(timeoutMs) }).then(([term]) => term as LeadershipTerm);

describe('Leadership (Curator LeaderLatch layout)', () => {
  it('elects exactly one leader among processes, in queue order, with Curator\'s node names and the ids as data', async () => {
    const path = uniquePath('election');
    const { leaders } = await participants(path, 3);
    const terms = watchTerms(leaders);
    leaders[0]!.start();
    const first = await gained(leaders[0]!);
    // One at a time: two sessions' creates reach the server in no fixed order.
    leaders[1]!.start();
    await eventually(async () => (await leaders[0]!.participants()).length === 2, 10_000);
    leaders[2]!.start();
    await eventually(async () => (await leaders[0]!.participants()).length === 3, 10_000);
    expect(await leaders[2]!.participants()).toEqual([
      { id: 'p0', node: expect.stringMatching(/^_c_[0-9a-f-]{36}-nzl-latch-\d{10}$/), isLeader: true },
      { id: 'p1', node: expect.any(String), isLeader: false },
      { id: 'p2', node: expect.any(String), isLeader: false },
    ]);
    expect((await leaders[1]!.leader())?.id).toBe('p0');
    // inspect (and the CLI) read an election: the leader holds, the others wait, ids as holder.
    const info = (await inspectLock(await connect(), path))!;
    expect(info.kind).toBe('leadership');
    expect(info.holders.map((h) => [h.mode, h.holder.host])).toEqual([['latch', 'p0']]);
    expect(info.waiting.map((w) => w.holder.host)).toEqual(['p1', 'p2']);
    expect(leaders.map((l) => l.isLeader)).toEqual([true, false, false]);

    // Stepping down: the term's signal aborts, the next in line leads, the first queues at the tail.
    const next = gained(leaders[1]!);
    await leaders[0]!.stepDown();
    expect(first.signal.aborted).toBe(true);
    expect((first.signal.reason as LockLostError).reason).toBe('stepped-down');
    const second = await next;
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await eventually(async () => (await leaders[0]!.participants()).map((p) => p.id).join() === 'p1,p2,p0', 10_000);

    // Closing the leader hands over at once (no session timeout).
    const third = gained(leaders[2]!);
    const closing = Date.now();
    await leaders[1]!.close();
    expect(second.signal.aborted).toBe(true);
    await third;
    expect(Date.now() - closing).toBeLessThan(3000); // not the 4 s session timeout (room for a busy machine)
    expect(terms.maxLeading()).toBe(1);
    await Promise.all(leaders.map((l) => l.close()));
    expect(await childrenOf(await connect(), path)).toEqual([]);
  });

  it('a leader cut off from ZooKeeper ends its term before its session expires, and the next participant leads', async () => {
    const path = uniquePath('election-expiry');
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const leaderEngine = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 4000 });
      const other = await engine();
      const leader = new Leadership(leaderEngine, path, path, { participantId: 'leader' }).start();
      const term = await gained(leader);
      const follower = new Leadership(other, path, path, { participantId: 'follower' }).start();
      await eventually(async () => (await follower.participants()).length === 2, 10_000);
      let abortedAt = 0;
      term.signal.addEventListener('abort', () => (abortedAt = performance.now()));
      const takeover = gained(follower).then(() => performance.now());
      // A partition that closes nothing: the server expires the leader's session one timeout after
      // it last heard from it; the leader must give up its term before that.
      proxy.blackhole();
      const followerGainedAt = await takeover;
      expect(abortedAt).toBeGreaterThan(0);
      expect(abortedAt).toBeLessThan(followerGainedAt);
      expect(['session-expired', 'session-timeout']).toContain((term.signal.reason as LockLostError).reason);
      proxy.restore();
      // The old leader queues again in its new session, behind the new leader.
      await eventually(async () => (await follower.participants()).map((p) => p.id).join() === 'follower,leader', 20_000);
      await Promise.all([leader.close(), follower.close()]);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it("a foreign client deleting the leader's node ends its term (node-deleted), and the next participant leads", async () => {
    const path = uniquePath('election-foreign');
    const { leaders } = await participants(path, 2);
    const [a, b] = leaders as [Leadership, Leadership];
    a.start();
    const term = await gained(a);
    b.start();
    await eventually(async () => (await b.participants()).length === 2, 10_000);
    const next = gained(b);
    await (await connect()).session!.delete(term.path);
    await next;
    // Each session hears of the deletion on its own: b may handle its event first (one process
    // here, two sockets), so a's end is waited for, not assumed to come before b's term.
    await eventually(async () => term.signal.aborted, 10_000);
    expect((term.signal.reason as LockLostError).reason).toBe('node-deleted');
    // It queues again behind the new leader.
    await eventually(async () => (await b.participants()).map((p) => p.id).join() === 'p1,p0', 10_000);
    await Promise.all([a.close(), b.close()]);
  });

  it("the engine's shutdown makes its leader step down first: the successor leads in about a round trip", async () => {
    const path = uniquePath('election-shutdown');
    const { engines, leaders } = await participants(path, 2);
    leaders[0]!.start();
    const term = await gained(leaders[0]!);
    leaders[1]!.start();
    await eventually(async () => (await leaders[1]!.participants()).length === 2, 10_000);
    const successor = gained(leaders[1]!);
    const started = Date.now();
    await engines[0]!.shutdown(); // shutdownGraceMs is 10 s by default: a leader is not waited for
    await successor;
    expect(Date.now() - started).toBeLessThan(3000); // not the 4 s session timeout (room for a busy machine)
    expect((term.signal.reason as LockLostError).reason).toBe('stepped-down');
    await leaders[1]!.close();
  });

  it('a listener that throws does not stop the election: the term still ends, the node goes, the next leads', async () => {
    const path = uniquePath('election-listener');
    const { engines, leaders } = await participants(path, 2);
    const warnings: string[] = [];
    engines[0]!.onWarning((m) => warnings.push(m));
    const [a, b] = leaders as [Leadership, Leadership];
    a.on('gained', () => {
      throw new Error('bug in a gained listener');
    });
    a.on('lost', () => {
      throw new Error('bug in a lost listener');
    });
    a.start();
    await a.whenLeader(AbortSignal.timeout(10_000));
    b.start();
    await eventually(async () => (await b.participants()).length === 2, 10_000);
    const next = gained(b);
    await a.close();
    await next;
    expect(warnings.filter((w) => w.includes('listener'))).toHaveLength(2);
    await b.close();
  });

  it('whenLeader() resolves with the term once leading, and rejects when closed first', async () => {
    const path = uniquePath('election-when');
    const { leaders } = await participants(path, 2);
    const [a, b] = leaders as [Leadership, Leadership];
    a.start();
    await expect(a.whenLeader(AbortSignal.timeout(10_000))).resolves.toMatchObject({ fencingToken: expect.any(BigInt) });
    b.start();
    const waiting = expect(b.whenLeader()).rejects.toMatchObject({ reason: 'stepped-down' });
    await b.close();
    await waiting;
    await a.close();
    expect(a.isLeader).toBe(false);
  });
});
