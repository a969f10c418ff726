// The model of ZooKeeper the session simulation runs against (scripts/simulation/): what it lets a
// follower see must be what a real ensemble can show, or the simulation reports overlaps that no
// ensemble can produce (or hides ones it can).
import { VirtualClock } from '../../scripts/simulation/virtual-clock.mjs';
import { ZooKeeperModel } from '../../scripts/simulation/zookeeper-model.mjs';

const TICK_MS = 50;
const SYNC_LIMIT = 5;

function ensemble() {
  const clock = new VirtualClock(() => 0.5);
  const model = new ZooKeeperModel(clock, { servers: 3, tickMs: TICK_MS, syncLimit: SYNC_LIMIT, minTimeoutMs: 100, maxTimeoutMs: 1000, trace: () => undefined });
  const runUntil = (time: number) => {
    for (let event = clock.next(time); event; event = clock.next(time)) event.run();
    clock.now = time;
  };
  const leader = model.leader!;
  const follower = model.servers.find((s) => s !== leader)!;
  const create = (path: string) => {
    const prepared = leader.tree.prepare({ op: 'create', path, data: Buffer.alloc(0), flags: 0 }, 0n);
    if (!('txn' in prepared)) throw new Error(`create ${path}: ${prepared.err}`);
    model.commit(leader, prepared.txn);
  };
  return { model, leader, follower, runUntil, create };
}

describe('ZooKeeper model (simulation)', () => {
  it('a follower cut off from the leader for less than syncLimit gets what was committed meanwhile once the cut heals', () => {
    const { follower, runUntil, create } = ensemble();
    runUntil(200);
    expect(follower.role).toBe('follower');
    follower.toLeader.cutOff();
    follower.fromLeader.cutOff();
    create('/during-the-cut');
    runUntil(300);
    expect(follower.tree.nodes.has('/during-the-cut')).toBe(false); // a cut-off follower reads the past
    follower.toLeader.heal();
    follower.fromLeader.heal();
    runUntil(400); // healed after 100 ms, under syncLimit × tick (250 ms): the connection stayed up
    expect(follower.role).toBe('follower');
    expect(follower.tree.nodes.has('/during-the-cut')).toBe(true);
  });

  it('transactions reach every follower in the order the leader applied them, also when the quickest round trip shrinks between two', () => {
    const { model, leader, runUntil, create } = ensemble();
    runUntil(200);
    const [slow, quick] = model.servers.filter((s) => s !== leader);
    quick!.toLeader.cutOff();
    quick!.fromLeader.cutOff();
    slow!.toLeader.lagMs = 100; // the only quorum: /parent commits in ~100 ms
    create('/parent');
    runUntil(210);
    quick!.toLeader.heal();
    quick!.fromLeader.heal(); // a 1 ms round trip again: /parent/child would commit first
    create('/parent/child');
    runUntil(1000);
    for (const server of model.servers) expect([server.id, server.tree.nodes.has('/parent/child')]).toEqual([server.id, true]);
  });

  it('a write decided while no quorum is in reach commits, in order, once one is back', () => {
    const { model, leader, runUntil, create } = ensemble();
    runUntil(200);
    const followers = model.servers.filter((s) => s !== leader);
    for (const f of followers) {
      f.toLeader.cutOff();
      f.fromLeader.cutOff();
    }
    create('/no-quorum');
    runUntil(250);
    for (const f of followers) {
      f.toLeader.heal();
      f.fromLeader.heal();
    }
    create('/no-quorum/after');
    runUntil(1000);
    for (const server of model.servers) expect([server.id, server.tree.nodes.has('/no-quorum/after')]).toEqual([server.id, true]);
  });

  it('a leader that hears from no quorum for syncLimit steps down, and another leader is elected once they are back', () => {
    const { model, leader, runUntil } = ensemble();
    runUntil(200);
    const followers = model.servers.filter((s) => s !== leader);
    for (const f of followers) {
      f.toLeader.cutOff();
      f.fromLeader.cutOff();
    }
    runUntil(200 + 3 * SYNC_LIMIT * TICK_MS);
    expect(leader.role).not.toBe('leader');
    for (const f of followers) {
      f.toLeader.heal();
      f.fromLeader.heal();
    }
    runUntil(3000);
    expect(model.leader).toBeDefined();
    expect(model.servers.filter((s) => s.role === 'follower')).toHaveLength(2);
  });

  it('a follower whose connection to the leader closed during a cut syncs the whole tree as it joins again', () => {
    const { follower, runUntil, create } = ensemble();
    runUntil(200);
    follower.toLeader.cutOff();
    follower.fromLeader.cutOff();
    create('/during-the-cut');
    runUntil(200 + 3 * SYNC_LIMIT * TICK_MS); // both sides gave up on the other
    follower.toLeader.heal();
    follower.fromLeader.heal();
    runUntil(2000);
    expect(follower.role).toBe('follower');
    expect(follower.tree.nodes.has('/during-the-cut')).toBe(true);
  });
});
