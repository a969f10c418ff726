// The built command line (dist/cli.js) as a child process: build first (npm run build).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

export function checkCliBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: build first (npm run build)`);
}

/** Runs `nestjs-zk-lock <args>` to its end (30 s at most) with only PATH and `env` set. */
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  checkCliBuilt();
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { PATH: process.env.PATH, ...env }, timeout: 30_000 },
      (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr, ms: Date.now() - started }),
    );
  });
}

/** A command line left running: its output so far, waiting for it, ending it. */
export interface RunningCli {
  readonly child: ChildProcess;
  /** Everything it printed on stdout so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout satisfies `check` (rejects after `timeoutMs`, or if the process ends first). */
  waitForOutput(what: string, check: (stdout: string) => boolean, timeoutMs?: number): Promise<void>;
  /** Resolves with its exit code once it has ended (null when a signal ended it). */
  readonly exit: Promise<number | null>;
  /** Sends `signal` (unless it has ended) and resolves with its exit code once it has. */
  end(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `nestjs-zk-lock <args>` with pipes for stdin and stdout (neither is a terminal). */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv = {}): RunningCli {
  checkCliBuilt();
  const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    exit: exited,
    stdout: () => out,
    stderr: () => err,
    waitForOutput: (what, check, timeoutMs = 30_000) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => finish(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; stdout:\n${out}\nstderr:\n${err}`)), timeoutMs);
        const onData = () => check(out) && finish();
        const onExit = () => finish(check(out) ? undefined : new Error(`the command ended before ${what}; stdout:\n${out}\nstderr:\n${err}`));
        const finish = (error?: Error) => {
          clearTimeout(timer);
          child.stdout.off('data', onData);
          child.off('exit', onExit);
          if (error) reject(error);
          else resolve();
        };
        child.stdout.on('data', onData);
        child.once('exit', onExit);
        onData();
        if (child.exitCode !== null || child.signalCode !== null) onExit();
      }),
    end: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}
