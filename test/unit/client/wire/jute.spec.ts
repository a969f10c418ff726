import { JuteDecodeError, JuteReader, JuteWriter } from '../../../../lib/core/client/wire/jute.js';
import {
  decodeConnectResponse,
  decodeReplyHeader,
  decodeStat,
  decodeWatcherEvent,
  encodeConnectRequest,
  encodeRequest,
  hex64,
  OpCode,
  readAcl,
  readMultiResults,
  writeAcl,
  writeMulti,
} from '../../../../lib/core/client/wire/records.js';

/** The body of a frame the writer made (its length prefix checked and cut). */
function body(frame: Buffer): JuteReader {
  expect(frame.readInt32BE(0)).toBe(frame.length - 4);
  return new JuteReader(frame, 4);
}

describe('jute', () => {
  it('round-trips every primitive, null strings, buffers and vectors', () => {
    const frame = new JuteWriter()
      .int(-7)
      .long(-(2n ** 63n))
      .long(2n ** 62n + 5n)
      .bool(true)
      .bool(false)
      .ustring('ünïcode/päth')
      .ustring(null)
      .buffer(Buffer.from([0, 255]))
      .buffer(null)
      .buffer(Buffer.alloc(0))
      .vector(['a', 'bc'], (w, s) => w.ustring(s))
      .vector(null, () => undefined)
      .frame();
    const r = body(frame);
    expect(r.int()).toBe(-7);
    expect(r.long()).toBe(-(2n ** 63n));
    expect(r.long()).toBe(2n ** 62n + 5n);
    expect([r.bool(), r.bool()]).toEqual([true, false]);
    expect(r.ustring()).toBe('ünïcode/päth');
    expect(r.ustring()).toBeNull();
    expect(r.buffer()).toEqual(Buffer.from([0, 255]));
    expect(r.buffer()).toBeNull();
    expect(r.buffer()).toEqual(Buffer.alloc(0));
    expect(r.vector((x) => x.string())).toEqual(['a', 'bc']);
    expect(r.vector((x) => x.int())).toBeNull();
    expect(r.remaining).toBe(0);
  });

  it('grows past its first buffer', () => {
    const big = Buffer.alloc(100_000, 7);
    const r = body(new JuteWriter().int(1).buffer(big).frame());
    expect(r.int()).toBe(1);
    expect(r.buffer()!.equals(big)).toBe(true);
  });

  it('refuses lengths that run past the frame, negative lengths, and truncated primitives', () => {
    const cases: [string, Buffer, (r: JuteReader) => unknown][] = [
      ['int', Buffer.from([0, 0, 1]), (r) => r.int()],
      ['long', Buffer.alloc(7), (r) => r.long()],
      ['boolean', Buffer.alloc(0), (r) => r.bool()],
      ['string past its frame', new JuteWriter().int(10).frame().subarray(4), (r) => r.ustring()],
      ['buffer past its frame', Buffer.concat([new JuteWriter().int(3).frame().subarray(4), Buffer.from('ab')]), (r) => r.buffer()],
      ['negative string length', new JuteWriter().int(-2).frame().subarray(4), (r) => r.ustring()],
      ['negative buffer length', new JuteWriter().int(-100).frame().subarray(4), (r) => r.buffer()],
      ['huge vector count', new JuteWriter().int(0x7fffffff).frame().subarray(4), (r) => r.vector((x) => x.int())],
      ['null where a path is required', new JuteWriter().int(-1).frame().subarray(4), (r) => r.string()],
    ];
    for (const [name, bytes, read] of cases) {
      let thrown: unknown;
      try {
        read(new JuteReader(bytes));
      } catch (error) {
        thrown = error;
      }
      expect([name, thrown instanceof JuteDecodeError]).toEqual([name, true]);
    }
  });

  it('reads only inside its window of a larger buffer', () => {
    const bytes = new JuteWriter().int(1).int(2).frame();
    const r = new JuteReader(bytes, 4, 8);
    expect(r.int()).toBe(1);
    expect(() => r.int()).toThrow(JuteDecodeError);
  });
});

describe('records', () => {
  it('encodes a ConnectRequest as 45 bytes: protocol 0, zxid, timeout, session, password, readOnly', () => {
    const fresh = encodeConnectRequest({ lastZxidSeen: 0n, timeoutMs: 4000, sessionId: 0n, password: Buffer.alloc(0) });
    expect(fresh.length).toBe(4 + 45);
    const r = body(fresh);
    expect([r.int(), r.long(), r.int(), r.long()]).toEqual([0, 0n, 4000, 0n]);
    expect(r.buffer()).toEqual(Buffer.alloc(16));
    expect(r.bool()).toBe(false);

    const password = Buffer.alloc(16, 0xab);
    const again = body(encodeConnectRequest({ lastZxidSeen: 0x1234n, timeoutMs: 5000, sessionId: 0x100000abcdn, password }));
    expect([again.int(), again.long(), again.int(), again.long()]).toEqual([0, 0x1234n, 5000, 0x100000abcdn]);
    expect(again.buffer()).toEqual(password);
  });

  it('decodes a ConnectResponse with or without the readOnly byte', () => {
    const password = Buffer.alloc(16, 1);
    const base = new JuteWriter().int(0).int(4000).long(0x18000001n).buffer(password);
    for (const frame of [base.frame(), new JuteWriter().int(0).int(4000).long(0x18000001n).buffer(password).bool(false).frame()]) {
      expect(decodeConnectResponse(frame.subarray(4))).toEqual({ timeoutMs: 4000, sessionId: 0x18000001n, password });
    }
    expect(() => decodeConnectResponse(Buffer.alloc(10))).toThrow(JuteDecodeError);
  });

  it('writes a request header, reads a reply header', () => {
    const r = body(encodeRequest(7, OpCode.exists, (w) => w.ustring('/a').bool(true)));
    expect([r.int(), r.int(), r.string(), r.bool()]).toEqual([7, OpCode.exists, '/a', true]);
    const reply = new JuteReader(new JuteWriter().int(7).long(99n).int(-101).frame(), 4);
    expect(decodeReplyHeader(reply)).toEqual({ xid: 7, zxid: 99n, err: -101 });
  });

  it('decodes a Stat (68 bytes) with the owner in unsigned hex', () => {
    const frame = new JuteWriter()
      .long(10n).long(11n).long(1_700_000_000_000n).long(1_700_000_000_500n)
      .int(2).int(3).int(4).long(-(2n ** 63n)).int(5).int(6).long(12n)
      .frame();
    expect(frame.length).toBe(4 + 68);
    const stat = decodeStat(body(frame));
    expect(stat).toMatchObject({ czxid: 10, mzxid: 11, version: 2, cversion: 3, ephemeralOwner: '8000000000000000', dataLength: 5, numChildren: 6, pzxid: 12 });
    expect(stat.ctime.getTime()).toBe(1_700_000_000_000);
    expect(hex64(0n)).toBe('0');
    expect(hex64(-1n)).toBe('ffffffffffffffff');
  });

  it('round-trips ACLs and decodes watch events', () => {
    const acl = [{ perms: 31, scheme: 'world', id: 'anyone' }, { perms: 1, scheme: 'digest', id: 'a:b' }];
    const w = new JuteWriter();
    writeAcl(w, acl);
    expect(readAcl(body(w.frame()))).toEqual(acl);
    const event = new JuteWriter().int(3).int(3).ustring('/x').frame();
    expect(decodeWatcherEvent(body(event))).toEqual({ type: 3, state: 3, path: '/x' });
    expect(() => decodeWatcherEvent(body(new JuteWriter().int(3).int(3).int(-5).frame()))).toThrow(JuteDecodeError);
  });

  it('writes multi ops with headers and a terminator, createContainer for containers', () => {
    const w = new JuteWriter();
    writeMulti(w, [
      { type: OpCode.create, path: '/c', data: Buffer.alloc(0), flags: 4, acl: [] },
      { type: OpCode.delete, path: '/d', version: -1 },
    ]);
    const r = body(w.frame());
    expect([r.int(), r.bool(), r.int(), r.string(), r.buffer()!.length, r.vector((x) => x.int()), r.int()]).toEqual([OpCode.createContainer, false, -1, '/c', 0, [], 4]);
    expect([r.int(), r.bool(), r.int(), r.string(), r.int()]).toEqual([OpCode.delete, false, -1, '/d', -1]);
    expect([r.int(), r.bool(), r.int()]).toEqual([-1, true, -1]);
    expect(r.remaining).toBe(0);
  });

  it('reads multi results by their header type, failures as error results', () => {
    const stat = (w: JuteWriter) => w.long(1n).long(1n).long(0n).long(0n).int(0).int(0).int(0).long(0n).int(0).int(0).long(1n);
    const ok = new JuteWriter().int(1).bool(false).int(0).ustring('/a');
    ok.int(15).bool(false).int(0).ustring('/b');
    stat(ok);
    ok.int(2).bool(false).int(0);
    ok.int(-1).bool(true).int(-1);
    const ops = [
      { type: OpCode.create, path: '/a', data: Buffer.alloc(0), flags: 0, acl: [] },
      { type: OpCode.create, path: '/b', data: Buffer.alloc(0), flags: 4, acl: [] },
      { type: OpCode.delete, path: '/c', version: -1 },
    ] as const;
    expect(readMultiResults(body(ok.frame()), ops)).toEqual([{ err: 0, path: '/a' }, { err: 0, path: '/b' }, { err: 0 }]);

    const failed = new JuteWriter().int(-1).bool(false).int(0).int(0).int(-1).bool(false).int(-110).int(-110).int(-1).bool(false).int(-2).int(-2).int(-1).bool(true).int(-1);
    expect(readMultiResults(body(failed.frame()), ops)).toEqual([{ err: 0 }, { err: -110 }, { err: -2 }]);
    expect(() => readMultiResults(body(new JuteWriter().int(99).bool(false).int(0).frame()), ops)).toThrow(JuteDecodeError);
    expect(() => readMultiResults(body(new JuteWriter().int(1).bool(false).int(0).frame()), ops)).toThrow(JuteDecodeError);
  });
});

describe('SetWatches after a reconnect', () => {
  it('splits the watches into frames under the batch size, every path once, in data/exist/child order', async () => {
    const { ServerWatches } = await import('../../../../lib/core/client/wire/server-watches.js');
    const watches = new ServerWatches();
    const name = (kind: string, i: number) => `/${kind}/${'x'.repeat(90)}-${i}`;
    for (let i = 0; i < 2000; i++) {
      watches.armed('data', name('d', i));
      watches.armed('exist', name('e', i));
      watches.armed('child', name('c', i));
    }
    watches.fired('changed', name('d', 0)); // consumed: not sent again
    watches.fired('deleted', name('c', 1));
    const frames = watches.setWatchesFrames(77n, (p) => `/root${p}`, 64 * 1024);
    expect(frames.length).toBeGreaterThan(3);
    const seen: Record<string, string[]> = { data: [], exist: [], child: [] };
    for (const frame of frames) {
      expect(frame.length).toBeLessThan(64 * 1024 + 200);
      const r = body(frame);
      expect([r.int(), r.int(), r.long()]).toEqual([-8, OpCode.setWatches, 77n]);
      for (const kind of ['data', 'exist', 'child']) seen[kind]!.push(...r.vector((x) => x.string())!);
      expect(r.remaining).toBe(0);
    }
    expect(seen.data).toHaveLength(1999);
    expect(seen.exist).toHaveLength(2000);
    expect(seen.child).toHaveLength(1999);
    expect(seen.data).not.toContain(`/root${name('d', 0)}`);
    expect(seen.child![0]).toBe(`/root${name('c', 0)}`);
    expect(new ServerWatches().setWatchesFrames(1n, (p) => p)).toEqual([]);
  });
});

describe('connect string, chroot and paths', () => {
  it('splits hosts from the chroot; a bare or trailing slash is no chroot', async () => {
    const { parseConnectString } = await import('../../../../lib/core/client/wire/hosts.js');
    expect(parseConnectString('a:1,b:2/app/root')).toEqual({ hosts: [{ host: 'a', port: 1 }, { host: 'b', port: 2 }], chroot: '/app/root' });
    expect(parseConnectString('a:1/')).toEqual({ hosts: [{ host: 'a', port: 1 }], chroot: '' });
    expect(parseConnectString('a:1/app/')).toEqual({ hosts: [{ host: 'a', port: 1 }], chroot: '/app' });
    expect(parseConnectString('[::1]:2181, b')).toEqual({ hosts: [{ host: '::1', port: 2181 }, { host: 'b', port: 2181 }], chroot: '' });
    expect(() => parseConnectString('/only/a/chroot')).toThrow();
  });

  it('prefixes paths on the way out and strips them on the way back; paths outside pass through', async () => {
    const { Chroot } = await import('../../../../lib/core/client/wire/hosts.js');
    const chroot = new Chroot('/app');
    expect([chroot.toServer('/'), chroot.toServer('/x/y')]).toEqual(['/app', '/app/x/y']);
    expect([chroot.fromServer('/app'), chroot.fromServer('/app/x'), chroot.fromServer('/apple'), chroot.fromServer('/zookeeper/quota')]).toEqual(['/', '/x', '/apple', '/zookeeper/quota']);
    const none = new Chroot('');
    expect([none.toServer('/x'), none.fromServer('/x')]).toEqual(['/x', '/x']);
  });

  it('refuses the paths the C client refuses', async () => {
    const { isValidPath } = await import('../../../../lib/core/client/wire/hosts.js');
    for (const path of ['/', '/a', '/a/b-c.d']) expect([path, isValidPath(path, false)]).toEqual([path, true]);
    for (const path of ['', 'a', '/a/', '//a', '/a//b', '/a/./b', '/a/..', '/a\0b']) expect([path, isValidPath(path, false)]).toEqual([path, false]);
    expect(isValidPath('/a/', true)).toBe(true); // a sequential name may end in the slash
    expect(isValidPath('/', true)).toBe(false);
  });

  it('goes round the hosts in one shuffled order, pausing after a whole round failed', async () => {
    const { HostList } = await import('../../../../lib/core/client/wire/hosts.js');
    const list = new HostList([{ host: '127.0.0.1', port: 1 }, { host: '127.0.0.1', port: 2 }, { host: '127.0.0.1', port: 3 }]);
    const ports = [];
    for (let i = 0; i < 6; i++) ports.push((await list.next()).port);
    expect(new Set(ports.slice(0, 3)).size).toBe(3);
    expect(ports.slice(3)).toEqual(ports.slice(0, 3));
    list.failed();
    expect(list.delayBeforeNextMs()).toBeLessThan(100);
    list.failed();
    list.failed();
    expect(list.delayBeforeNextMs()).toBeGreaterThanOrEqual(250);
    list.connected();
    expect(list.delayBeforeNextMs()).toBe(0);
  });
});
