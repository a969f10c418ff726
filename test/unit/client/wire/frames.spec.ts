import { DEFAULT_MAX_FRAME_BYTES, FRAME_LENGTH_CAP, FrameReader } from '../../../../lib/core/client/wire/frames.js';
import { JuteDecodeError, JuteReader, JuteWriter } from '../../../../lib/core/client/wire/jute.js';
import { decodeReplyHeader, decodeStat, decodeWatcherEvent, OpCode, readAcl, readMultiResults } from '../../../../lib/core/client/wire/records.js';
import { seededRun } from '../../../support/prng.js';

function frameOf(body: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeInt32BE(body.length);
  return Buffer.concat([length, body]);
}

describe('FrameReader', () => {
  it('cuts a stream into frames however it is split', () => {
    const bodies = [Buffer.from('a'), Buffer.alloc(0), Buffer.alloc(5000, 3), Buffer.from('xyz')];
    const stream = Buffer.concat(bodies.map(frameOf));
    for (const step of [1, 2, 3, 5, 7, 4096, stream.length]) {
      const reader = new FrameReader();
      const got: Buffer[] = [];
      for (let at = 0; at < stream.length; at += step) got.push(...reader.push(stream.subarray(at, at + step)));
      expect(got).toEqual(bodies);
      expect(reader.pending).toBe(0);
    }
  });

  it('keeps a truncated frame until the rest comes', () => {
    const reader = new FrameReader();
    const frame = frameOf(Buffer.from('hello'));
    expect(reader.push(frame.subarray(0, 6))).toEqual([]);
    expect(reader.pending).toBe(6);
    expect(reader.push(frame.subarray(6))).toEqual([Buffer.from('hello')]);
  });

  it('refuses a negative length and one over the maximum, and stays broken', () => {
    for (const length of [-1, -0x7fffffff, DEFAULT_MAX_FRAME_BYTES + 1, 0x7fffffff]) {
      const reader = new FrameReader();
      const header = Buffer.alloc(4);
      header.writeInt32BE(length);
      expect(() => reader.push(header)).toThrow(JuteDecodeError);
      expect(() => reader.push(frameOf(Buffer.from('ok')))).toThrow(JuteDecodeError);
    }
    expect(new FrameReader(10).push(frameOf(Buffer.alloc(10)))).toHaveLength(1);
    expect(() => new FrameReader(10).push(frameOf(Buffer.alloc(11)))).toThrow(JuteDecodeError);
  });
});

describe('FrameReader over its limit, skipping', () => {
  const LIMIT = 64;
  const skipper = () => new FrameReader(LIMIT, { headerBytes: 4, mark: (header, length) => ({ header: header.toString(), length }) });
  const big = Buffer.concat([Buffer.from('HEAD'), Buffer.alloc(10_000, 7)]);

  it('hands over the header of an oversized frame, in order with the frames around it, whatever the chunks', () => {
    const stream = Buffer.concat([frameOf(Buffer.from('before')), frameOf(big), frameOf(Buffer.from('after'))]);
    // 1 and 3 split the length and the header across chunks; 4096 carries the body over a few and
    // the frame after it in the same chunk as the body's end; the whole stream is one chunk.
    for (const step of [1, 3, 4096, stream.length]) {
      const reader = skipper();
      const got: unknown[] = [];
      let mostPending = 0;
      for (let at = 0; at < stream.length; at += step) {
        got.push(...reader.push(stream.subarray(at, at + step)));
        mostPending = Math.max(mostPending, reader.pending);
      }
      expect(got).toEqual([Buffer.from('before'), { header: 'HEAD', length: big.length }, Buffer.from('after')]);
      expect(reader.pending).toBe(0);
      expect(reader.skipping).toBe(0);
      // The body is counted off, never kept: at most one chunk is held.
      expect(mostPending).toBeLessThanOrEqual(Math.max(step, LIMIT + 4));
    }
  });

  it('counts a body off across many chunks and cuts the frame after it out of the chunk that ends it', () => {
    const reader = skipper();
    const frame = frameOf(big);
    expect(reader.push(frame.subarray(0, 6))).toEqual([]); // the length and half the header
    expect(reader.push(frame.subarray(6, 100))).toEqual([{ header: 'HEAD', length: big.length }]);
    expect(reader.skipping).toBe(big.length - 4 - 92);
    for (let at = 100; at < frame.length - 10; at += 1000) expect(reader.push(frame.subarray(at, Math.min(at + 1000, frame.length - 10)))).toEqual([]);
    expect(reader.skipping).toBe(10);
    expect(reader.pending).toBe(0);
    expect(reader.push(Buffer.concat([frame.subarray(frame.length - 10), frameOf(Buffer.from('next'))]))).toEqual([Buffer.from('next')]);
    expect(reader.skipping).toBe(0);
  });

  it('still refuses a negative length and one above the cap, and stays broken', () => {
    for (const length of [-1, -0x7fffffff, FRAME_LENGTH_CAP + 1, 0x7fffffff]) {
      const reader = skipper();
      const header = Buffer.alloc(4);
      header.writeInt32BE(length);
      expect(() => reader.push(Buffer.concat([header, Buffer.from('HEAD')]))).toThrow(JuteDecodeError);
      expect(() => reader.push(frameOf(Buffer.from('ok')))).toThrow(JuteDecodeError);
    }
    const atCap = Buffer.alloc(8);
    atCap.writeInt32BE(FRAME_LENGTH_CAP);
    atCap.write('HEAD', 4);
    expect(skipper().push(atCap)).toEqual([{ header: 'HEAD', length: FRAME_LENGTH_CAP }]);
  });
});

/** Everything the session decodes from a frame after the handshake, as it does. */
function decodeAsSession(frame: Buffer): void {
  const reader = new JuteReader(frame);
  const header = decodeReplyHeader(reader);
  switch (header.xid & 7) {
    case 0: decodeWatcherEvent(reader); break;
    case 1: decodeStat(reader); break;
    case 2: reader.buffer(); decodeStat(reader); break;
    case 3: reader.vector((r) => r.string()); decodeStat(reader); break;
    case 4: readAcl(reader); decodeStat(reader); break;
    case 5: readMultiResults(reader, [{ type: OpCode.create, path: '/x', data: Buffer.alloc(0), flags: 0, acl: [] }]); break;
    default: reader.string();
  }
}

describe('fuzz: random and mutated frames', () => {
  it('only ever fails with JuteDecodeError, and always returns', () => {
    const { random } = seededRun('FRAMES_FUZZ_SEED', 'frames fuzz');
    const valid = [
      new JuteWriter().int(0).long(5n).int(0).int(3).int(3).ustring('/some/path').frame(),
      new JuteWriter().int(1).long(5n).int(0).long(1n).long(2n).long(3n).long(4n).int(1).int(2).int(3).long(0n).int(4).int(5).long(6n).frame(),
      new JuteWriter().int(2).long(5n).int(0).buffer(Buffer.from('data')).long(1n).long(2n).long(3n).long(4n).int(1).int(2).int(3).long(0n).int(4).int(5).long(6n).frame(),
      new JuteWriter().int(3).long(5n).int(0).vector(['a', 'b'], (w, s) => w.ustring(s)).frame(),
      new JuteWriter().int(5).long(5n).int(0).int(1).bool(false).int(0).ustring('/x').int(-1).bool(true).int(-1).frame(),
    ];
    const started = Date.now();
    let frames = 0;
    let refused = 0;
    for (let round = 0; round < 3000; round++) {
      const reader = new FrameReader(1 << 16);
      const stream: Buffer[] = [];
      for (let i = 0; i < 5; i++) {
        if (random() < 0.3) {
          stream.push(Buffer.from(Array.from({ length: Math.floor(random() * 64) }, () => Math.floor(random() * 256))));
        } else {
          const mutated = Buffer.from(valid[Math.floor(random() * valid.length)]!);
          for (let flips = Math.floor(random() * 4); flips > 0; flips--) mutated[Math.floor(random() * mutated.length)] = Math.floor(random() * 256);
          stream.push(random() < 0.2 ? mutated.subarray(0, Math.floor(random() * mutated.length)) : mutated);
        }
      }
      const bytes = Buffer.concat(stream);
      try {
        for (let at = 0; at < bytes.length; ) {
          const step = 1 + Math.floor(random() * 40);
          for (const frame of reader.push(bytes.subarray(at, at + step))) {
            frames++;
            try {
              decodeAsSession(frame);
            } catch (error) {
              if (!(error instanceof JuteDecodeError)) throw error;
              refused++;
            }
          }
          at += step;
        }
      } catch (error) {
        if (!(error instanceof JuteDecodeError)) throw error;
        refused++;
      }
    }
    expect(frames).toBeGreaterThan(1000);
    expect(refused).toBeGreaterThan(100);
    expect(Date.now() - started).toBeLessThan(30_000);
  });
});

describe('frames over the limit', () => {
  /** A small LCG: the chunkings replay by seed. */
  const rng = (seed: number): (() => number) => {
    let s = seed >>> 0;
    return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32);
  };

  it('frames over the limit are skipped and every other frame comes out whole, in order, for any chunking', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const random = rng(seed);
      const limit = 64;
      const frames: Buffer[] = [];
      for (let i = 0; i < 30; i++) {
        const length = random() < 0.3 ? 16 + Math.floor(random() * 400) : Math.floor(random() * 65);
        const body = Buffer.alloc(length, i & 0xff);
        if (length >= 4) body.writeInt32BE(i, 0);
        frames.push(body);
      }
      const stream = Buffer.concat(frames.flatMap((f) => [Buffer.from([0, 0, (f.length >> 8) & 0xff, f.length & 0xff]), f]));
      const reader = new FrameReader<{ header: Buffer; length: number }>(limit, { headerBytes: 16, mark: (header, length) => ({ header, length }) });
      const out: (Buffer | { header: Buffer; length: number })[] = [];
      for (let at = 0; at < stream.length; ) {
        const size = 1 + Math.floor(random() * 90);
        out.push(...reader.push(stream.subarray(at, at + size)));
        at += size;
      }
      expect(out.length).toBe(frames.length);
      out.forEach((o, i) => {
        const f = frames[i]!;
        if (Buffer.isBuffer(o)) expect(o.equals(f)).toBe(true);
        else expect({ length: o.length, header: o.header.equals(f.subarray(0, 16)) }).toEqual({ length: f.length, header: true });
      });
      expect(reader.pending + reader.skipping).toBe(0);
    }
  });
});
