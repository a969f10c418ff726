// ZooKeeper's records as the client sends and reads them (zookeeper.jute; field order matters).
import type { ZkAcl, ZkStat } from '../session.js';
import { isServerCode } from '../zk-error.js';
import { JuteDecodeError, JuteReader, JuteWriter } from './jute.js';

export const OpCode = {
  create: 1,
  delete: 2,
  exists: 3,
  getData: 4,
  setData: 5,
  getACL: 6,
  setACL: 7,
  sync: 9,
  ping: 11,
  getChildren2: 12,
  multi: 14,
  create2: 15,
  createContainer: 19,
  auth: 100,
  setWatches: 101,
  closeSession: -11,
  /** A multi result that failed. */
  error: -1,
} as const;

/** Xids the protocol reserves; requests count up from 1. */
export const Xid = { notification: -1, ping: -2, auth: -4, setWatches: -8 } as const;

/** CreateMode.CONTAINER's flag: sent with op createContainer. */
export const CONTAINER_FLAG = 4;
/** CreateMode's sequential flag (PERSISTENT_SEQUENTIAL 2, EPHEMERAL_SEQUENTIAL 3). */
const SEQUENTIAL_FLAG = 2;

const EMPTY_PASSWORD = Buffer.alloc(16);

export interface ConnectRequest {
  lastZxidSeen: bigint;
  timeoutMs: number;
  sessionId: bigint;
  password: Buffer;
}

export function encodeConnectRequest(request: ConnectRequest): Buffer {
  return new JuteWriter()
    .int(0) // protocolVersion
    .long(request.lastZxidSeen)
    .int(request.timeoutMs)
    .long(request.sessionId)
    .buffer(request.sessionId === 0n ? EMPTY_PASSWORD : request.password)
    .bool(false) // readOnly: we do not accept a read-only server
    .frame();
}

export interface ConnectResponse {
  timeoutMs: number;
  sessionId: bigint;
  password: Buffer;
}

export function decodeConnectResponse(frame: Buffer): ConnectResponse {
  const reader = new JuteReader(frame);
  reader.int(); // protocolVersion
  const timeoutMs = reader.int();
  const sessionId = reader.long();
  const password = reader.buffer() ?? Buffer.alloc(0);
  // An optional readOnly byte follows (servers before 3.4 leave it out): ignored, we never ask for read-only.
  if (reader.remaining === 1) reader.bool();
  reader.expectEnd('ConnectResponse');
  return { timeoutMs, sessionId, password };
}

export interface ReplyHeader {
  xid: number;
  zxid: bigint;
  err: number;
}

export function decodeReplyHeader(reader: JuteReader): ReplyHeader {
  return { xid: reader.int(), zxid: reader.long(), err: reader.int() };
}

/** A request frame: RequestHeader {xid, type}, then what `body` writes. */
export function encodeRequest(xid: number, type: number, body?: (writer: JuteWriter) => void): Buffer {
  const writer = new JuteWriter().int(xid).int(type);
  body?.(writer);
  return writer.frame();
}

/** Unsigned hex, as ZooKeeper's tools print session ids. */
export function hex64(value: bigint): string {
  return BigInt.asUintN(64, value).toString(16);
}

/** A time in ms since the epoch: one no Date can hold is not from a server's clock. */
function readTime(reader: JuteReader, what: string): Date {
  const time = new Date(Number(reader.long()));
  if (Number.isNaN(time.getTime())) throw new JuteDecodeError(`Stat: ${what} out of range`);
  return time;
}

export function decodeStat(reader: JuteReader): ZkStat {
  const czxid = Number(reader.long());
  const mzxid = Number(reader.long());
  const ctime = readTime(reader, 'ctime');
  const mtime = readTime(reader, 'mtime');
  const version = reader.int();
  const cversion = reader.int();
  const aversion = reader.int();
  const ephemeralOwner = hex64(reader.long());
  const dataLength = reader.int();
  const numChildren = reader.int();
  const pzxid = Number(reader.long());
  return { czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength, numChildren } as ZkStat;
}

export function writeAcl(writer: JuteWriter, acl: readonly ZkAcl[]): void {
  writer.vector(acl, (w, entry) => w.int(entry.perms).ustring(entry.scheme).ustring(entry.id));
}

export function readAcl(reader: JuteReader): ZkAcl[] {
  return (
    reader.vector((r) => {
      const perms = r.int();
      return { perms, scheme: r.string(), id: r.string() };
    }) ?? []
  );
}

export const WatcherEventType = { NodeCreated: 1, NodeDeleted: 2, NodeDataChanged: 3, NodeChildrenChanged: 4 } as const;

export interface WatcherEvent {
  type: number;
  state: number;
  path: string;
}

export function decodeWatcherEvent(reader: JuteReader): WatcherEvent {
  return { type: reader.int(), state: reader.int(), path: reader.string() };
}

/** One op of a multi request (creates and deletes: what the write batcher sends). */
export type MultiRequestOp =
  | { type: typeof OpCode.create; path: string; data: Buffer; flags: number; acl: readonly ZkAcl[] }
  | { type: typeof OpCode.delete; path: string; version: number };

export function writeCreate(writer: JuteWriter, path: string, data: Buffer, acl: readonly ZkAcl[], flags: number): void {
  writer.ustring(path).buffer(data);
  writeAcl(writer, acl);
  writer.int(flags);
}

/** The op a create goes as: createContainer for CONTAINER (the server refuses the flag on create). */
export function createOpFor(flags: number): number {
  return flags === CONTAINER_FLAG ? OpCode.createContainer : OpCode.create;
}

/**
 * The path a create's answer names (in the server's namespace), checked against the one asked
 * for: the same, or with the 10 characters of a sequence number after it (`%010d`). Anything else
 * would make us track a node that is not ours (and leave ours behind).
 */
export function readCreatedPath(reader: JuteReader, asked: string, flags: number): string {
  const path = reader.string();
  const suffix = path.slice(asked.length);
  const fits = path.startsWith(asked) && ((flags & SEQUENTIAL_FLAG) === 0 ? suffix === '' : /^-?[0-9]+$/.test(suffix) && suffix.length === 10);
  if (!fits) throw new JuteDecodeError(`create: created ${JSON.stringify(path)} for ${JSON.stringify(asked)}`);
  return path;
}

/** A create's answer: CreateResponse (the path), or for createContainer Create2Response (the path and its Stat). */
export function decodeCreateResponse(reader: JuteReader, asked: string, flags: number): string {
  const path = readCreatedPath(reader, asked, flags);
  if (createOpFor(flags) === OpCode.createContainer) decodeStat(reader);
  return path;
}

export function writeMulti(writer: JuteWriter, ops: readonly MultiRequestOp[]): void {
  for (const op of ops) {
    if (op.type === OpCode.create) {
      writer.int(createOpFor(op.flags)).bool(false).int(-1);
      writeCreate(writer, op.path, op.data, op.acl, op.flags);
    } else {
      writer.int(OpCode.delete).bool(false).int(-1).ustring(op.path).int(op.version);
    }
  }
  writer.int(-1).bool(true).int(-1);
}

/** One result of a multi: `err` 0 or the op's code; `path` for a create. */
export interface MultiResult {
  err: number;
  path?: string;
}

/**
 * Parses the results of a multi sent as `ops`: one per op, in order, each of its op's kind or an
 * error (a create's comes back as create or create2 by server version and op), then the end
 * marker. Anything else is not the answer to this request: JuteDecodeError.
 */
export function readMultiResults(reader: JuteReader, ops: readonly MultiRequestOp[]): MultiResult[] {
  const results: MultiResult[] = [];
  for (;;) {
    const type = reader.int();
    const done = reader.bool();
    const err = reader.int();
    if (done) {
      if (type !== -1 || err !== -1) throw new JuteDecodeError(`multi: end marker ${type}/${err}`);
      if (results.length !== ops.length) throw new JuteDecodeError(`multi: ${results.length} results for ${ops.length} ops`);
      return results;
    }
    const op = ops[results.length];
    if (!op) throw new JuteDecodeError(`multi: more results than the ${ops.length} ops`);
    if (type === OpCode.error) {
      const code = reader.int() || err;
      if (!isServerCode(code)) throw new JuteDecodeError(`multi: error code ${code} is not one ZooKeeper defines`);
      results.push({ err: code });
    } else if (op.type === OpCode.create && (type === OpCode.create || type === OpCode.create2 || type === OpCode.createContainer)) {
      results.push({ err: 0, path: readCreatedPath(reader, op.path, op.flags) });
      if (type !== OpCode.create) decodeStat(reader);
    } else if (op.type === OpCode.delete && type === OpCode.delete) {
      results.push({ err: 0 });
    } else {
      throw new JuteDecodeError(`multi: a result of type ${type} for op ${results.length} (type ${op.type})`);
    }
  }
}
