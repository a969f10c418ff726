// The few ZooKeeper records the model server reads and writes (zookeeper.jute), written here
// apart from the client's codec (lib/core/client/wire/): the simulation checks the client's
// timing, and a shared codec would hide a shared mistake.

export const Op = {
  create: 1, delete: 2, exists: 3, getData: 4, setData: 5, getACL: 6, setACL: 7, sync: 9, ping: 11,
  getChildren2: 12, check: 13, multi: 14, create2: 15, createContainer: 19, auth: 100, setWatches: 101, closeSession: -11, error: -1,
};
export const Err = { OK: 0, NONODE: -101, NODEEXISTS: -110, SESSIONEXPIRED: -112, UNIMPLEMENTED: -6 };
export const NOTIFICATION_XID = -1;
export const AUTH_XID = -4;
export const PING_XID = -2;
export const SET_WATCHES_XID = -8;

/** Reads big-endian jute fields from one frame body. */
export class Reader {
  /** @param {Buffer} bytes */
  constructor(bytes) {
    this.bytes = bytes;
    this.at = 0;
  }
  int() {
    const v = this.bytes.readInt32BE(this.at);
    this.at += 4;
    return v;
  }
  long() {
    const v = this.bytes.readBigInt64BE(this.at);
    this.at += 8;
    return v;
  }
  bool() {
    return this.bytes[this.at++] !== 0;
  }
  /** @returns {Buffer} */
  buffer() {
    const length = this.int();
    if (length < 0) return Buffer.alloc(0);
    const b = this.bytes.subarray(this.at, this.at + length);
    this.at += length;
    return b;
  }
  string() {
    return this.buffer().toString('utf8');
  }
  /** @returns {string[]} */
  strings() {
    const count = this.int();
    const items = [];
    for (let i = 0; i < count; i++) items.push(this.string());
    return items;
  }
  /** An ACL vector, skipped. */
  acl() {
    const count = this.int();
    for (let i = 0; i < count; i++) (this.int(), this.string(), this.string());
  }
}

/** Writes jute fields; frame() prefixes the length. */
export class Writer {
  /** @type {Buffer[]} */
  parts = [];
  /** @param {number} v */
  int(v) {
    const b = Buffer.alloc(4);
    b.writeInt32BE(v);
    this.parts.push(b);
    return this;
  }
  /** @param {bigint} v */
  long(v) {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(v);
    this.parts.push(b);
    return this;
  }
  /** @param {boolean} v */
  bool(v) {
    this.parts.push(Buffer.from([v ? 1 : 0]));
    return this;
  }
  /** @param {Buffer} v */
  buffer(v) {
    this.int(v.length);
    this.parts.push(v);
    return this;
  }
  /** @param {string} v */
  string(v) {
    return this.buffer(Buffer.from(v, 'utf8'));
  }
  /** A Stat. @param {import('./zookeeper-data.mjs').ZNode} n */
  stat(n) {
    const time = BigInt(n.ctime);
    return this.long(n.czxid).long(n.mzxid).long(time).long(time).int(n.version).int(n.cversion).int(0).long(n.owner).int(n.data.length).int(n.children.size).long(n.pzxid);
  }
  /** @param {string[]} items */
  strings(items) {
    this.int(items.length);
    for (const item of items) this.string(item);
    return this;
  }
  frame() {
    const body = Buffer.concat(this.parts);
    const length = Buffer.alloc(4);
    length.writeInt32BE(body.length);
    return Buffer.concat([length, body]);
  }
}
