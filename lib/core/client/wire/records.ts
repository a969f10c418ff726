// ZooKeeper's records as the client sends and reads them (zookeeper.jute; field order matters).
import type { ZkAcl, ZkStat } from '../session.js';
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
  // An optional readOnly byte follows: ignored (we never ask for read-only).
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

export function decodeStat(reader: JuteReader): ZkStat {
  const czxid = Number(reader.long());
  const mzxid = Number(reader.long());
  const ctime = new Date(Number(reader.long()));
  const mtime = new Date(Number(reader.long()));
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

/** Parses each result by the type in its header (create2 comes back as 1 or 15 by server version). */
export function readMultiResults(reader: JuteReader): MultiResult[] {
  const results: MultiResult[] = [];
  for (;;) {
    const type = reader.int();
    const done = reader.bool();
    const err = reader.int();
    if (done) return results;
    switch (type) {
      case OpCode.create:
        results.push({ err: 0, path: reader.string() });
        break;
      case OpCode.create2:
      case OpCode.createContainer:
      case 21: // createTTL
        results.push({ err: 0, path: reader.string() });
        decodeStat(reader);
        break;
      case OpCode.delete:
      case 13: // check
        results.push({ err: 0 });
        break;
      case OpCode.setData:
        decodeStat(reader);
        results.push({ err: 0 });
        break;
      case OpCode.error:
        results.push({ err: reader.int() || err });
        break;
      default:
        throw new JuteDecodeError(`multi: unknown result type ${type}`);
    }
  }
}
