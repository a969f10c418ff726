import { JuteDecodeError } from './jute.js';

/** ZooKeeper's default jute.maxbuffer (0xfffff): the largest frame either side accepts. */
export const DEFAULT_MAX_FRAME_BYTES = 0xfffff;

/**
 * Cuts a byte stream into ZooKeeper's frames (a 4-byte big-endian length, then that many bytes).
 * A negative length or one over the limit means the stream is out of sync: `push` throws
 * JuteDecodeError and the reader stays broken (the connection must go).
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private broken: JuteDecodeError | undefined;

  constructor(private readonly maxFrameBytes = DEFAULT_MAX_FRAME_BYTES) {}

  /** Bytes received but not yet part of a whole frame. */
  get pending(): number {
    return this.buffered;
  }

  /** Adds received bytes; returns the whole frames they completed (bodies, without the length). */
  push(chunk: Buffer): Buffer[] {
    if (this.broken) throw this.broken;
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    const frames: Buffer[] = [];
    while (this.buffered >= 4) {
      const length = this.peekLength();
      if (length < 0 || length > this.maxFrameBytes) {
        this.broken = new JuteDecodeError(`frame length ${length} outside 0..${this.maxFrameBytes}`);
        throw this.broken;
      }
      if (this.buffered < 4 + length) break;
      this.consume(4);
      frames.push(this.consume(length));
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
