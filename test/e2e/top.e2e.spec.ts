// `nestjs-zk-lock top` (the built dist/cli.js, run as a child process): one frame during contention,
// the view in a terminal (tmux), frame after frame into a pipe, and over TLS with credentials on a
// server of its own, where the ensemble's zxid shows that it never writes.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ZkPerm } from '../../lib/core/client/session.js';
import { digestIdOf } from '../../lib/core/inspect.js';
import type { LockEngine } from '../../lib/core/lock-engine.js';
import type { Lease } from '../../lib/core/leases/lease.js';
import { Leadership } from '../../lib/core/recipes/leadership.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import { CLI, runCli, spawnCli, type RunningCli } from '../support/cli.js';
import { childrenOf, closeAll, engine, eventually, uniquePath, zkConnectString } from '../support/helpers.js';
import { TmuxPane } from '../support/tmux.js';
import { startStandalone, type ZkServerHandle } from '../support/zk-server.js';

afterEach(closeAll);

const ME = `${hostname()}:${process.pid}`;
const run = promisify(execFile);

/** The frames in what top printed (each starts with its title line). */
function framesOf(out: string): string[] {
  return out.split(/^(?=nestjs-zk-lock top )/m).filter((f) => f.startsWith('nestjs-zk-lock top '));
}

/** The table rows of a frame, by lock path: the cells (two or more spaces apart) by column name. */
function rowsOf(frame: string): Map<string, Record<string, string>> {
  const lines = frame.trimEnd().split('\n');
  const at = lines.findIndex((l) => l.startsWith('LOCK '));
  if (at < 0) return new Map();
  const columns = lines[at]!.trim().split(/\s{2,}/);
  return new Map(
    lines.slice(at + 1).map((line) => {
      const cells = line.trim().split(/\s{2,}/);
      return [cells[0]!, Object.fromEntries(columns.map((c, i) => [c, cells[i] ?? '']))];
    }),
  );
}

/** Each of `engines` takes the mutex at `path` in turns, holding it `holdMs`, until `stop()`. */
function contend(engines: readonly LockEngine[], path: string, holdMs: number) {
  let running = true;
  const loops = engines.map(async (e) => {
    while (running) {
      const lease = await new Mutex(e, 'event', path).acquire();
      await new Promise((resolve) => setTimeout(resolve, holdMs));
      await lease.release();
    }
  });
  return async () => {
    running = false;
    await Promise.all(loops);
  };
}

describe('nestjs-zk-lock top', () => {
  it('--once during contention prints each lock with its holder, waiter count and longest wait, the longest wait first', async () => {
    const root = uniquePath('top');
    const [a, b, c] = await Promise.all([
      engine({}, { app: 'tickets', instance: 'pod-1' }),
      engine({}, { app: 'tickets', instance: 'pod-2' }),
      engine({}, { app: 'tickets', instance: 'pod-3' }),
    ]);
    const queued = (path: string, count: number) => eventually(async () => (await childrenOf(a.connection, path)).length === count, 10_000, 20);
    const leases: Lease[] = [];
    const waits: Promise<unknown>[] = [];
    const wait = (acquire: Promise<Lease>) => waits.push(acquire.then((lease) => lease.release(), () => undefined));

    // Waiters queued in this order: held (2), pool (1), rw (1).
    leases.push(await new Mutex(a, 'held', `${root}/held`).acquire());
    wait(new Mutex(b, 'held', `${root}/held`).acquire());
    wait(new Mutex(c, 'held', `${root}/held`).acquire());
    await queued(`${root}/held`, 3);
    const pool = (e: LockEngine) => new Semaphore(e, 'pool', `${root}/pool`, { permits: 2 });
    leases.push(await pool(a).acquire(), await pool(b).acquire());
    wait(pool(c).acquire());
    await queued(`${root}/pool/leases`, 3);
    const rw = (e: LockEngine) => new ReadWriteLock(e, 'rw', `${root}/rw`);
    leases.push(await rw(a).read.acquire(), await rw(b).read.acquire());
    wait(rw(c).write.acquire());
    await queued(`${root}/rw`, 3);
    const election = [a, b, c].map((e) => new Leadership(e, 'cron', `${root}/cron`).start());
    await queued(`${root}/cron`, 3);
    const stopChurn = contend([a, b, c], `${root}/event:1`, 100);
    try {
      await queued(`${root}/event:1`, 3);
      const result = await runCli(['top', root, '--once', '--connect', zkConnectString()]);
      expect(result).toMatchObject({ code: 0, stderr: '' });
      const lines = result.stdout.split('\n');
      expect(lines[0]).toMatch(new RegExp(`^nestjs-zk-lock top  ${root} at ${zkConnectString()}  every 1s  \\d\\d:\\d\\d:\\d\\d$`));
      expect(lines[1]).toMatch(/^5 locks \(1 election\), 5 held, \d+ waiting \(longest \d+(ms|s)\), \d+\.\d handoffs\/s$/);
      expect(result.stdout).not.toContain('\x1b'); // a plain frame: no escape sequences

      const rows = rowsOf(result.stdout);
      // The longest wait first: the waiters queued earliest, then the rest; elections (no wait) after every lock with waiters.
      const order = [...rows.keys()];
      const at = (name: string) => order.indexOf(`${root}/${name}`);
      expect(at('held')).toBe(0);
      expect(at('pool')).toBeLessThan(at('rw'));
      const longest = order.map((path) => rows.get(path)!['LONGEST WAIT']);
      const firstWithout = longest.indexOf('-'); // the election at least
      expect(firstWithout).toBeGreaterThan(at('rw'));
      expect(longest.slice(firstWithout).every((w) => w === '-')).toBe(true);
      expect(rows.get(`${root}/held`)).toMatchObject({ KIND: 'mutex', HOLDER: `${ME} tickets/pod-1`, WAITING: '2' });
      expect(rows.get(`${root}/pool`)).toMatchObject({ KIND: 'semaphore 2', HOLDER: expect.stringMatching(/ \(\+1\)$/), WAITING: '1' });
      expect(rows.get(`${root}/rw`)).toMatchObject({ KIND: 'rw:read', HOLDER: expect.stringMatching(/ \(\+1\)$/), WAITING: '1' });
      for (const path of ['held', 'pool', 'rw']) expect(rows.get(`${root}/${path}`)!['LONGEST WAIT']).toMatch(/^\d+(ms|s)$/);
      // An election: the leader as holder, the candidates behind it, no wait counted.
      expect(rows.get(`${root}/cron`)).toMatchObject({ KIND: 'leadership', WAITING: '2', 'LONGEST WAIT': '-' });
      expect(election.map((e) => e.participantId)).toContain(rows.get(`${root}/cron`)!.HOLDER);
      // The churned lock changed holders between the two readings (--once reads twice, --interval apart).
      const event = rows.get(`${root}/event:1`)!;
      expect(event).toMatchObject({ KIND: 'mutex', HOLDER: expect.stringMatching(/tickets\/pod-[123]$/) });
      expect(Number(event['HANDOFFS/S'])).toBeGreaterThan(0);
      expect(Number(rows.get(`${root}/held`)!['HANDOFFS/S'])).toBe(0);
    } finally {
      await stopChurn();
      await Promise.all(election.map((e) => e.close()));
      await Promise.all(leases.map((l) => l.release()));
      await closeAll();
      await Promise.all(waits);
    }
  });

  it('in a terminal: redraws each refresh with the cursor hidden and the terminal raw; q quits and restores both', async () => {
    const root = uniquePath('top-tty');
    const holder = await engine({}, { app: 'tickets', instance: 'pod-7' });
    const waiter = await engine({}, { app: 'tickets', instance: 'pod-8' });
    const lease = await new Mutex(holder, 'orders', `${root}/orders`).acquire();
    const next = new Mutex(waiter, 'orders', `${root}/orders`).acquire();
    await eventually(async () => (await childrenOf(holder.connection, `${root}/orders`)).length === 2, 10_000, 20);
    const pane = await startTopInTmux(['top', root, '--connect', zkConnectString(), '--interval', '300']);
    try {
      const ordersRow = async () => (await pane.screen()).split('\n').find((l) => l.startsWith(`${root}/orders `)) ?? '';
      await eventually(async () => (await ordersRow()).includes('tickets/pod-7'), 20_000, 50);
      expect(await pane.screen()).toContain('q quits');
      expect(await pane.display('#{cursor_flag}')).toBe('0');
      expect(await pane.tty()).not.toBe(pane.file('before'));

      await lease.release(); // the waiter takes over: the next refresh shows it
      await eventually(async () => (await ordersRow()).includes('tickets/pod-8'), 20_000, 50);
      await (await next).release();

      await pane.sendKeys('q');
      await eventually(() => pane.file('code') !== undefined, 20_000, 50);
      expect(pane.file('code')).toBe('0');
      expect(pane.file('after')).toBe(pane.file('before'));
      expect(await pane.display('#{cursor_flag}')).toBe('1');
    } finally {
      await pane.close();
    }
  });

  it('in a terminal: Ctrl-C quits too, with exit code 0 and the terminal restored', async () => {
    const root = uniquePath('top-ctrl-c');
    const holder = await engine({}, { app: 'tickets', instance: 'pod-9' });
    const lease = await new Mutex(holder, 'orders', `${root}/orders`).acquire();
    const pane = await startTopInTmux(['top', root, '--connect', zkConnectString(), '--interval', '300']);
    try {
      await eventually(async () => (await pane.screen()).includes('tickets/pod-9'), 20_000, 50);
      await pane.sendKeys('C-c');
      await eventually(() => pane.file('code') !== undefined, 20_000, 50);
      expect(pane.file('code')).toBe('0');
      expect(pane.file('after')).toBe(pane.file('before'));
    } finally {
      await pane.close();
      await lease.release();
    }
  });

  it('into a pipe: plain frames one after another until SIGTERM, which ends it with exit code 0', async () => {
    const root = uniquePath('top-pipe');
    const lease = await new Mutex(await engine({}, { instance: 'pod-5' }), 'jobs', `${root}/jobs`).acquire();
    const top = spawnCli(['top', root, '--connect', zkConnectString(), '--interval', '200']);
    try {
      await top.waitForOutput('three frames', (out) => framesOf(out).length >= 3 && out.endsWith('\n\n'));
      expect(await top.end('SIGTERM')).toBe(0);
      const frames = framesOf(top.stdout());
      expect(frames.length).toBeGreaterThanOrEqual(3);
      for (const frame of frames) expect(rowsOf(frame).get(`${root}/jobs`)).toMatchObject({ HOLDER: `${ME} jest/pod-5`, WAITING: '0' });
      expect(top.stdout()).not.toContain('\x1b');
      expect(top.stdout()).not.toContain('q quits'); // stdin is no terminal: no keys
      expect(top.stderr()).toBe('');
    } finally {
      await top.end('SIGKILL');
      await lease.release();
    }
  });

  it('into a pipe whose reader goes away (| head): ends with exit code 0 at its next frame', async () => {
    const top = spawnCli(['top', uniquePath('top-head'), '--connect', zkConnectString(), '--interval', '200']);
    try {
      await top.waitForOutput('a frame', (out) => out.endsWith('\n\n'));
      top.child.stdout!.destroy();
      expect(await top.exit).toBe(0);
    } finally {
      await top.end('SIGKILL');
    }
  });

  it('refuses --json and an --interval under 100 ms with exit code 1', async () => {
    expect(await runCli(['top', '--json', '--connect', zkConnectString()])).toMatchObject({ code: 1, stderr: expect.stringMatching(/top prints a table only: for JSON, use locks --json/) });
    expect(await runCli(['top', '--interval', '50', '--connect', zkConnectString()])).toMatchObject({ code: 1, stderr: expect.stringMatching(/--interval expects an integer ≥ 100/) });
  });

  /** The pane runs `top` between two `stty -g` into files, then its exit code into `code`. */
  async function startTopInTmux(args: string[]) {
    const quoted = [process.execPath, CLI, ...args].map((a) => `'${a}'`).join(' ');
    const pane = await TmuxPane.start(() => `stty -g > before; ${quoted}; echo $? > code.tmp; stty -g > after; mv code.tmp code; exec sleep 600`);
    const file = (name: string) => {
      try {
        return readFileSync(join(pane.folder, name), 'utf8').trim();
      } catch {
        return undefined;
      }
    };
    /** The pane terminal's settings now, as `stty -g` prints them. */
    const tty = async () => (await run('stty', ['-F', await pane.display('#{pane_tty}'), '-g'])).stdout.trim();
    return Object.assign(pane, { file, tty });
  }
});

describe('nestjs-zk-lock top over TLS with credentials, on a server of its own', () => {
  let server: ZkServerHandle;

  beforeAll(async () => {
    server = await startStandalone({ tls: 'need' });
  }, 180_000);

  afterAll(async () => {
    await closeAll();
    await server?.stop();
  }, 60_000);

  it('reads over TLS the locks only --auth may read; sends one listing per refresh and never writes (the zxid stays)', async () => {
    const root = `/top-tls-${process.pid}`;
    const tls = server.tls;
    const over = { connectString: server.secureConnectString, tls: { ca: tls.ca, cert: tls.cert, key: tls.key }, auth: { credentials: 'ops:secret' } };
    // Only these credentials may read (not world, nor the client certificate's x509 identity, which
    // the scheme 'auth' would include), so without --auth nothing shows.
    const parentAcl = [{ perms: ZkPerm.ALL, scheme: 'digest', id: digestIdOf('ops:secret') }];
    const holder = await engine(over, { app: 'billing', instance: 'pod-1', parentAcl });
    const waiter = await engine(over, { app: 'billing', instance: 'pod-2', parentAcl });
    const LOCKS = 10;
    const leases = await Promise.all(Array.from({ length: LOCKS }, (_, i) => new Mutex(holder, `m${i}`, `${root}/m${i}`).acquire()));
    const waits = Array.from({ length: LOCKS }, (_, i) => new Mutex(waiter, `m${i}`, `${root}/m${i}`).acquire().catch(() => undefined));
    await eventually(async () => (await Promise.all(leases.map((_, i) => childrenOf(holder.connection, `${root}/m${i}`)))).every((c) => c.length === 2), 10_000, 20);
    const file = (name: string) => join(server.dir, 'tls', name);
    const flags = ['--connect', server.secureConnectString, '--tls-ca', file('ca.pem'), '--tls-cert', file('client.crt'), '--tls-key', file('client.key')];

    const anonymous = await runCli(['top', root, '--once', ...flags]);
    expect(anonymous).toMatchObject({ code: 0, stderr: '' });
    expect(anonymous.stdout).toContain(`No locks held under ${root}.`);
    const allowed = await runCli(['top', root, '--once', ...flags, '--auth', 'ops:secret']);
    expect(allowed).toMatchObject({ code: 0, stderr: '' });
    const rows = rowsOf(allowed.stdout);
    expect(rows.size).toBe(LOCKS);
    expect(rows.get(`${root}/m0`)).toMatchObject({ KIND: 'mutex', HOLDER: `${ME} billing/pod-1`, WAITING: '1' });

    // At the plain port, whose connections `cons` lists (the TLS port's it does not): the engines
    // are on the TLS port, so top's is the one session there.
    const INTERVAL_MS = 500;
    const top = spawnCli(['top', root, '--connect', server.connectString, '--auth', 'ops:secret', '--interval', String(INTERVAL_MS)]);
    try {
      const frames = () => framesOf(top.stdout()).length;
      await top.waitForOutput('a frame with the locks', (out) => out.includes(`${root}/m${LOCKS - 1} `));

      // Between two frames: the zxid (the last transaction) and what top's connection sent.
      const sample = async () => ({ frames: frames(), at: Date.now(), zxid: await zxid(server), recved: await recvedOfTheSession(server) });
      const first = await sampleAfterFrame(top, INTERVAL_MS, sample);
      await top.waitForOutput('four more frames', () => frames() >= first.frames + 4);
      const last = await sampleAfterFrame(top, INTERVAL_MS, sample);
      expect(last.zxid).toBe(first.zxid);
      // One listing per refresh: getChildren of the root and of each lock, getData of each node
      // (1 + 10 + 20), plus the connection's heartbeat syncs (one every 1/20 of the session timeout).
      const refreshes = last.frames - first.frames;
      const syncs = (last.at - first.at) / (last.recved.timeoutMs / 20);
      const perRefresh = (last.recved.count - first.recved.count - syncs) / refreshes;
      expect(perRefresh).toBeGreaterThan(1 + LOCKS + 2 * LOCKS - 1.5);
      expect(perRefresh).toBeLessThan(1 + LOCKS + 2 * LOCKS + 1.5);
      expect(await top.end('SIGTERM')).toBe(0);
    } finally {
      await top.end('SIGKILL');
      await Promise.all(leases.map((l) => l.release()));
      await closeAll();
      await Promise.all(waits);
    }
  });
});

async function zxid(server: ZkServerHandle): Promise<string> {
  return /^Zxid: (0x[0-9a-f]+)$/m.exec(await server.fourLetter(1, 'srvr'))![1]!;
}

/** The requests received on the one connection with a session at the plain port (`cons`), and its session timeout. */
async function recvedOfTheSession(server: ZkServerHandle): Promise<{ count: number; timeoutMs: number }> {
  const cons = await server.fourLetter(1, 'cons');
  const sessions = cons
    .split('\n')
    .map((line) => /recved=(\d+),.*sid=0x[0-9a-f]+,.*to=(\d+)/.exec(line))
    .filter((m) => m !== null);
  if (sessions.length !== 1) throw new Error(`expected one session at the plain port, found ${sessions.length}:\n${cons}`);
  return { count: Number(sessions[0]![1]), timeoutMs: Number(sessions[0]![2]) };
}

/**
 * Runs `sample` right after a frame is printed: until the next refresh only heartbeats flow. A
 * sample that took half the interval (a loaded machine) may overlap the next refresh: take another.
 */
async function sampleAfterFrame<T>(top: RunningCli, intervalMs: number, sample: () => Promise<T>): Promise<T> {
  for (;;) {
    const before = top.stdout().length;
    await top.waitForOutput('the next frame', (out) => out.length > before && out.endsWith('\n\n'));
    const printedAt = Date.now();
    const taken = await sample();
    if (Date.now() - printedAt < intervalMs / 2) return taken;
  }
}
