// Review: FrameReader skipping frames over its limit stays in sync whatever the chunking.
import { FrameReader } from '../../../lib/core/client/wire/frames.js';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}

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
