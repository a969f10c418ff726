// Worker processes of the deadlock tests (test/integration/fixtures/deadlock-worker.mjs): JSON
// lines on stdout, commands on stdin.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { zkConnectString } from './helpers.js';

export const DEADLOCK_WORKER = fileURLToPath(new URL('../integration/fixtures/deadlock-worker.mjs', import.meta.url));

export interface WorkerMessage {
  event?: string;
  [key: string]: unknown;
}

const started: DeadlockWorker[] = [];

/** One worker process: its messages in order, and the commands it reads. */
export class DeadlockWorker {
  private readonly messages: WorkerMessage[] = [];
  private readonly listeners = new Set<() => void>();
  private stderr = '';
  private closed = false;
  readonly exited: Promise<number | null>;

  private constructor(private readonly child: ChildProcess) {
    let buffer = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffer += chunk;
      let newline: number;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.trim()) this.messages.push(JSON.parse(line) as WorkerMessage);
      }
      for (const listener of [...this.listeners]) listener();
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    this.exited = new Promise((resolve) =>
      child.on('close', (code) => {
        this.closed = true;
        resolve(code);
        for (const listener of [...this.listeners]) listener();
      }),
    );
  }

  static start(env: Record<string, string>): DeadlockWorker {
    const child = spawn(process.execPath, [DEADLOCK_WORKER], { env: { ...process.env, ZK_CONNECT: zkConnectString(), ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    const worker = new DeadlockWorker(child);
    started.push(worker);
    return worker;
  }

  /** The first message (from the start) whose event is one of `events`, waiting up to `timeoutMs`. */
  next(events: string | readonly string[], timeoutMs = 60_000): Promise<WorkerMessage> {
    const wanted = typeof events === 'string' ? [events] : events;
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.messages.find((m) => m.event !== undefined && wanted.includes(m.event));
        if (found || this.closed) {
          clearTimeout(timer);
          this.listeners.delete(check);
          if (found) resolve(found);
          else reject(new Error(`worker exited (${String(this.child.exitCode)}) before ${wanted.join('|')}: ${this.stderr}`));
        }
      };
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`no ${wanted.join('|')} from the worker within ${timeoutMs} ms; stderr: ${this.stderr}`));
      }, timeoutMs);
      this.listeners.add(check);
      check();
    });
  }

  /** Its last line, once it exited (churn mode prints its result and ends). */
  async result(timeoutMs: number): Promise<WorkerMessage> {
    let timer: NodeJS.Timeout | undefined;
    const code = await Promise.race([this.exited, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`worker still running after ${timeoutMs} ms`)), timeoutMs)))]);
    clearTimeout(timer);
    if (code !== 0 || this.messages.length === 0) throw new Error(`worker exited with ${String(code)}: ${this.stderr}`);
    return this.messages.at(-1)!;
  }

  send(command: string): void {
    this.child.stdin!.write(`${command}\n`);
  }

  kill(): void {
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

/** Kills every worker still running (afterEach). */
export async function stopDeadlockWorkers(): Promise<void> {
  const all = started.splice(0);
  for (const worker of all) worker.kill();
  await Promise.all(all.map((w) => w.exited));
}
