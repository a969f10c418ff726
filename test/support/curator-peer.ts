// Test helper: Apache Curator (Java) as a scripted peer beside our library, for interop tests.
// Compiles test/interop/java/CuratorPeer.java with javac against Debian's Curator jars
// (libcurator-{recipes,framework,client}-java, plus zookeeper/guava/slf4j from the zookeeper
// package) and talks to it over stdio; the protocol is described at the top of that file.
// Only node builtins are used.
import { execFile, spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CURATOR_PEER_SOURCE = join(REPO_ROOT, 'test', 'interop', 'java', 'CuratorPeer.java');
/** The Debian packages that provide the Curator jars (the rest comes with `zookeeper`). */
export const CURATOR_APT_PACKAGES = ['libcurator-recipes-java', 'libcurator-framework-java', 'libcurator-client-java'] as const;

/** Where the jars are looked for; CURATOR_JAR_DIR overrides. CURATOR_CLASSPATH replaces the lookup. */
const JAR_DIR = process.env.CURATOR_JAR_DIR ?? '/usr/share/java';
const ARTIFACTS = [
  'curator-recipes',
  'curator-framework',
  'curator-client',
  'zookeeper',
  'zookeeper-jute',
  'guava',
  'slf4j-api',
  'slf4j-simple',
] as const;

const JAVA = process.env.JAVA ?? 'java';
const JAVAC = process.env.JAVAC ?? 'javac';

let javaChecked: boolean | undefined;

/** True when both `java` and `javac` run (JAVA / JAVAC override the commands). */
export function javaAvailable(): boolean {
  javaChecked ??= [JAVA, JAVAC].every((cmd) => {
    const result = spawnSync(cmd, ['-version'], { stdio: 'ignore', timeout: 30_000 });
    return result.error === undefined && result.status === 0;
  });
  return javaChecked;
}

/** One jar per artifact: `<name>.jar` (Debian's unversioned link) or else the highest `<name>-<version>.jar`. */
function findJar(files: readonly string[], artifact: string): string | undefined {
  if (files.includes(`${artifact}.jar`)) return join(JAR_DIR, `${artifact}.jar`);
  const pattern = new RegExp(`^${artifact.replace(/[-.]/g, '\\$&')}-(\\d[\\w.-]*)\\.jar$`);
  const versioned = files
    .map((f) => ({ f, version: pattern.exec(f)?.[1] }))
    .filter((x): x is { f: string; version: string } => x.version !== undefined)
    .sort((a, b) => a.version.localeCompare(b.version, 'en', { numeric: true }));
  const best = versioned.at(-1);
  return best ? join(JAR_DIR, best.f) : undefined;
}

let classpathCache: { classpath?: string; missing: string[] } | undefined;

function lookUpClasspath(): { classpath?: string; missing: string[] } {
  if (classpathCache) return classpathCache;
  if (process.env.CURATOR_CLASSPATH) {
    classpathCache = { classpath: process.env.CURATOR_CLASSPATH, missing: [] };
    return classpathCache;
  }
  let files: string[] = [];
  try {
    files = readdirSync(JAR_DIR);
  } catch {
    // no jar directory: everything is missing
  }
  const jars = ARTIFACTS.map((a) => [a, findJar(files, a)] as const);
  const missing = jars.filter(([, jar]) => jar === undefined).map(([a]) => a);
  classpathCache = missing.length === 0 ? { classpath: jars.map(([, jar]) => jar).join(delimiter), missing } : { missing };
  return classpathCache;
}

/** The classpath for Curator 5 + ZooKeeper client + slf4j, or undefined when a jar is missing. */
export function curatorClasspath(): string | undefined {
  return lookUpClasspath().classpath;
}

export function curatorJarsAvailable(): boolean {
  return curatorClasspath() !== undefined;
}

/** Why the Curator peer cannot run here (for a skip message), or undefined when it can. */
export function curatorPeerUnavailableReason(): string | undefined {
  if (!javaAvailable()) return `java and javac are needed (a JDK, e.g. apt-get install default-jdk-headless)`;
  const { missing } = lookUpClasspath();
  if (missing.length > 0) {
    return `jars missing in ${JAR_DIR}: ${missing.join(', ')} (apt-get install --no-install-recommends ${CURATOR_APT_PACKAGES.join(' ')} zookeeper)`;
  }
  return undefined;
}

let compiled: Promise<string> | undefined;

/**
 * Compiles CuratorPeer.java once per process and returns the classes directory. The output goes
 * to a directory in the temp dir named by a hash of the source and classpath, so later runs (and
 * parallel Jest workers) reuse it; a compile lands there by an atomic rename.
 */
export function compileCuratorPeer(): Promise<string> {
  compiled ??= compile();
  compiled.catch(() => (compiled = undefined)); // let a later call retry
  return compiled;
}

async function compile(): Promise<string> {
  const reason = curatorPeerUnavailableReason();
  if (reason) throw new Error(`Cannot compile CuratorPeer: ${reason}`);
  const classpath = curatorClasspath()!;
  const source = readFileSync(CURATOR_PEER_SOURCE);
  const hash = createHash('sha256').update(source).update('\0').update(classpath).digest('hex').slice(0, 16);
  const target = join(tmpdir(), `nestjs-zk-lock-curator-peer.${hash}`);
  if (existsSync(join(target, 'CuratorPeer.class'))) return target;
  const staging = await mkdtemp(join(tmpdir(), 'nestjs-zk-lock-curator-peer.build.'));
  try {
    await new Promise<void>((resolve, reject) => {
      execFile(
        JAVAC,
        ['-Xlint:-path', '-encoding', 'UTF-8', '-cp', classpath, '-d', staging, CURATOR_PEER_SOURCE],
        { timeout: 180_000, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout, stderr) =>
          error ? reject(new Error(`javac ${CURATOR_PEER_SOURCE} failed: ${error.message}\n${stdout}${stderr}`)) : resolve(),
      );
    });
    try {
      await rename(staging, target);
    } catch (error) {
      // Another process renamed its build there first: use that one.
      if (!existsSync(join(target, 'CuratorPeer.class'))) throw error;
    }
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  return target;
}

export interface CuratorPeerOptions {
  /** How long to wait for the JVM to start and connect (default 60 s). */
  readyTimeoutMs?: number;
  /** Extra JVM options, e.g. ['-Dorg.slf4j.simpleLogger.defaultLogLevel=debug']. */
  jvmArgs?: string[];
}

export interface CuratorStat {
  /** Owning session id in hex, "0" for persistent and container nodes. */
  ephemeralOwner: string;
  dataLength: number;
  /** The data as UTF-8 text (Curator's lock nodes hold the client's IP). */
  data: string;
}

/** A connection-state change of the Curator client (CONNECTED, SUSPENDED, RECONNECTED, LOST, READ_ONLY). */
export interface CuratorEvent {
  event: 'state';
  value: string;
}

export class CuratorPeerError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CuratorPeerError';
  }
}

interface Pending {
  command: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout | undefined;
}

const CLOSE_FDS_AND_EXEC = `for fd in /proc/$$/fd/*; do fd=\${fd##*/}
  if [ "$fd" -gt 2 ] 2>/dev/null && [ -L "/proc/$$/fd/$fd" ]; then eval "exec $fd>&-"; fi
done
exec "$@"`;

/** Default time for a reply to a non-blocking command. */
const QUICK_REPLY_MS = 30_000;
/** Added to an acquire's own timeout before its reply counts as lost. */
const REPLY_GRACE_MS = 30_000;
const STDERR_KEEP = 64 * 1024;

const live = new Set<ChildProcessWithoutNullStreams>();
let exitHookInstalled = false;

/**
 * A running CuratorPeer JVM with one CuratorFramework client (one ZooKeeper session). Locks are
 * named by ids; each id's commands run in order on their own Java thread, so a blocking acquire
 * on one id leaves the others free (e.g. Curator waits while our library releases).
 */
export class CuratorPeer {
  private nextReq = 1;
  private readonly pending = new Map<number, Pending>();
  private stderrText = '';
  private exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly exitPromise: Promise<void>;
  private readonly eventLog: CuratorEvent[] = [];
  private readonly eventListeners = new Set<(event: CuratorEvent) => void>();
  /** Session id (hex) of the Curator client, as printed on `ready`. */
  sessionIdAtStart = '';

  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    this.exitPromise = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exited = { code, signal };
        live.delete(child);
        this.failAll(new CuratorPeerError(`CuratorPeer exited (${signal ?? `code ${code}`})${this.stderrTail()}`));
        resolve();
      });
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      this.stderrText = (this.stderrText + chunk).slice(-STDERR_KEEP);
    });
    child.stdin.on('error', () => undefined); // EPIPE after the JVM died: reported through 'exit'
  }

  /** Compiles (once) and starts a peer connected to `connectString`; resolves once Curator is connected. */
  static async start(connectString: string, options: CuratorPeerOptions = {}): Promise<CuratorPeer> {
    const classes = await compileCuratorPeer();
    const args = [
      '-XX:+UseSerialGC',
      '-XX:TieredStopAtLevel=1',
      '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
      // ZooKeeper's client logs a stack trace at WARN on every normal close.
      '-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error',
      ...(options.jvmArgs ?? []),
      '-cp',
      [classes, curatorClasspath()!].join(delimiter),
      'CuratorPeer',
      connectString,
    ];
    // Through bash, which closes every inherited fd above 2 and then execs java (so the pid is the
    // JVM's; dash cannot close fds above 9). The addon patch builds the C client's sockets
    // close-on-exec; this keeps the peer harmless even with an unpatched addon, where a child's copy
    // of a socket kept our connection from reconnecting.
    const child = existsSync('/proc/self/fd') && existsSync('/bin/bash')
      ? spawn('/bin/bash', ['-c', CLOSE_FDS_AND_EXEC, 'curator-peer', JAVA, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
      : spawn(JAVA, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    live.add(child);
    if (!exitHookInstalled) {
      exitHookInstalled = true;
      // A test that forgot close(): do not leave JVMs behind (only the ones started here).
      process.once('exit', () => {
        for (const c of live) c.kill('SIGKILL');
      });
    }
    const peer = new CuratorPeer(child);
    const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new CuratorPeerError(`CuratorPeer did not get ready within ${readyTimeoutMs} ms${peer.stderrTail()}`)),
          readyTimeoutMs,
        );
        const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
        let ready = false;
        lines.on('line', (line) => {
          if (!ready && line.startsWith('ready')) {
            ready = true;
            clearTimeout(timer);
            try {
              peer.sessionIdAtStart = (JSON.parse(line.slice('ready'.length).trim() || '{}') as { sessionId?: string }).sessionId ?? '';
            } catch {
              // an older peer without the session id: fine
            }
            resolve();
            return;
          }
          peer.onLine(line);
        });
        void peer.exitPromise.then(() => {
          clearTimeout(timer);
          reject(new CuratorPeerError(`CuratorPeer exited before it was ready (${peer.exitDescription()})${peer.stderrTail()}`));
        });
        child.once('error', (error) => {
          clearTimeout(timer);
          reject(new CuratorPeerError(`cannot start ${JAVA}: ${error.message}`, { cause: error }));
        });
      });
    } catch (error) {
      await peer.close();
      throw error;
    }
    return peer;
  }

  /** The JVM's pid. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** What the JVM wrote to stderr (the last 64 KB). */
  get stderr(): string {
    return this.stderrText;
  }

  /** Connection-state events seen so far. */
  get events(): readonly CuratorEvent[] {
    return this.eventLog;
  }

  onEvent(listener: (event: CuratorEvent) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  get isRunning(): boolean {
    return this.exited === undefined;
  }

  // ---- mutex ----

  /** A new InterProcessMutex on `path`, named `id`. */
  async mutex(id: string, path: string): Promise<void> {
    await this.request('mutex', [id, path]);
  }

  /** InterProcessMutex.acquire(timeoutMs); a negative timeout waits without limit. */
  async acquire(id: string, timeoutMs: number): Promise<boolean> {
    return (await this.request('acquire', [id, timeoutMs], blockingTimeout(timeoutMs))) as boolean;
  }

  async release(id: string): Promise<void> {
    await this.request('release', [id]);
  }

  /** isAcquiredInThisProcess() of the lock (any kind). */
  async isAcquired(id: string): Promise<boolean> {
    return (await this.request('isAcquired', [id])) as boolean;
  }

  /**
   * getParticipantNodes() as node names (not paths): for a mutex all children of the lock path in
   * Curator's order; for a semaphore the lease nodes; for a read-write lock readers and writers.
   */
  async participants(id: string): Promise<string[]> {
    return (await this.request('participants', [id])) as string[];
  }

  // ---- leader latch ----

  /** A new LeaderLatch on `path` with `participantId`, started. */
  async latch(id: string, path: string, participantId: string): Promise<void> {
    await this.request('latch', [id, path, participantId]);
  }

  async hasLeadership(id: string): Promise<boolean> {
    return (await this.request('hasLeadership', [id])) as boolean;
  }

  /** getLeader().getId(): the id in the lowest latch node's data. */
  async latchLeader(id: string): Promise<string> {
    return (await this.request('latchLeader', [id])) as string;
  }

  async latchClose(id: string): Promise<void> {
    await this.request('latchClose', [id]);
  }

  // ---- semaphore ----

  /** A new InterProcessSemaphoreV2 on `path` with `permits` leases. */
  async semaphore(id: string, path: string, permits: number): Promise<void> {
    await this.request('semaphore', [id, path, permits]);
  }

  /** acquire(n, timeoutMs): the number of leases acquired, or null when it timed out (none are kept). */
  async leaseAcquire(id: string, n: number, timeoutMs: number): Promise<number | null> {
    return (await this.request('leaseAcquire', [id, n, timeoutMs], blockingTimeout(timeoutMs))) as number | null;
  }

  /** Returns every lease `id` holds; resolves with how many. */
  async leaseReleaseAll(id: string): Promise<number> {
    return (await this.request('leaseReleaseAll', [id])) as number;
  }

  // ---- read-write lock ----

  /** A new InterProcessReadWriteLock on `path`. */
  async rw(id: string, path: string): Promise<void> {
    await this.request('rw', [id, path]);
  }

  async readAcquire(id: string, timeoutMs: number): Promise<boolean> {
    return (await this.request('readAcquire', [id, timeoutMs], blockingTimeout(timeoutMs))) as boolean;
  }

  async readRelease(id: string): Promise<void> {
    await this.request('readRelease', [id]);
  }

  async writeAcquire(id: string, timeoutMs: number): Promise<boolean> {
    return (await this.request('writeAcquire', [id, timeoutMs], blockingTimeout(timeoutMs))) as boolean;
  }

  async writeRelease(id: string): Promise<void> {
    await this.request('writeRelease', [id]);
  }

  // ---- revocation (Curator's cooperative protocol: "__REVOKE__" written to a holder's node) ----

  /**
   * makeRevocable on lock `id` (a mutex, or both halves of a read-write lock); call it before the
   * acquire. Each revocation request is counted (`revocations`); with 'release' the peer also lets
   * go of the revoked lock on the id's thread, as Curator's listeners are expected to.
   */
  async revocable(id: string, mode: 'release' | 'record'): Promise<void> {
    await this.request('revocable', [id, mode]);
  }

  /** How many times lock `id`'s revocation listener ran. */
  async revocations(id: string): Promise<number> {
    return (await this.request('revocations', [id])) as number;
  }

  /** Revoker.attemptRevoke(client, path): asks the holder of the node at `path` to let go. */
  async revoke(path: string): Promise<void> {
    await this.request('revoke', [path]);
  }

  // ---- plain ZooKeeper reads through Curator's session ----

  /** Children of `path` in server order, or null when it does not exist. */
  async children(path: string): Promise<string[] | null> {
    return (await this.request('children', [path])) as string[] | null;
  }

  async stat(path: string): Promise<CuratorStat | null> {
    return (await this.request('stat', [path])) as CuratorStat | null;
  }

  /** The Curator client's current session id (hex, no 0x). */
  async sessionId(): Promise<string> {
    return (await this.request('sessionId', [])) as string;
  }

  async ping(): Promise<void> {
    await this.request('ping', []);
  }

  /**
   * Closes the Curator client (its ephemeral nodes go with its session) and ends the JVM: `quit`,
   * then SIGKILL if it has not exited after `graceMs`. Idempotent.
   */
  async close(graceMs = 5000): Promise<void> {
    if (this.exited) return;
    const quit = this.request('quit', [], graceMs).catch(() => undefined);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await Promise.race([quit.then(() => this.exitPromise), this.exitPromise]);
    clearTimeout(timer);
  }

  /** Kills the JVM at once (its session stays on the server until it expires). */
  async kill(): Promise<void> {
    if (this.exited) return;
    this.child.kill('SIGKILL');
    await this.exitPromise;
  }

  /** Sends one command; resolves with its reply's value, rejects with its error. */
  request(command: string, args: ReadonlyArray<string | number>, timeoutMs: number | undefined = QUICK_REPLY_MS): Promise<unknown> {
    if (this.exited) return Promise.reject(new CuratorPeerError(`CuratorPeer is not running (${this.exitDescription()})`));
    for (const arg of args) {
      if (typeof arg === 'string' && (arg === '' || /\s/.test(arg))) {
        return Promise.reject(new CuratorPeerError(`${command}: argument ${JSON.stringify(arg)} must be non-empty, without whitespace`));
      }
    }
    const req = this.nextReq++;
    const line = [req, command, ...args].join(' ');
    return new Promise((resolve, reject) => {
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              this.pending.delete(req);
              reject(new CuratorPeerError(`no reply to "${line}" within ${timeoutMs} ms${this.stderrTail()}`));
            }, timeoutMs);
      this.pending.set(req, { command: line, resolve, reject, timer });
      this.child.stdin.write(`${line}\n`);
    });
  }

  private onLine(line: string): void {
    let message: { req?: number | null; ok?: boolean; value?: unknown; error?: string; event?: string };
    try {
      message = JSON.parse(line) as typeof message;
    } catch {
      this.stderrText = (this.stderrText + `[stdout] ${line}\n`).slice(-STDERR_KEEP);
      return;
    }
    if (message.event !== undefined) {
      const event = message as CuratorEvent;
      this.eventLog.push(event);
      for (const listener of this.eventListeners) listener(event);
      return;
    }
    const pending = typeof message.req === 'number' ? this.pending.get(message.req) : undefined;
    if (!pending) {
      this.stderrText = (this.stderrText + `[stdout, unmatched] ${line}\n`).slice(-STDERR_KEEP);
      return;
    }
    this.pending.delete(message.req!);
    clearTimeout(pending.timer);
    if (message.ok) pending.resolve(message.value ?? null);
    else pending.reject(new CuratorPeerError(`Curator "${pending.command}" failed: ${message.error}`));
  }

  private failAll(error: Error): void {
    for (const [req, pending] of this.pending) {
      this.pending.delete(req);
      clearTimeout(pending.timer);
      // quit's reply may race the exit: that is a success, not a failure
      if (pending.command.split(' ')[1] === 'quit') pending.resolve(null);
      else pending.reject(new CuratorPeerError(`"${pending.command}": ${error.message}`));
    }
  }

  private exitDescription(): string {
    if (!this.exited) return 'running';
    return this.exited.signal ? `killed by ${this.exited.signal}` : `exit code ${this.exited.code}`;
  }

  private stderrTail(): string {
    const tail = this.stderrText.trim().slice(-4000);
    return tail ? `\n--- CuratorPeer stderr ---\n${tail}` : '';
  }
}

function blockingTimeout(timeoutMs: number): number | undefined {
  return timeoutMs < 0 ? undefined : timeoutMs + REPLY_GRACE_MS;
}
