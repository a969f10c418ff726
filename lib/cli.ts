#!/usr/bin/env node
/**
 * `nestjs-zk-lock locks [path]`: who holds which lock, from ZooKeeper itself (this library's
 * nodes and Curator's); `nestjs-zk-lock top [path]`: the same, refreshed (cli-top.ts);
 * `nestjs-zk-lock revoke <lock>`: ask its holder to let go. Framework-free: loads only the core.
 */
import { readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { ZkTlsOptions } from './core/connection/connection-options.js';
import { ReplyTooLargeError, SessionWaitAbortedError, ZkConnectError } from './core/errors.js';
import { inspectLock, inspectLocks, type ContenderInfo, type LockInfo } from './core/inspect.js';
import { withDeadlocks } from './core/deadlocks.js';
import type { Deadlock } from './core/errors.js';
import { ZkConnection } from './core/connection/zk-connection.js';
import { isZkCode, ZkCode, ZkError } from './core/client/zk-error.js';
import { isRevokeRequest } from './core/operations/holder-data.js';
import { resolveLockPath } from './core/paths.js';
import { revokeHolders } from './core/recipes/revocation.js';
import { processTerminal, runTop, type TopTerminal } from './cli-top.js';

const USAGE = `Usage: nestjs-zk-lock locks [path] [options]
       nestjs-zk-lock top [path] [options]
       nestjs-zk-lock revoke <lock> [options]

locks: lists the locks under <path> (default /locks, the library's base path) with who
holds each one (host, pid, app/instance from the lock node; Curator nodes show an IP) and
how many wait, then any deadlock: a cycle of waits across processes, each member with the
lock it holds and the one it waits for. Reads ZooKeeper only: it takes no lock and changes nothing.

top: the same locks, refreshed every --interval: holder, held for, waiters and the longest
wait, handoffs per second, the leader of each election; the longest wait first. q or Ctrl-C
quits. Reads only, as locks does (one listing per refresh: see docs/top.md for its cost).
Without a terminal on stdout it prints frame after frame until SIGINT or SIGTERM; --once
reads twice, --interval apart (for the handoff rate), and prints one frame.

revoke: asks the holder(s) of <lock> (a name under /locks, or an absolute path; a mutex,
read-write lock or leader election) to let go, and prints who was asked and, after
--wait, what each did: let go, ignored the request (its lock is not revocable: it wrote its
data back), or still holds (only a holder that made its lock revocable lets go, when its
work ends; one that did not never answers, and ZooKeeper cannot tell the two apart). Curator's
revocation: it never breaks a lock. With auth on the locks, pass the same credentials (--auth).

Options:
  --connect <host:port,...>   the ensemble (default: $ZK_CONNECT)
  --chroot </path>            the chroot the applications use
  --json                      print JSON (an array of locks) instead of a table
  --depth <n>                 levels below <path> to search (default 4)
  --permits <n>               semaphore permit count (ZooKeeper does not store it)
  --timeout <ms>              how long to try to connect (default 5000)
  --auth <user:password>      digest credentials (default: $ZK_AUTH)
  --tls-ca <file>             TLS to the ensemble's secureClientPort, trusting this CA (PEM)
  --tls-cert <file>           with --tls-key: a client certificate (PEM), for mutual TLS
  --tls-key <file>            the client certificate's private key (PEM)
  --max-reply-bytes <n>       the largest reply read (default 16 MiB; a listing of 100 000
                              waiters is about 6 MB)
  --wait <ms>                 revoke: how long to watch the holders answer (default 1000)
  --interval <ms>             top: time between refreshes (default 1000, at least 100)
  --once                      top: print one frame and exit
  --older-than <ms>           locks: mark holders whose node is older than this (SINCE*): after
                              an outage longer than the session timeout, a restarted ZooKeeper
                              keeps the nodes of sessions that died during it for one more
                              session timeout; a client cannot see whether a session is alive
  -h, --help                  this help
  -v, --version               the package version

Exit status: 0 done, 1 bad usage or a ZooKeeper error (NOAUTH: not allowed to revoke),
2 cannot connect (unreachable, credentials refused, chroot missing) or the connection was
lost, 3 revoke found nobody holding the lock, 4 every holder asked ignored the request (not
revocable).`;

const EXIT_USAGE = 1;
const EXIT_UNREACHABLE = 2;
const EXIT_NOBODY_ASKED = 3;
const EXIT_NOT_REVOCABLE = 4;

/** What top asks for (servers grant at most maxSessionTimeout, by default 20 × tickTime: 40 s). */
const TOP_SESSION_TIMEOUT_MS = 40_000;

class UsageError extends Error {}

interface Io {
  out: (text: string) => void;
  err: (text: string) => void;
}

/** Runs the CLI with `argv` (without node and the script); resolves with the exit code. */
export async function main(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  io: Io = defaultIo,
  terminal: TopTerminal = io === defaultIo ? processTerminal() : {},
): Promise<number> {
  let args: ReturnType<typeof parse>;
  try {
    args = parse(argv);
  } catch (error) {
    io.err(`nestjs-zk-lock: ${(error as Error).message}\n\n${USAGE}\n`);
    return EXIT_USAGE;
  }
  if (args.values.help) {
    io.out(`${USAGE}\n`);
    return 0;
  }
  if (args.values.version) {
    io.out(`${version()}\n`);
    return 0;
  }
  let options: Options;
  try {
    options = resolveOptions(args, env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.err(`nestjs-zk-lock: ${error.message}\n\n${USAGE}\n`);
    return EXIT_USAGE;
  }

  let connection: ZkConnection;
  try {
    connection = new ZkConnection({
      connectString: options.connect,
      chroot: options.chroot,
      connectTimeoutMs: options.timeoutMs,
      // top stays connected: a longer session spaces the connection's heartbeat syncs (one every 1/20 of it).
      sessionTimeoutMs: options.command === 'top' ? TOP_SESSION_TIMEOUT_MS : 10_000,
      auth: options.auth === undefined ? undefined : { credentials: options.auth },
      tls: options.tls,
      maxReplyBytes: options.maxReplyBytes,
    });
  } catch (error) {
    io.err(`nestjs-zk-lock: ${inFlagTerms((error as Error).message)}\n`);
    return EXIT_USAGE;
  }
  try {
    await connection.connect();
    if (options.command === 'top') {
      const read = (signal: AbortSignal) => collect(connection, options, signal);
      const state = () => connection.state;
      const { path: root, intervalMs, once, timeoutMs: sessionWaitMs } = options;
      return await runTop({ root, server: connection.description, intervalMs, once, sessionWaitMs, read, state }, io.out, terminal);
    }
    if (options.command === 'revoke') {
      const asked = await followUp(connection, await revokeHolders(connection, options.path), options.waitMs);
      io.out(options.json ? `${JSON.stringify(asked, null, 2)}\n` : formatAsked(asked, options.path, options.waitMs));
      if (asked.length === 0) return EXIT_NOBODY_ASKED;
      return asked.every((h) => h.outcome === 'ignored') ? EXIT_NOT_REVOCABLE : 0;
    }
    const locks = await withDeadlocks(connection, await collect(connection, options));
    const { olderThanMs } = options;
    io.out(options.json ? `${JSON.stringify(olderThanMs === undefined ? locks : markOlder(locks, olderThanMs), null, 2)}\n` : formatTable(locks, options.path, { olderThanMs }));
    return 0;
  } catch (error) {
    if (error instanceof ZkConnectError) {
      io.err(`nestjs-zk-lock: ${inFlagTerms(error.message)}\n`);
      return EXIT_UNREACHABLE;
    }
    if (error instanceof ZkError && error.codeName === 'NOAUTH') {
      io.err(`nestjs-zk-lock: not allowed (NOAUTH): the lock's nodes belong to other credentials; pass them with --auth\n`);
      return EXIT_USAGE;
    }
    if (error instanceof ReplyTooLargeError) {
      io.err(`nestjs-zk-lock: ${inFlagTerms(error.message)}\n`);
      return EXIT_USAGE;
    }
    if ((error instanceof ZkError && (error.isConnectionError || error.isSessionGone)) || error instanceof SessionWaitAbortedError) {
      io.err(`nestjs-zk-lock: lost the connection to ZooKeeper at ${connection.description}: ${error.message}\n`);
      return EXIT_UNREACHABLE;
    }
    io.err(`nestjs-zk-lock: ${(error as Error)?.message ?? String(error)}\n`);
    return EXIT_USAGE;
  } finally {
    await connection.close();
  }
}

/** The connection options this command sets from its flags, and those flags. */
const FLAG_OF_OPTION: Record<string, string> = {
  connectString: '--connect',
  chroot: '--chroot',
  connectTimeoutMs: '--timeout',
  maxReplyBytes: '--max-reply-bytes',
  auth: '--auth',
};

/** A message of the connection's, with the options it names (TLS advice too) said as this command's flags. */
function inFlagTerms(message: string): string {
  return message
    .replace(/"(connectString|chroot|connectTimeoutMs|maxReplyBytes|auth)"/g, (_, option: string) => `"${FLAG_OF_OPTION[option]}"`)
    .replace(/the connection option maxReplyBytes/g, '--max-reply-bytes')
    .replace(/\b(connectString|connectTimeoutMs|maxReplyBytes)\b/g, (option: string) => FLAG_OF_OPTION[option]!)
    .replace(/"?\btls\.(ca|cert|key)\b"?/g, '--tls-$1')
    .replace(/, or give that name as tls\.servername/g, '')
    .replace(/pass the `tls` option/g, 'pass --tls-ca (and --tls-cert, --tls-key)');
}

const defaultIo: Io = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
};

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    strict: true,
    options: {
      connect: { type: 'string' },
      chroot: { type: 'string' },
      json: { type: 'boolean' },
      depth: { type: 'string' },
      permits: { type: 'string' },
      timeout: { type: 'string' },
      auth: { type: 'string' },
      'tls-ca': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      'max-reply-bytes': { type: 'string' },
      wait: { type: 'string' },
      'older-than': { type: 'string' },
      interval: { type: 'string' },
      once: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      version: { type: 'boolean', short: 'v' },
    },
  });
}

interface Options {
  command: 'locks' | 'top' | 'revoke';
  path: string;
  connect: string;
  chroot: string | undefined;
  json: boolean;
  depth: number;
  permits: number | undefined;
  timeoutMs: number;
  auth: string | undefined;
  tls: ZkTlsOptions | undefined;
  maxReplyBytes: number | undefined;
  waitMs: number;
  olderThanMs: number | undefined;
  intervalMs: number;
  once: boolean;
}

function resolveOptions(args: ReturnType<typeof parse>, env: NodeJS.ProcessEnv): Options {
  const [command, given, ...extra] = args.positionals;
  if (command === undefined) throw new UsageError('no command given');
  if (command !== 'locks' && command !== 'top' && command !== 'revoke') throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  if (command === 'top' && args.values.json) throw new UsageError('top prints a table only: for JSON, use locks --json');
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`);
  if (command === 'revoke' && given === undefined) throw new UsageError('revoke needs the lock: a name under /locks or an absolute path');
  let path = given ?? '/locks';
  if (command === 'revoke') {
    try {
      path = resolveLockPath('/locks', path);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }
  const connect = args.values.connect ?? env.ZK_CONNECT;
  if (!connect) throw new UsageError('no ensemble given: pass --connect host:port[,host:port...] or set ZK_CONNECT');
  return {
    command,
    path,
    connect,
    chroot: args.values.chroot,
    json: args.values.json ?? false,
    depth: integer(args.values.depth, '--depth', 4, 0),
    permits: args.values.permits === undefined ? undefined : integer(args.values.permits, '--permits', 1, 1),
    timeoutMs: integer(args.values.timeout, '--timeout', 5000, 1),
    auth: args.values.auth ?? (env.ZK_AUTH || undefined),
    tls: tlsOptions(args.values['tls-ca'], args.values['tls-cert'], args.values['tls-key']),
    maxReplyBytes: args.values['max-reply-bytes'] === undefined ? undefined : integer(args.values['max-reply-bytes'], '--max-reply-bytes', 0, 1),
    waitMs: integer(args.values.wait, '--wait', 1000, 0),
    olderThanMs: args.values['older-than'] === undefined ? undefined : integer(args.values['older-than'], '--older-than', 0, 0),
    intervalMs: integer(args.values.interval, '--interval', 1000, 100),
    once: args.values.once ?? false,
  };
}

/** The TLS options from the --tls-* files, or undefined without any. */
function tlsOptions(ca: string | undefined, cert: string | undefined, key: string | undefined): ZkTlsOptions | undefined {
  if (ca === undefined && cert === undefined && key === undefined) return undefined;
  if ((cert === undefined) !== (key === undefined)) throw new UsageError('--tls-cert and --tls-key go together');
  const read = (file: string | undefined, flag: string) => {
    if (file === undefined) return undefined;
    try {
      return readFileSync(file);
    } catch (error) {
      throw new UsageError(`${flag}: cannot read ${JSON.stringify(file)} (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
    }
  };
  return { ca: read(ca, '--tls-ca'), cert: read(cert, '--tls-cert'), key: read(key, '--tls-key') };
}

function integer(text: string | undefined, flag: string, fallback: number, min: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < min) {
    throw new UsageError(`${flag} expects an integer ≥ ${min}, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** The lock at `path` itself if it is one (with the permits hint), else every lock below it. */
async function collect(connection: ZkConnection, options: Options, signal?: AbortSignal): Promise<LockInfo[]> {
  const found = await inspectLocks(connection, options.path, { maxDepth: options.depth, signal });
  if (options.permits === undefined) return found;
  // The hint applies to semaphores: read them again with it.
  return Promise.all(
    found.map(async (lock) => (lock.kind === 'semaphore' ? ((await inspectLock(connection, lock.path, { permits: options.permits, signal })) ?? lock) : lock)),
  );
}

function version(): string {
  try {
    return (createRequire(import.meta.url)('../package.json') as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/**
 * `text` with control characters (C0, DEL, C1) and bidirectional overrides escaped: anyone who can
 * create a node under the lock root chooses its holder data, and must not be able to move the
 * operator's cursor, clear the screen or reorder what the table shows.
 */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

/** `--older-than` in JSON: each holder gains `olderThan` (its node is older than the bound). */
function markOlder(locks: readonly LockInfo[], olderThanMs: number) {
  return locks.map((lock) => ({ ...lock, holders: lock.holders.map((h) => ({ ...h, olderThan: h.ageMs > olderThanMs })) }));
}

export interface FormatTableOptions {
  /** Marks holders whose node is older than this (SINCE*), with a note below the table. */
  olderThanMs?: number;
}

/** A readable table: one row per holder; a lock nobody holds yet (all waiting) gets one row. */
export function formatTable(locks: readonly LockInfo[], root: string, options: FormatTableOptions = {}): string {
  if (locks.length === 0) return `No locks held under ${printable(root)}.\n`;
  const { olderThanMs } = options;
  let marked = 0;
  const since = (holder: ContenderInfo) => {
    const older = olderThanMs !== undefined && holder.ageMs > olderThanMs;
    if (older) marked++;
    return formatAge(holder.ageMs) + (older ? '*' : '');
  };
  const header = ['LOCK', 'KIND', 'HOLDER', 'SESSION', 'SINCE', 'WAITING'];
  const rows: string[][] = [];
  for (const lock of locks) {
    const holders: (ContenderInfo | undefined)[] = lock.holders.length > 0 ? [...lock.holders] : [undefined];
    holders.forEach((holder, i) => {
      rows.push([
        i === 0 ? lock.path : '',
        kindOf(lock, holder),
        holder ? describeHolder(holder) : '(none)',
        holder ? `0x${holder.sessionId}` : '',
        holder ? since(holder) : '',
        i === 0 ? String(lock.waiting.length) : '',
      ]);
    });
  }
  for (const row of rows) row.forEach((cell, col) => (row[col] = printable(cell)));
  const widths = header.map((h, col) => Math.max(h.length, ...rows.map((r) => r[col]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, col) => (col === cells.length - 1 ? cell : cell.padEnd(widths[col]!)))
      .join('  ')
      .trimEnd();
  const table = [line(header), ...rows.map(line)].join('\n') + '\n' + formatDeadlocks(locks);
  if (olderThanMs === undefined) return table;
  const bound = formatAge(olderThanMs);
  return (
    table +
    (marked === 0
      ? `\nNo holder is older than ${bound}.\n`
      : `\n* held for more than ${bound} (${marked} holder${marked === 1 ? '' : 's'}). Its session may be dead: after an outage longer than the ` +
        'session timeout, a restarted ZooKeeper restores every session with a fresh timeout, so the nodes of sessions that died ' +
        'during the outage stay for one more session timeout. From here a live holder and such a node look alike (the session id ' +
        'and the node age are all a client sees); the server frees the node by itself.\n')
  );
}

/** The deadlocks among `locks`, each once: one line per member (what it holds, who, what it waits for). */
export function formatDeadlocks(locks: readonly LockInfo[]): string {
  const byKey = new Map<string, Deadlock>();
  for (const deadlock of locks.flatMap((lock) => lock.deadlocks ?? [])) byKey.set(deadlock.members.map((m) => m.waitingNode).join('|'), deadlock);
  if (byKey.size === 0) return '';
  const now = Date.now();
  const blocks = [...byKey.values()].map((deadlock, i) => {
    const lines = deadlock.members.map((m, j) => {
      const who = describeHolder(m);
      const waiting = formatAge(Math.max(0, now - m.waitingSince.getTime()));
      const mark = j === 0 ? '  (began last: the one to give up)' : '';
      return printable(`  ${m.lock} is held by ${who} (session 0x${m.sessionId}), waiting ${waiting} for ${m.waitsFor}`) + mark;
    });
    return `DEADLOCK ${i + 1} (${deadlock.members.length} waits in a cycle):\n${lines.join('\n')}`;
  });
  return `\n${blocks.join('\n')}\n`;
}

/** The KIND column: rw:read / rw:write, `semaphore 2/3` (in use / permits hint). */
export function kindOf(lock: LockInfo, holder: ContenderInfo | undefined): string {
  switch (lock.kind) {
    case 'read-write':
      return holder ? `rw:${holder.mode}` : 'rw';
    case 'semaphore':
      return `semaphore ${lock.holders.length}${lock.permits === undefined ? '' : `/${lock.permits}`}`;
    default:
      return lock.kind;
  }
}

/**
 * What a holder did about the request: `let-go` (its node is gone), `ignored` (its data is no
 * longer the marker: this library's non-revocable leader writes its id back), or `holding` (the
 * marker is still there: a revocable holder lets go when its work ends, one that is not never
 * does, and ZooKeeper cannot tell which).
 */
export type RevokeOutcome = 'let-go' | 'ignored' | 'holding';
export type AskedHolder = ContenderInfo & { outcome: RevokeOutcome };

/** Watches the asked holders for up to `waitMs` (until each has answered). */
async function followUp(connection: ZkConnection, asked: readonly ContenderInfo[], waitMs: number): Promise<AskedHolder[]> {
  const outcomes = asked.map((holder): AskedHolder => ({ ...holder, outcome: 'holding' }));
  if (outcomes.length === 0) return outcomes;
  const session = await connection.whenConnected();
  let deadline = Date.now() + waitMs;
  for (;;) {
    await Promise.all(
      outcomes.map(async (holder) => {
        if (holder.outcome !== 'holding') return;
        try {
          if (!isRevokeRequest((await session.getData(holder.path)).data)) holder.outcome = 'ignored';
        } catch (error) {
          if (isZkCode(error, ZkCode.NONODE)) holder.outcome = 'let-go';
          else if (!isZkCode(error, ZkCode.NOAUTH)) throw error;
          else deadline = 0; // not allowed to read it: we cannot tell
        }
      }),
    );
    if (outcomes.every((h) => h.outcome !== 'holding') || Date.now() >= deadline) return outcomes;
    await new Promise((resolve) => setTimeout(resolve, Math.min(100, Math.max(0, deadline - Date.now()))));
  }
}

/** What `revoke` prints: whom it asked, one line each, and what each did. */
export function formatAsked(asked: readonly (ContenderInfo & { outcome?: RevokeOutcome })[], path: string, waitMs = 0): string {
  if (asked.length === 0) return `Nobody holds ${printable(path)}: nobody was asked.\n`;
  const lines = asked.map((h) => printable(`  ${describeHolder(h)}  session 0x${h.sessionId}  node ${h.node}`) + (h.outcome ? `\n    ${describeOutcome(h.outcome, waitMs)}` : ''));
  const whom = asked.length === 1 ? 'its holder' : `its ${asked.length} holders`;
  return printable(`Asked ${whom} to let go (${path}):`) + '\n' + lines.join('\n') + '\n';
}

function describeOutcome(outcome: RevokeOutcome, waitMs: number): string {
  switch (outcome) {
    case 'let-go':
      return 'let go.';
    case 'ignored':
      return 'ignored the request: its lock is not revocable (it wrote its data back); it keeps the lock until it releases it.';
    default:
      return (
        `still holds it${waitMs > 0 ? ` after ${formatAge(waitMs)}` : ''}: it lets go only if it made its lock revocable ` +
        "(@WithLock({ revocable: true }), revocable: true, Curator's makeRevocable), when its work ends; if it did not, nothing happens."
      );
  }
}

/** `host:pid app/instance`; a Curator node has only its IP as host. */
export function describeHolder(contender: Pick<ContenderInfo, 'holder'>): string {
  const { host, pid, app, instance } = contender.holder;
  const where = `${host ?? '?'}${pid === undefined ? '' : `:${pid}`}`;
  const who = [app, instance].filter((x) => x !== undefined && x !== '').join('/');
  return who ? `${where} ${who}` : where;
}

/** 850ms, 42s, 3m07s, 5h02m, 2d03h. */
export function formatAge(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d${pad(Math.floor((s % 86_400) / 3600))}h`;
}

// Run when executed (also through npm's bin symlink), not when imported.
const invokedAs = process.argv[1];
if (invokedAs !== undefined && isThisFile(invokedAs)) {
  // A reader that went away (`| head`) is no crash: what was left to print is not wanted (top stops).
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
  });
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`nestjs-zk-lock: ${(error as Error)?.stack ?? String(error)}\n`);
      process.exitCode = EXIT_USAGE;
    },
  );
}

function isThisFile(invoked: string): boolean {
  try {
    return realpathSync(invoked) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}
