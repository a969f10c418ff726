// What a reply must be to be taken: read to its end, a multi's results one per op and of its
// kind, error codes ZooKeeper defines, a negotiated timeout a server can grant. Pure decoding;
// the link drops on each (test/integration/client/inconsistent-replies.spec.ts, against ZooKeeper).
import { JuteDecodeError, JuteReader, JuteWriter } from '../../../../lib/core/client/wire/jute.js';
import { decodeConnectResponse, decodeCreateResponse, decodeStat, OpCode, readMultiResults, type MultiRequestOp } from '../../../../lib/core/client/wire/records.js';
import { isServerCode } from '../../../../lib/core/client/zk-error.js';
import { newSessionBackoffMs, refusedGrant } from '../../../../lib/core/client/session-opening.js';

/** A reader over what `write` writes (no length prefix). */
function bytes(write: (w: JuteWriter) => void): JuteReader {
  const w = new JuteWriter();
  write(w);
  return new JuteReader(w.frame(), 4);
}

const stat = (w: JuteWriter, ctime = 1_700_000_000_000n) => w.long(1n).long(1n).long(ctime).long(ctime).int(0).int(0).int(0).long(0n).int(0).int(0).long(1n);
const END = (w: JuteWriter) => w.int(-1).bool(true).int(-1);
const create = (path: string, flags = 3): MultiRequestOp => ({ type: OpCode.create, path, data: Buffer.alloc(0), flags, acl: [] });
const del = (path: string): MultiRequestOp => ({ type: OpCode.delete, path, version: -1 });

describe('a reply read to its end', () => {
  it('expectEnd refuses bytes left over', () => {
    const reader = bytes((w) => w.ustring('/a').int(7));
    expect(reader.string()).toBe('/a');
    expect(() => reader.expectEnd('reply')).toThrow(new JuteDecodeError('reply: 4 bytes left over'));
    reader.int();
    expect(() => reader.expectEnd('reply')).not.toThrow();
  });

  it('a ConnectResponse with or without its readOnly byte, nothing after it', () => {
    const response = (w: JuteWriter) => w.int(0).int(4000).long(0x1234n).buffer(Buffer.alloc(16, 1));
    const frame = (write: (w: JuteWriter) => void) => {
      const w = new JuteWriter();
      write(w);
      return w.frame().subarray(4);
    };
    expect(decodeConnectResponse(frame((w) => response(w)))).toMatchObject({ timeoutMs: 4000, sessionId: 0x1234n });
    expect(decodeConnectResponse(frame((w) => response(w).bool(false)))).toMatchObject({ timeoutMs: 4000 });
    expect(() => decodeConnectResponse(frame((w) => response(w).bool(false).int(0)))).toThrow(JuteDecodeError);
  });

  it('a path sent as a Stat: times no clock gives are refused, not NaN dates', () => {
    expect(decodeStat(bytes((w) => stat(w))).ctime.getTime()).toBe(1_700_000_000_000);
    // A path of 64 characters fills exactly the 68 bytes of a Stat; its text lands in ctime.
    expect(() => decodeStat(bytes((w) => w.ustring(`/${'x'.repeat(63)}`)))).toThrow(new JuteDecodeError('Stat: ctime out of range'));
  });

  it("a create's answer names the path asked for (with a sequence for a sequential one); a container's carries its Stat", () => {
    expect(decodeCreateResponse(bytes((w) => w.ustring('/l/n-0000000007')), '/l/n-', 3)).toBe('/l/n-0000000007');
    // A sequence past 2^31 - 1 wraps negative: %010d gives "-000000001", still 10 characters.
    expect(decodeCreateResponse(bytes((w) => w.ustring('/l/n--000000001')), '/l/n-', 3)).toBe('/l/n--000000001');
    expect(decodeCreateResponse(bytes((w) => w.ustring('/l')), '/l', 1)).toBe('/l');
    const container = bytes((w) => stat(w.ustring('/l')));
    expect(decodeCreateResponse(container, '/l', 4)).toBe('/l');
    expect(container.remaining).toBe(0);
    for (const [path, asked, flags] of [
      ['/l/other', '/l/n-', 3],
      ['/l/n-0000000007', '/l/n-0000000007x', 3],
      ['/l/n-000000007', '/l/n-', 3],
      ['/l/n-00000000x7', '/l/n-', 3],
      ['/l/n-0000000007', '/l/n-', 1],
    ] as const) {
      expect(() => decodeCreateResponse(bytes((w) => w.ustring(path)), asked, flags)).toThrow(JuteDecodeError);
    }
    // A listing (children vector, Stat) read as a create's answer: the count is read as the path's length.
    const listing = bytes((w) => stat(w.vector(['x'], (v, s) => v.ustring(s))));
    expect(() => decodeCreateResponse(listing, '/l/n-', 3)).toThrow(JuteDecodeError);
  });
});

describe("a multi's results match its ops", () => {
  const ops = [create('/a/n-'), del('/b/n-0000000001'), create('/c', 4)];
  const results = (w: JuteWriter) => {
    w.int(OpCode.create).bool(false).int(0).ustring('/a/n-0000000003');
    w.int(OpCode.delete).bool(false).int(0);
    return stat(w.int(OpCode.create2).bool(false).int(0).ustring('/c'));
  };
  const fine = (w: JuteWriter) => END(results(w));

  it('one result per op, each of its kind or an error, then the end marker', () => {
    expect(readMultiResults(bytes(fine), ops)).toEqual([{ err: 0, path: '/a/n-0000000003' }, { err: 0 }, { err: 0, path: '/c' }]);
    const failed = bytes((w) => END(w.int(-1).bool(false).int(0).int(0).int(-1).bool(false).int(-101).int(-101).int(-1).bool(false).int(-2).int(-2)));
    expect(readMultiResults(failed, ops)).toEqual([{ err: 0 }, { err: -101 }, { err: -2 }]);
  });

  it.each([
    ['fewer results than ops', (w: JuteWriter) => END(w.int(OpCode.create).bool(false).int(0).ustring('/a/n-0000000003'))],
    ['more results than ops', (w: JuteWriter) => END(results(w).int(OpCode.delete).bool(false).int(0))],
    ['a create answered as a delete', (w: JuteWriter) => END(w.int(OpCode.delete).bool(false).int(0).int(OpCode.delete).bool(false).int(0).int(OpCode.delete).bool(false).int(0))],
    ['a delete answered as a create', (w: JuteWriter) => END(w.int(OpCode.create).bool(false).int(0).ustring('/a/n-0000000003').int(OpCode.create).bool(false).int(0).ustring('/b/n-0000000001'))],
    ['a create answered with another path', (w: JuteWriter) => END(w.int(OpCode.create).bool(false).int(0).ustring('/z/n-0000000003'))],
    ['an error code ZooKeeper does not define', (w: JuteWriter) => END(w.int(-1).bool(false).int(131072).int(131072))],
    ['a broken end marker', (w: JuteWriter) => w.int(OpCode.create).bool(false).int(0).ustring('/a/n-0000000003').int(OpCode.delete).bool(false).int(0).int(0).bool(true).int(0)],
  ])('%s: refused', (_name, write) => {
    expect(() => readMultiResults(bytes(write), ops)).toThrow(JuteDecodeError);
  });
});

describe('error codes', () => {
  it("are ZooKeeper's (KeeperException.Code, 3.8/3.9), not the clients' own nor unknown ones", () => {
    for (const code of [0, -1, -4, -8, -12, -14, -101, -110, -112, -115, -118, -122, -124, -125, -127]) expect(isServerCode(code)).toBe(true);
    for (const code of [131072, 1, -9, -116, -117, -126, -1000, -99, -128]) expect(isServerCode(code)).toBe(false);
  });
});

describe('the negotiated timeout', () => {
  const tick = 250;

  it('a new session: above 0, up to the ask or 2 × tickTime', () => {
    expect(refusedGrant(4000, 4000, true, tick)).toBeUndefined();
    expect(refusedGrant(1000, 4000, true, tick)).toBeUndefined(); // maxSessionTimeout below the ask
    expect(refusedGrant(500, 300, true, tick)).toBeUndefined(); // minSessionTimeout's default above the ask
    expect(refusedGrant(0, 4000, true, tick)).toMatch(/granted a session timeout of 0 ms to a new session/);
    expect(refusedGrant(-1, 4000, true, tick)).toMatch(/-1 ms/);
  });

  it('a re-attach: 0 is "expired" (not refused here), below 0 is refused', () => {
    expect(refusedGrant(0, 4000, false, tick)).toBeUndefined();
    expect(refusedGrant(-5, 4000, false, tick)).toMatch(/-5 ms to a re-attach/);
  });

  it('more than a server grants: says what was granted for what was asked, and which option to raise', () => {
    const message = refusedGrant(40_000, 4000, true, tick);
    expect(message).toMatch(/granted a session timeout of 40000 ms for the 4000 ms asked/);
    expect(message).toMatch(/raise sessionTimeoutMs to 40000 or more/);
    expect(message).toMatch(/serverTickTimeMs/);
    expect(refusedGrant(501, 300, false, tick)).toBeDefined();
  });
});

describe('the pause before a new session', () => {
  it('tens of ms after a usable one, growing with each unusable one in a row, up to 5 s, jittered', () => {
    expect(newSessionBackoffMs(0, () => 0)).toBe(10);
    expect(newSessionBackoffMs(0, () => 0.999999)).toBeCloseTo(50);
    expect(newSessionBackoffMs(3, () => 0.999999)).toBeCloseTo(400);
    expect(newSessionBackoffMs(3, () => 0)).toBeCloseTo(80);
    expect(newSessionBackoffMs(100, () => 0.999999)).toBeCloseTo(5000);
    expect(newSessionBackoffMs(100, () => 0)).toBe(1000);
    // Within 6 s, a run of unusable sessions gets at most a dozen.
    let elapsed = 0;
    let sessions = 0;
    while ((elapsed += newSessionBackoffMs(sessions, () => 0)) < 6000) sessions++;
    expect(sessions).toBeLessThan(12);
  });
});
