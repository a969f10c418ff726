import { formatTopFrame, TopTracker } from '../../lib/cli-top.js';
import type { ContenderInfo, InspectedLockKind, LockInfo } from '../../lib/core/inspect.js';

// What top remembers across refreshes (handoffs, when a waiter took over) and how a frame fits a
// terminal; the listings are made up here, the e2e spec reads them from ZooKeeper.
function node(lock: string, seq: number, ageMs: number, instance = `pod-${seq}`): ContenderInfo {
  const name = `_c_x-lock-${String(seq).padStart(10, '0')}`;
  return {
    node: name,
    path: `${lock}/${name}`,
    mode: 'lock',
    sequence: seq,
    holds: false,
    holder: { host: 'h', pid: 1, app: 'app', instance },
    revokeRequested: false,
    sessionId: '1',
    czxid: seq,
    createdAt: new Date(0),
    ageMs,
  };
}

function lock(path: string, holders: ContenderInfo[], waiting: ContenderInfo[] = [], kind: InspectedLockKind = 'mutex'): LockInfo {
  return { path, kind, holders, waiting };
}

const header = { root: '/locks', server: 'zk:2181', intervalMs: 1000, at: new Date(2026, 0, 1, 12, 0, 0) };

describe('TopTracker', () => {
  it('counts holders new since the previous refresh as handoffs per second, none at the first refresh', () => {
    const tracker = new TopTracker(10_000);
    const first = tracker.update([lock('/locks/a', [node('/locks/a', 1, 5000)], [node('/locks/a', 2, 3000)])], 0);
    expect(first[0]!.handoffsPerSecond).toBeUndefined();
    // 2 took over from 1 (seen waiting before), then 3 (never seen) from 2.
    const second = tracker.update([lock('/locks/a', [node('/locks/a', 2, 4000)], [node('/locks/a', 3, 100)])], 1000);
    expect(second[0]).toMatchObject({ handoffsPerSecond: 1, heldMs: 0 });
    const third = tracker.update([lock('/locks/a', [node('/locks/a', 4, 300)])], 2000);
    expect(third[0]).toMatchObject({ handoffsPerSecond: 1, heldMs: 300 }); // 4 was never seen waiting: its node's age
    const fourth = tracker.update([lock('/locks/a', [node('/locks/a', 4, 1300)])], 4000);
    expect(fourth[0]!.handoffsPerSecond).toBe(0.5); // 2 handoffs in 4 s
  });

  it('counts a held time from the refresh that saw a waiter take over, not from its node', () => {
    const tracker = new TopTracker();
    tracker.update([lock('/locks/a', [node('/locks/a', 1, 9000)], [node('/locks/a', 2, 8000)])], 0);
    tracker.update([lock('/locks/a', [node('/locks/a', 2, 9000)])], 1000);
    const rows = tracker.update([lock('/locks/a', [node('/locks/a', 2, 11_500)])], 3500);
    expect(rows[0]!.heldMs).toBe(2500);
  });

  it('forgets handoffs older than its window', () => {
    const tracker = new TopTracker(2000);
    tracker.update([lock('/locks/a', [node('/locks/a', 1, 0)])], 0);
    tracker.update([lock('/locks/a', [node('/locks/a', 2, 0)])], 1000);
    expect(tracker.update([lock('/locks/a', [node('/locks/a', 2, 0)])], 2000)[0]!.handoffsPerSecond).toBe(0.5);
    expect(tracker.update([lock('/locks/a', [node('/locks/a', 2, 0)])], 3000)[0]!.handoffsPerSecond).toBe(0);
  });

  it('sorts by longest wait, then waiters, then held time; an election has no wait', () => {
    const tracker = new TopTracker();
    const rows = tracker.update(
      [
        lock('/locks/election', [node('/locks/election', 1, 90_000)], [node('/locks/election', 2, 90_000)], 'leadership'),
        lock('/locks/free', [node('/locks/free', 1, 50_000)]),
        lock('/locks/short', [node('/locks/short', 1, 1000)], [node('/locks/short', 2, 500), node('/locks/short', 3, 200)]),
        lock('/locks/long', [node('/locks/long', 1, 1000)], [node('/locks/long', 2, 700)]),
      ],
      0,
    );
    expect(rows.map((r) => [r.lock.path, r.longestWaitMs])).toEqual([
      ['/locks/long', 700],
      ['/locks/short', 500],
      ['/locks/election', undefined],
      ['/locks/free', undefined],
    ]);
  });
});

describe('formatTopFrame', () => {
  const rows = new TopTracker().update(
    Array.from({ length: 30 }, (_, i) => lock(`/locks/l${i}`, [node(`/locks/l${i}`, 1, 1000, 'a-rather-long-instance-name')], [node(`/locks/l${i}`, 2, 100 * i)])),
    0,
  );

  it('fits a terminal: no line wider than it, the rows that do not fit counted on the last line', () => {
    const lines = formatTopFrame(rows, header, { columns: 60, rows: 12 });
    expect(lines).toHaveLength(11); // the last terminal line stays free: no scrolling
    expect(lines.every((l) => [...l].length <= 60)).toBe(true);
    expect(lines.at(-1)).toMatch(/^… 24 more locks/);
    expect(lines.find((l) => l.startsWith('/locks/l29 '))).toBeDefined(); // the longest wait first
  });

  it('prints every row without a terminal, and says so when nothing is held', () => {
    expect(formatTopFrame(rows, header).filter((l) => l.startsWith('/locks/'))).toHaveLength(30);
    expect(formatTopFrame([], header).at(-1)).toBe('No locks held under /locks.');
  });

  it('escapes control characters that holder data may carry', () => {
    const hostile = new TopTracker().update([lock('/locks/x', [node('/locks/x', 1, 0, '\u001b[2Jgotcha')])], 0);
    expect(formatTopFrame(hostile, header).join('\n')).not.toContain('\u001b');
  });
});
