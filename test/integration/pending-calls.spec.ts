import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { childrenOf, closeAll, connect, engine, eventually, uniquePath, zkConnectString } from '../support/helpers.js';

// A script, a CLI or a Nest application context that awaits a lock call while ZooKeeper is away
// must not exit in the middle of it (code 13, an unsettled top-level await): while disconnected the
// client holds no socket and its timers are unref'd, so only the pending call can keep the process
// alive. And once nothing is pending, it exits as before. The scripts run through a proxy the test
// cuts; they end on their own (never process.exit), so their exit code tells.
const SCRIPT = fileURLToPath(new URL('./fixtures/pending-call.mjs', import.meta.url));

interface Script {
  lines: string[];
  /** Resolves once the script printed `line`, or exited (then the test's expectation says what it printed). */
  reached(line: string): Promise<void>;
  exited: Promise<number | null>;
  hasExited(): boolean;
  /** From its last line to its exit. */
  lingeredMs(): number;
}

function runScript(args: string[]): Script {
  const child = spawn(process.execPath, [SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: string[] = [];
  let exitCode: number | null | undefined;
  let lastLineAt = NaN;
  let exitedAt = NaN;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exitedAt = performance.now();
      resolve((exitCode = code));
    }),
  );
  let buffered = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    const complete = buffered.split('\n');
    buffered = complete.pop()!;
    lines.push(...complete);
    if (complete.length > 0) lastLineAt = performance.now();
  });
  scripts.push(child);
  const hasExited = () => exitCode !== undefined;
  return {
    lines,
    exited,
    hasExited,
    lingeredMs: () => exitedAt - lastLineAt,
    reached: (line) => eventually(() => lines.includes(line) || hasExited(), 30_000, 10),
  };
}
const scripts: ReturnType<typeof spawn>[] = [];

/** A process with nothing pending exits within the turn; this bound is for a loaded machine (a kept handle would hold it for an hour). */
const PROMPTLY_MS = 10_000;

/** Lets the script meet the cut: until it was refused a few reconnects (alive), or exited (the bug). */
async function whileAway(proxy: TcpProxy, script: Script): Promise<void> {
  const refusedBefore = proxy.refused;
  await eventually(() => proxy.refused >= refusedBefore + 3 || script.hasExited(), 30_000, 10);
}

let proxy: TcpProxy;
beforeEach(async () => {
  proxy = await TcpProxy.start(zkConnectString());
});
afterEach(async () => {
  for (const child of scripts.splice(0)) child.kill('SIGKILL');
  await proxy.close();
  await closeAll();
});

describe('a process awaiting a lock call while ZooKeeper is away', () => {
  it.each(['core', 'nest'])('stays alive until its release() settles after ZooKeeper is back, then exits 0 (%s)', async (host) => {
    const path = uniquePath('pending-release');
    const script = runScript([proxy.connectString, path, 'release', host]);
    await script.reached('held');
    proxy.cut();
    await script.reached('awaiting');
    await whileAway(proxy, script);
    proxy.restore();
    const code = await script.exited;
    // Once the release settled and the connection closed, nothing is pending: it exits at once.
    expect({ code, lines: script.lines, promptly: script.lingeredMs() < PROMPTLY_MS }).toEqual({ code: 0, promptly: true, lines: ['held', 'awaiting', 'released', 'done'] });
    const observer = await connect();
    expect(await childrenOf(observer, path)).toEqual([]);
  }, 90_000);

  it.each(['core', 'nest'])('stays alive while its acquire() without waitMs waits, gets the lock once ZooKeeper is back, then exits 0 (%s)', async (host) => {
    const path = uniquePath('pending-acquire');
    const holder = await new Mutex(await engine(), 'pending', path).acquire();
    const observer = await connect();
    const script = runScript([proxy.connectString, path, 'acquire', host]);
    await eventually(async () => (await childrenOf(observer, path)).length === 2 || script.hasExited(), 30_000, 20);
    proxy.cut();
    await script.reached('awaiting');
    await whileAway(proxy, script);
    proxy.restore();
    await holder.release();
    const code = await script.exited;
    expect({ code, lines: script.lines }).toEqual({ code: 0, lines: ['queued', 'awaiting', 'acquired', 'done'] });
  }, 90_000);
});

describe('a process with nothing pending while ZooKeeper is away', () => {
  // ZooKeeper stays away: each script must end on its own, with its connection still open.
  it('exits once connected and idle, when the link goes', async () => {
    const script = runScript([proxy.connectString, uniquePath('pending-idle'), 'idle']);
    await script.reached('connected');
    proxy.cut();
    const code = await script.exited;
    expect({ code, lines: script.lines, promptly: script.lingeredMs() < PROMPTLY_MS }).toEqual({ code: 0, promptly: true, lines: ['connected', 'done'] });
  }, 60_000);

  it.each([
    ['aborted by its signal', 'aborted', 'aborted'],
    ['ended by its waitMs', 'timed-out', 'connection'],
    ['ended by close()', 'closed', 'connection'],
  ])('exits once an acquire it was awaiting is %s', async (_, scenario, reason) => {
    const path = uniquePath(`pending-${scenario}`);
    const holder = await new Mutex(await engine(), 'pending', path).acquire();
    const observer = await connect();
    const script = runScript([proxy.connectString, path, scenario]);
    await eventually(async () => (await childrenOf(observer, path)).length === 2 || script.hasExited(), 30_000, 20);
    proxy.cut();
    const code = await script.exited;
    expect({ code, lines: script.lines, promptly: script.lingeredMs() < PROMPTLY_MS }).toEqual({ code: 0, promptly: true, lines: ['queued', `not acquired: ${reason}`, 'done'] });
    await holder.release();
  }, 60_000);

  it('exits once its release in the background (releaseInBackground) resolved, its delete still to be sent', async () => {
    const script = runScript([proxy.connectString, uniquePath('pending-background'), 'background']);
    await script.reached('held');
    proxy.cut();
    const code = await script.exited;
    expect({ code, lines: script.lines, promptly: script.lingeredMs() < PROMPTLY_MS }).toEqual({ code: 0, promptly: true, lines: ['held', 'awaiting', 'released', 'done'] });
  }, 60_000);

  it('exits when its only business is a connection opened in the background that never connects', async () => {
    proxy.cut();
    const script = runScript([proxy.connectString, uniquePath('pending-never'), 'never']);
    const code = await script.exited;
    expect({ code, lines: script.lines, promptly: script.lingeredMs() < PROMPTLY_MS }).toEqual({ code: 0, promptly: true, lines: ['started'] });
  }, 60_000);
});
