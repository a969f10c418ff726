// Test helper: throw-away ZooKeeper servers on 127.0.0.1, a thin typed wrapper over
// scripts/zookeeper.sh (which owns the process handling). Only node builtins are used.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const ZK_SCRIPT = join(REPO_ROOT, 'scripts', 'zookeeper.sh');

export type ZkMode = 'leader' | 'follower' | 'standalone' | 'down';
export interface ZkServerInfo {
  id: number;
  port: number;
  pid: number; // 0 while the server is stopped
}

/** Runs `bash scripts/zookeeper.sh ...args`; resolves with the last stdout line. */
export function zkScript(args: string[], opts: { echoStderr?: boolean } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      'bash',
      [ZK_SCRIPT, ...args],
      { cwd: REPO_ROOT, maxBuffer: 64 * 1024 * 1024, timeout: 300_000 },
      (err, stdout, stderr) => {
        if (err) {
          reject(new Error(`scripts/zookeeper.sh ${args.join(' ')} failed: ${err.message}\n${stderr}`));
        } else {
          resolve(stdout.trim().split('\n').pop() ?? '');
        }
      },
    );
    if (opts.echoStderr) child.stderr?.pipe(process.stderr);
  });
}

/** Sends a four-letter word (ruok, srvr, mntr, ...) to 127.0.0.1:port; resolves with the answer. */
export function fourLetter(port: number, cmd: string, timeoutMs = 2000): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = createConnection({ host: '127.0.0.1', port }, () => socket.end(cmd));
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`${cmd} to 127.0.0.1:${port} timed out`)));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', (hadError) => {
      if (!hadError) resolve(Buffer.concat(chunks).toString('utf8'));
    });
  });
}

/** Mode of the server at 127.0.0.1:port as `srvr` reports it; 'down' when it does not serve. */
export async function modeOfPort(port: number, timeoutMs = 2000): Promise<ZkMode> {
  try {
    const m = /^Mode: (leader|follower|standalone)$/m.exec(await fourLetter(port, 'srvr', timeoutMs));
    return m ? (m[1] as ZkMode) : 'down';
  } catch {
    return 'down';
  }
}

/** Polls `check` every `intervalMs` until it returns a value other than undefined. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs = 30_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export class ZkServerHandle {
  readonly connectString: string;

  /** `dir`: the servers' config, data and logs (layout: see scripts/zookeeper.sh). */
  constructor(readonly dir: string) {
    this.connectString = this.read('connect');
  }

  /** The servers as recorded in `dir`, read afresh on every access. */
  get servers(): ZkServerInfo[] {
    return readdirSync(this.dir)
      .map((f) => /^server\.(\d+)\.cfg$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => this.server(Number(m[1])))
      .sort((a, b) => a.id - b.id);
  }

  server(id: number): ZkServerInfo {
    const pid = existsSync(join(this.dir, `server.${id}.pid`)) ? Number(this.read(`server.${id}.pid`)) : 0;
    return { id, port: Number(this.read(`server.${id}.port`)), pid };
  }

  /** Stops every server (SIGTERM, then SIGKILL after a few seconds); removes `dir` if the script made it. */
  async stop(): Promise<void> {
    if (existsSync(this.dir)) await zkScript(['stop', '--dir', this.dir]);
  }

  /** Stops one server, keeping its data so that restartServer(id) can bring it back. */
  async stopServer(id: number, signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    await zkScript(['stop', '--dir', this.dir, '--id', String(id), '--signal', signal]);
  }

  /** Starts a stopped server again; resolves once it serves (for an ensemble: leader or follower). */
  async restartServer(id: number): Promise<void> {
    await zkScript(['restart', '--dir', this.dir, '--id', String(id)]);
  }

  fourLetter(id: number, cmd: string, timeoutMs?: number): Promise<string> {
    return fourLetter(this.server(id).port, cmd, timeoutMs);
  }

  mode(id: number, timeoutMs?: number): Promise<ZkMode> {
    return modeOfPort(this.server(id).port, timeoutMs);
  }

  /** SIGSTOP: the server hangs (no answers, no heartbeats) until resume(id). */
  pause(id: number): void {
    const pid = this.livePid(id);
    process.kill(pid, 'SIGSTOP');
    // kill() only queues the stop: a JVM thread running on the other core can still answer a
    // request for a moment (seen once in a loaded run). Return once every thread is stopped.
    const stopped = () =>
      readdirSync(`/proc/${pid}/task`).every((tid) => {
        try {
          return / [tT] /.test(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').replace(/^.*\)/s, ''));
        } catch {
          return true; // the thread is gone
        }
      });
    const until = Date.now() + 5000;
    while (!stopped() && Date.now() < until) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
  }

  resume(id: number): void {
    process.kill(this.livePid(id), 'SIGCONT');
  }

  private livePid(id: number): number {
    const { pid } = this.server(id);
    const cmdline = pid > 0 && existsSync(`/proc/${pid}/cmdline`) ? readFileSync(`/proc/${pid}/cmdline`, 'utf8') : '';
    if (!cmdline.includes(join(this.dir, `server.${id}.cfg`))) throw new Error(`ZooKeeper server ${id} is not running`);
    return pid;
  }

  private read(file: string): string {
    return readFileSync(join(this.dir, file), 'utf8').trim();
  }
}

export class ZkEnsembleHandle extends ZkServerHandle {
  /** Ids of the servers that currently report Mode: leader (normally exactly one). */
  async leaders(): Promise<number[]> {
    const modes = await Promise.all(this.servers.map(async (s) => [s.id, await this.mode(s.id, 1000)] as const));
    return modes.filter(([, m]) => m === 'leader').map(([id]) => id);
  }

  /** Waits until exactly one server is leader (optionally: not one of `exclude`); returns its id. */
  waitForLeader(exclude: number[] = [], timeoutMs = 30_000): Promise<number> {
    return waitFor(`a ZooKeeper leader (excluding ${exclude.join(',') || 'none'})`, async () => {
      const leaders = await this.leaders();
      return leaders.length === 1 && !exclude.includes(leaders[0]) ? leaders[0] : undefined;
    }, timeoutMs, 200);
  }
}

export interface StartOptions {
  /** Default: a new temp dir, which the script creates and stop() removes. */
  dir?: string;
  /** The servers are stopped once this process exits (default: this one), even if stop() never runs. */
  ownerPid?: number;
}

function startArgs(cmd: string, opts: StartOptions): [string, string[]] {
  const dir = opts.dir ?? join(tmpdir(), `nestjs-zk-lock-zk.${randomBytes(6).toString('hex')}`);
  return [dir, [cmd, '--dir', dir, '--owner-pid', String(opts.ownerPid ?? process.pid)]];
}

/** One standalone server (id 1) on 127.0.0.1 (on `port`, or a free one). */
export async function startStandalone(opts: StartOptions & { port?: number } = {}): Promise<ZkServerHandle> {
  const [dir, args] = startArgs('start', opts);
  await zkScript(opts.port ? [...args, '--port', String(opts.port)] : args);
  return new ZkServerHandle(dir);
}

/** Three servers in a real quorum on 127.0.0.1; resolves once one of them leads. */
export async function startEnsemble(opts: StartOptions = {}): Promise<ZkEnsembleHandle> {
  const [dir, args] = startArgs('ensemble', opts);
  await zkScript(args);
  return new ZkEnsembleHandle(dir);
}
