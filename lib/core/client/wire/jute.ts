// Jute, ZooKeeper's binary record encoding: big-endian ints and longs, length-prefixed strings,
// buffers and vectors (length -1 = null). The reader checks every length against what is left of
// its frame, so bytes from the network can only fail with JuteDecodeError.

/** Bytes from the network that do not decode: the stream is out of sync, drop the connection. */
export class JuteDecodeError extends Error {
  override readonly name = 'JuteDecodeError';
}

export class JuteReader {
  private offset: number;

  constructor(
    private readonly bytes: Buffer,
    start = 0,
    private readonly end = bytes.length,
  ) {
    this.offset = start;
  }

  get remaining(): number {
    return this.end - this.offset;
  }

  /** The record ends here: a correct server sends nothing after it (bytes left mean it was read as the wrong record). */
  expectEnd(what: string): void {
    if (this.remaining !== 0) throw new JuteDecodeError(`${what}: ${this.remaining} bytes left over`);
  }

  private take(count: number, what: string): number {
    if (count > this.end - this.offset) throw new JuteDecodeError(`${what}: needs ${count} bytes, ${this.end - this.offset} left`);
    const at = this.offset;
    this.offset += count;
    return at;
  }

  int(): number {
    return this.bytes.readInt32BE(this.take(4, 'int'));
  }

  long(): bigint {
    return this.bytes.readBigInt64BE(this.take(8, 'long'));
  }

  bool(): boolean {
    return this.bytes[this.take(1, 'boolean')] !== 0;
  }

  /** A length-prefixed field: -1 is null, any other negative length is garbage. */
  private length(what: string): number {
    const length = this.int();
    if (length < -1) throw new JuteDecodeError(`${what}: negative length ${length}`);
    return length;
  }

  buffer(): Buffer | null {
    const length = this.length('buffer');
    if (length === -1) return null;
    const at = this.take(length, 'buffer');
    // A copy: the frame's memory is reused for nothing else, but callers may keep the data long.
    return Buffer.from(this.bytes.subarray(at, at + length));
  }

  ustring(): string | null {
    const length = this.length('ustring');
    if (length === -1) return null;
    const at = this.take(length, 'ustring');
    return this.bytes.toString('utf8', at, at + length);
  }

  /** A string that must be there (a path, a name): null is garbage. */
  string(): string {
    const value = this.ustring();
    if (value === null) throw new JuteDecodeError('ustring: null where a value is required');
    return value;
  }

  vector<T>(item: (reader: JuteReader) => T): T[] | null {
    const count = this.length('vector');
    if (count === -1) return null;
    // Each item takes at least one byte: a count past what is left cannot be real (and must not allocate).
    if (count > this.remaining) throw new JuteDecodeError(`vector: ${count} items in ${this.remaining} bytes`);
    const items: T[] = [];
    for (let i = 0; i < count; i++) items.push(item(this));
    return items;
  }
}

/** Builds one outgoing frame: the 4-byte length first, filled in by `frame()`. */
export class JuteWriter {
  private bytes = Buffer.allocUnsafe(256);
  private offset = 4;

  /** Reserves `count` bytes (growing the buffer) and returns where they start: call it before touching `bytes`. */
  private room(count: number): number {
    if (this.offset + count > this.bytes.length) {
      const grown = Buffer.allocUnsafe(Math.max(this.bytes.length * 2, this.offset + count));
      this.bytes.copy(grown, 0, 0, this.offset);
      this.bytes = grown;
    }
    const at = this.offset;
    this.offset += count;
    return at;
  }

  int(value: number): this {
    const at = this.room(4);
    this.bytes.writeInt32BE(value, at);
    return this;
  }

  long(value: bigint): this {
    const at = this.room(8);
    this.bytes.writeBigInt64BE(BigInt.asIntN(64, value), at);
    return this;
  }

  bool(value: boolean): this {
    const at = this.room(1);
    this.bytes[at] = value ? 1 : 0;
    return this;
  }

  buffer(value: Buffer | null): this {
    if (value === null) return this.int(-1);
    this.int(value.length);
    const at = this.room(value.length);
    value.copy(this.bytes, at);
    return this;
  }

  ustring(value: string | null): this {
    if (value === null) return this.int(-1);
    const length = Buffer.byteLength(value);
    this.int(length);
    const at = this.room(length);
    this.bytes.write(value, at, length, 'utf8');
    return this;
  }

  vector<T>(items: readonly T[] | null, item: (writer: this, value: T) => void): this {
    if (items === null) return this.int(-1);
    this.int(items.length);
    for (const value of items) item(this, value);
    return this;
  }

  /** The frame: length prefix + body. */
  frame(): Buffer {
    this.bytes.writeInt32BE(this.offset - 4, 0);
    return this.bytes.subarray(0, this.offset);
  }
}
