import { JuteDecodeError } from './jute.js';

/** ZooKeeper's default jute.maxbuffer (0xfffff): the largest frame the server reads, so the largest request we send. */
export const DEFAULT_MAX_FRAME_BYTES = 0xfffff;

/**
 * The default limit on a reply's size (larger ones fail their request, see FrameReader). A lock with
 * 100 000 waiters lists 100 000 Curator-style protected names `_c_<uuid>-lock-0000000001`: 3 + 36 +
 * 6 + 10 = 55 bytes each, 59 with jute's length prefix, 5 900 000 bytes plus the header and the
 * Stat (88); a read-write lock's `_c_<uuid>-__WRIT__0000000001` is 62, 6 200 088. 16 MiB holds
 * 2.7 times that (some 280 000 waiters).
 */
export const DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024;

/**
 * No frame is longer than this, whatever the limit: a length above it cannot be a reply (the stream
 * is out of sync). Far above any sane limit (a listing of 100 000 lock nodes is about 6 MB).
 */
export const FRAME_LENGTH_CAP = 1 << 30;

/**
 * Cuts a byte stream into ZooKeeper's frames (a 4-byte big-endian length, then that many bytes).
 * A negative length, one over FRAME_LENGTH_CAP, or one over `maxFrameBytes` without `oversized`
 * means the stream is out of sync: `push` throws JuteDecodeError and the reader stays broken (the
 * connection must go).
 *
 * With `oversized`, a frame over `maxFrameBytes` (up to the cap) is not buffered: its first
 * `headerBytes` are read and handed to `mark`, whose result takes the frame's place in what `push`
 * returns; the rest of it is counted off as it arrives and dropped.
 */
export class FrameReader<Oversized = never> {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** Bytes of an oversized frame still to drop. */
  private toSkip = 0;
  private broken: JuteDecodeError | undefined;

  constructor(
    private readonly maxFrameBytes = DEFAULT_MAX_FRAME_BYTES,
    private readonly oversized?: { headerBytes: number; mark: (header: Buffer, length: number) => Oversized },
  ) {}

  /** Bytes received but not yet part of a whole frame (skipped bytes are not kept). */
  get pending(): number {
    return this.buffered;
  }

  /** Bytes of an oversized frame not received yet. */
  get skipping(): number {
    return this.toSkip;
  }

  /** Adds received bytes; returns the whole frames they completed (bodies, without the length), in order. */
  push(chunk: Buffer): (Buffer | Oversized)[] {
    if (this.broken) throw this.broken;
    if (this.toSkip > 0) {
      const dropped = Math.min(this.toSkip, chunk.length);
      this.toSkip -= dropped;
      chunk = chunk.subarray(dropped);
    }
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    const frames: (Buffer | Oversized)[] = [];
    while (this.buffered >= 4) {
      const length = this.peekLength();
      if (length <= this.maxFrameBytes && length >= 0) {
        if (this.buffered < 4 + length) break;
        this.consume(4);
        frames.push(this.consume(length));
        continue;
      }
      const { oversized } = this;
      if (length < 0 || length > FRAME_LENGTH_CAP || !oversized || length < oversized.headerBytes) {
        const limit = oversized ? FRAME_LENGTH_CAP : this.maxFrameBytes;
        this.broken = new JuteDecodeError(`frame length ${length} outside 0..${limit}`);
        throw this.broken;
      }
      if (this.buffered < 4 + oversized.headerBytes) break;
      this.consume(4);
      frames.push(oversized.mark(Buffer.from(this.consume(oversized.headerBytes)), length));
      // The body: what is here already, then what arrives until it is all counted off.
      const here = Math.min(length - oversized.headerBytes, this.buffered);
      this.drop(here);
      this.toSkip = length - oversized.headerBytes - here;
    }
    return frames;
  }

  private peekLength(): number {
    const first = this.chunks[0]!;
    if (first.length >= 4) return first.readInt32BE(0);
    return this.gather(4).readInt32BE(0);
  }

  /** The first `count` bytes as one buffer (merging chunks as needed), not consumed. */
  private gather(count: number): Buffer {
    if (this.chunks[0]!.length < count) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!;
  }

  /** Discards the first `count` bytes without copying them. */
  private drop(count: number): void {
    this.buffered -= count;
    while (count > 0) {
      const first = this.chunks[0]!;
      if (first.length > count) {
        this.chunks[0] = first.subarray(count);
        return;
      }
      count -= first.length;
      this.chunks.shift();
    }
  }

  private consume(count: number): Buffer {
    if (count === 0) return Buffer.alloc(0);
    const first = this.gather(count);
    const taken = first.subarray(0, count);
    if (first.length === count) this.chunks.shift();
    else this.chunks[0] = first.subarray(count);
    this.buffered -= count;
    return taken;
  }
}
