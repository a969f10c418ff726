import { formatTable, printable } from '../../lib/cli.js';
import type { LockInfo } from '../../lib/core/inspect.js';

// Holder data is written by whoever created the node: the table must not pass terminal control
// sequences to the operator's screen (clear it, print a fake "No locks held").
const hostile = '\u001b[2J\u001b[HNo locks held under /locks.\r\u009b31m\u202etxt.exe';
const lock = {
  path: '/locks/orders',
  kind: 'mutex',
  holders: [{ node: 'x-lock-0000000001', path: '/locks/orders/x-lock-0000000001', mode: 'lock', sequence: 1, holds: true, holder: { host: hostile, pid: 7, app: 'a\u0007pp', instance: 'i' }, sessionId: 'abc', createdAt: new Date(0), ageMs: 1500 }],
  waiting: [],
} as unknown as LockInfo;

describe('the CLI table', () => {
  it('escapes control characters and bidi overrides in everything it prints from ZooKeeper', () => {
    const table = formatTable([lock], '/locks');
    expect(table).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/);
    expect(table).toContain('\\x1b[2J\\x1b[HNo locks held under /locks.\\x0d\\x9b31m\\u202etxt.exe:7 a\\x07pp/i');
    expect(formatTable([], '/x\u001b[2J')).toBe('No locks held under /x\\x1b[2J.\n');
  });

  it('leaves ordinary text alone', () => {
    expect(printable('host-1.example:4711 tickets/instance-2 ünïcode')).toBe('host-1.example:4711 tickets/instance-2 ünïcode');
  });
});
