import type { ConnectionOptions as NodeTlsOptions } from 'node:tls';
import { InvalidOptionError } from '../errors.js';
import { describe, positiveInteger } from '../validation.js';
import { validateZkPath } from '../paths.js';
import { validateTlsOptions } from './tls-options.js';
import { DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_REPLY_BYTES, FRAME_LENGTH_CAP } from '../client/wire/frames.js';

/** Digest (or other scheme) credentials, sent with addAuth on every session. */
export interface ZkAuth {
  /** Default `digest`. */
  scheme?: string;
  /** For digest: `user:password`. Never logged, never put in an error. */
  credentials: string;
}

/** @publicApi */
export interface ZkConnectionOptions {
  /** `host:port` pairs separated by commas, e.g. `zk1:2181,zk2:2181,zk3:2181`. */
  connectString: string;
  /** Root under which every path of this client lives, e.g. `/apps/billing` (must exist). */
  chroot?: string;
  /** Requested session timeout; the server clamps it to its min/max. Default 15000. */
  sessionTimeoutMs?: number;
  /** How long `connect()` (and Nest bootstrap) waits for the first session. Default 15000. */
  connectTimeoutMs?: number;
  /** Credentials added to every session. */
  auth?: ZkAuth | ZkAuth[];
  /**
   * The ensemble's `tickTime`, or more. The lost signal allows for a follower's report of the
   * session to the leader, every tickTime/2 (see docs/safety.md, Lost locks). Default 2000, ZooKeeper's.
   */
  serverTickTimeMs?: number;
  /**
   * TLS to ZooKeeper's `secureClientPort`: `ca`, and `cert` / `key` where the server wants client
   * certificates. The server's certificate is checked against the host name in `connectString`.
   */
  tls?: ZkTlsOptions;
  /**
   * Which ZooKeeper client speaks to the ensemble: `typescript` (default, this package's own) or
   * `addon`, the C client of the optional `zookeeper` package (see docs/zookeeper-client.md).
   */
  client?: ZkClientKind;
  /**
   * The largest reply the TypeScript client reads, in bytes. A larger one (a lock's queue listing
   * with hundreds of thousands of waiters) is skipped and fails only its request, with
   * `ReplyTooLargeError`; the connection and the session live on. Default 16 MiB (a lock with
   * 100 000 waiters lists about 6 MB); from 0xfffff (ZooKeeper's default jute.maxbuffer) to 1 GiB.
   * Not with `client: 'addon'` (the C client reads replies of any size).
   */
  maxReplyBytes?: number;
}

/** @publicApi */
export type ZkClientKind = 'typescript' | 'addon';
export const CLIENT_KINDS: readonly ZkClientKind[] = ['typescript', 'addon'];

/** Node's TLS options for the link to ZooKeeper (`host`, `port` and `socket` come from the connect string). */
export type ZkTlsOptions = Omit<NodeTlsOptions, 'host' | 'port' | 'path' | 'socket'>;

export interface ResolvedConnectionOptions {
  connectString: string;
  hosts: string[];
  chroot: string | undefined;
  sessionTimeoutMs: number;
  connectTimeoutMs: number;
  auth: Required<ZkAuth>[];
  serverTickTimeMs: number;
  tls: ZkTlsOptions | undefined;
  client: ZkClientKind;
  maxReplyBytes: number;
}

export const CONNECTION_DEFAULTS = { sessionTimeoutMs: 15_000, connectTimeoutMs: 15_000, serverTickTimeMs: 2000 } as const;

const HOST_PORT = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;

/** Validates every option at once and names the first bad one. */
export function resolveConnectionOptions(options: ZkConnectionOptions): ResolvedConnectionOptions {
  if (options === null || typeof options !== 'object') {
    throw new InvalidOptionError('options', 'expected an object');
  }
  const { connectString } = options;
  if (typeof connectString !== 'string' || connectString.trim() === '') {
    throw new InvalidOptionError('connectString', 'expected a non-empty "host:port[,host:port...]" string');
  }
  // A URL's scheme (zk://, as some tools write it) is not part of a connect string.
  const scheme = /^\s*([a-z][a-z0-9+.-]*):\/\//i.exec(connectString);
  if (scheme) {
    throw new InvalidOptionError('connectString', `drop the "${scheme[1]}://": a connect string is "host:port[,host:port...]", with no scheme`);
  }
  // The C client also accepts a chroot suffix on the connect string; we keep one way: the option.
  const slash = connectString.indexOf('/');
  if (slash >= 0) {
    throw new InvalidOptionError('connectString', 'must not contain a path: pass the chroot as the "chroot" option');
  }
  const hosts = connectString.split(',').map((h) => h.trim());
  for (const host of hosts) {
    const match = HOST_PORT.exec(host);
    if (!match || Number(match[2]) < 1 || Number(match[2]) > 65535) {
      throw new InvalidOptionError('connectString', `"${host}" is not host:port`);
    }
  }

  let chroot: string | undefined;
  if (options.chroot !== undefined && options.chroot !== '/') {
    if (typeof options.chroot !== 'string' || !options.chroot.startsWith('/')) {
      throw new InvalidOptionError('chroot', 'must be an absolute ZooKeeper path starting with "/"');
    }
    const problem = validateZkPath(options.chroot);
    if (problem) throw new InvalidOptionError('chroot', problem);
    chroot = options.chroot;
  }

  const sessionTimeoutMs = positiveInteger(options.sessionTimeoutMs, 'sessionTimeoutMs', CONNECTION_DEFAULTS.sessionTimeoutMs);
  const connectTimeoutMs = positiveInteger(options.connectTimeoutMs, 'connectTimeoutMs', CONNECTION_DEFAULTS.connectTimeoutMs);
  const serverTickTimeMs = positiveInteger(options.serverTickTimeMs, 'serverTickTimeMs', CONNECTION_DEFAULTS.serverTickTimeMs);

  const authList = options.auth === undefined ? [] : Array.isArray(options.auth) ? options.auth : [options.auth];
  const auth = authList.map((a, i) => {
    const name = `auth${Array.isArray(options.auth) ? `[${i}]` : ''}`;
    if (a === null || typeof a !== 'object') throw new InvalidOptionError(name, 'expected { scheme?, credentials }');
    const scheme = a.scheme ?? 'digest';
    if (typeof scheme !== 'string' || !/^[a-z0-9]+$/i.test(scheme)) {
      throw new InvalidOptionError(`${name}.scheme`, 'expected a scheme name such as "digest"');
    }
    if (typeof a.credentials !== 'string' || a.credentials === '') {
      throw new InvalidOptionError(`${name}.credentials`, 'expected a non-empty string');
    }
    if (scheme === 'digest' && !a.credentials.includes(':')) {
      throw new InvalidOptionError(`${name}.credentials`, 'digest credentials must look like "user:password"');
    }
    return { scheme, credentials: a.credentials };
  });

  const client = options.client ?? 'typescript';
  if (!CLIENT_KINDS.includes(client)) {
    throw new InvalidOptionError('client', `expected ${CLIENT_KINDS.map((k) => `"${k}"`).join(' or ')}, got ${describe(client)}`);
  }
  const tls = options.tls;
  if (tls !== undefined && (tls === null || typeof tls !== 'object' || Array.isArray(tls))) {
    throw new InvalidOptionError('tls', `expected an object of TLS options ({ ca, cert, key, ... }), got ${describe(tls)}`);
  }
  if (tls !== undefined && client === 'addon') {
    throw new InvalidOptionError('tls', 'the zookeeper addon (client: "addon") has no TLS; use the default client');
  }
  if (tls !== undefined) validateTlsOptions(tls);
  // Not below what the server reads: every reply to a write we send fits in it.
  const maxReplyBytes = positiveInteger(options.maxReplyBytes, 'maxReplyBytes', DEFAULT_MAX_REPLY_BYTES, DEFAULT_MAX_FRAME_BYTES, FRAME_LENGTH_CAP);
  if (options.maxReplyBytes !== undefined && client === 'addon') {
    throw new InvalidOptionError('maxReplyBytes', 'the zookeeper addon (client: "addon") reads replies of any size and cannot apply a limit; use the default client');
  }

  return {
    connectString: hosts.join(','),
    hosts,
    chroot,
    sessionTimeoutMs,
    connectTimeoutMs,
    auth,
    serverTickTimeMs,
    tls,
    client,
    maxReplyBytes,
  };
}
