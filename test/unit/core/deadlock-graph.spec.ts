// The pure parts of deadlock detection: the holder data a nested waiter writes, and the cycle
// search over locks as inspect reads them (lib/core/deadlocks.ts cyclesIn). Against ZooKeeper:
// test/integration/deadlocks*.spec.ts.
import { jest } from '@jest/globals';
import { holderDataWriter, parseHolderData } from '../../../lib/core/operations/holder-data.js';
import { cyclesIn } from '../../../lib/core/deadlocks.js';
import type { ContenderInfo, LockInfo } from '../../../lib/core/inspect.js';

describe('holder data', () => {
  it('merges an acquire\'s holds into the JSON; without one the millisecond\'s shared buffer is reused', () => {
    const now = jest.spyOn(Date, 'now').mockReturnValue(Date.UTC(2030, 0, 1));
    const write = holderDataWriter({ app: 'a', instance: 'i' });
    const plain = write();
    expect(write()).toBe(plain);
    expect(write({ holds: ['/x'] })).not.toBe(plain);
    expect(parseHolderData(plain)).not.toHaveProperty('holds');
    expect(parseHolderData(plain).createdAt).toBe('2030-01-01T00:00:00.000Z');
    now.mockRestore();
    const nested = parseHolderData(write({ holds: ['/locks/x', '/locks/"y"'] }));
    expect(nested).toMatchObject({ app: 'a', instance: 'i', pid: process.pid, holds: ['/locks/x', '/locks/"y"'] });
    expect(typeof nested.createdAt).toBe('string');
    expect(parseHolderData(write({}))).not.toHaveProperty('holds');
  });
});

let zxid = 0;
/** A contender of `session` (created in order of the calls: its czxid grows). */
function node(lock: string, session: string, holds?: string[]): ContenderInfo {
  const czxid = ++zxid;
  return {
    node: `n${czxid}`,
    path: `${lock}/n${czxid}`,
    mode: 'lock',
    sequence: czxid,
    holds: false,
    holder: holds ? { host: 'h', pid: 1, holds } : { host: 'h', pid: 1 },
    revokeRequested: false,
    sessionId: session,
    createdAt: new Date(czxid),
    czxid,
    ageMs: 0,
  };
}

function lock(path: string, holders: ContenderInfo[], waiting: ContenderInfo[], kind: LockInfo['kind'] = 'mutex'): LockInfo {
  return { path, kind, holders: holders.map((h) => ({ ...h, holds: true })), waiting };
}

describe('cyclesIn', () => {
  it('two sessions each holding what the other waits for: one cycle, the wait made last first', () => {
    const h1 = node('/1', 'A');
    const h2 = node('/2', 'B');
    const wA = node('/2', 'A', ['/1']);
    const wB = node('/1', 'B', ['/2']);
    const found = cyclesIn([lock('/1', [h1], [wB]), lock('/2', [h2], [wA])]);
    expect(found).toHaveLength(1);
    expect(found[0]!.members.map((m) => [m.waitingNode, m.lock, m.holdingNode, m.waitsFor])).toEqual([
      [wB.path, '/2', h2.path, '/1'],
      [wA.path, '/1', h1.path, '/2'],
    ]);
    expect(cyclesIn([lock('/1', [h1], [wB]), lock('/2', [h2], [wA])], wA.path)).toHaveLength(1);
    expect(cyclesIn([lock('/1', [h1], [wB]), lock('/2', [h2], [wA])], 'elsewhere')).toHaveLength(0);
  });

  it('no cycle: a holder that waits for nothing, a waiter that holds nothing, a semaphore, a chain waiting for its own lock', () => {
    const h1 = node('/1', 'A');
    const h2 = node('/2', 'B');
    const wA = node('/2', 'A', ['/1']);
    // B holds /2 and waits for nothing (about to release): a chain, not a cycle.
    expect(cyclesIn([lock('/1', [h1], []), lock('/2', [h2], [wA])])).toEqual([]);
    // B waits for /1 but its node names no holds (a try-once, another library): no edge.
    expect(cyclesIn([lock('/1', [h1], [node('/1', 'B')]), lock('/2', [h2], [wA])])).toEqual([]);
    // The same shapes in a semaphore: a waiter there waits for any one lease.
    expect(cyclesIn([lock('/1', [h1], [node('/1', 'B', ['/2'])], 'semaphore'), lock('/2', [h2], [wA])])).toEqual([]);
    // A waits for /1, which it holds itself (work it started, or a non-reentrant lock again).
    expect(cyclesIn([lock('/1', [h1], [node('/1', 'A', ['/1'])])])).toEqual([]);
  });

  it('the holding node must predate the wait: a hold taken again after the wait began is another hold', () => {
    const h2 = node('/2', 'B');
    const wA = node('/2', 'A', ['/1']);
    const wB = node('/1', 'B', ['/2']);
    const laterHold = node('/1', 'A'); // made after A began to wait: not the hold its node names
    expect(cyclesIn([lock('/1', [laterHold], [wB]), lock('/2', [h2], [wA])])).toEqual([]);
  });

  it('three sessions, and a read-write lock whose waiter waits for every reader', () => {
    const hA = node('/a', 'A');
    const r1 = node('/rw', 'X');
    const r2 = node('/rw', 'B');
    const hC = node('/c', 'C');
    const wA = node('/rw', 'A', ['/a']); // a writer behind both readers
    const wB = node('/c', 'B', ['/rw']);
    const wC = node('/a', 'C', ['/c']);
    const found = cyclesIn([lock('/a', [hA], [wC]), lock('/rw', [r1, r2], [wA], 'read-write'), lock('/c', [hC], [wB])]);
    expect(found).toHaveLength(1);
    expect(found[0]!.members.map((m) => m.sessionId)).toEqual(['C', 'A', 'B']);
    expect(found[0]!.members.map((m) => m.waitsFor)).toEqual(['/a', '/rw', '/c']);
  });
});
