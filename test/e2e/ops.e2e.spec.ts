// Operating it: the Terminus health indicator, the `nestjs-zk-lock locks` CLI (the built
// dist/cli.js, run as a child process) and OpenTelemetry metrics, against the test ZooKeeper.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { Controller, Get, Module, type INestApplication, type INestApplicationContext } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import {
  metrics,
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
  type MeterProvider,
  type ObservableCallback,
  type ObservableGauge,
  type ObservableResult,
  type UpDownCounter,
} from '@opentelemetry/api';
import { LockChannels } from '../../lib/core/diagnostics.js';
import { LockLostError, LockNotAcquiredError } from '../../lib/core/errors.js';
import { LockEngine, SECURE_PARENT_ACL } from '../../lib/core/lock-engine.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { enableZkLockMetrics } from '../../lib/metrics/index.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { ZkLockHealthIndicator, ZkLockHealthModule } from '../../lib/terminus/index.js';
import { CLI, runCli } from '../support/cli.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { closeAll, connect, engine, eventually, nextEvent, uniquePath, zkConnectString } from '../support/helpers.js';
import { whenAborted } from '../support/lock-test-helpers.js';

afterAll(closeAll);

async function boot(imports: unknown[], controllers: unknown[] = []): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({ imports: imports as never[], controllers: controllers as never[] }).compile();
  moduleRef.useLogger(false);
  return moduleRef.init();
}

describe('ZkLockHealthIndicator', () => {
  @Controller('health')
  class HealthController {
    constructor(
      private readonly health: HealthCheckService,
      private readonly zk: ZkLockHealthIndicator,
    ) {}
    @Get()
    @HealthCheck()
    check() {
      return this.health.check([() => this.zk.isHealthy('zookeeper')]);
    }
  }

  it('is up with the state, session, server and held locks; down once the connection is closed', async () => {
    const connection = new ZkConnection({ connectString: zkConnectString(), sessionTimeoutMs: 5000 });
    await connection.connect();
    const app = (await boot(
      [ZkLockModule.forRoot({ connection, app: 'health' }), ZkLockHealthModule],
      [HealthController],
    )) as INestApplication;
    try {
      const indicator = app.get(ZkLockHealthIndicator);
      const lease = await new Mutex(app.get(LockEngine), 'h', uniquePath('health')).acquire();
      const up = await indicator.isHealthy('zookeeper');
      expect(up.zookeeper).toMatchObject({
        status: 'up',
        state: 'connected',
        sessionId: `0x${connection.sessionId}`,
        server: zkConnectString(),
        heldLocks: 1,
      });
      expect(up.zookeeper.latencyMs).toBeGreaterThanOrEqual(0);
      await lease.release();

      // Through Terminus' own HealthCheckService: overall ok.
      const report = await app.get(HealthController).check();
      expect(report.status).toBe('ok');
      expect(report.details.zookeeper!.status).toBe('up');

      await connection.close();
      const down = await indicator.isHealthy('zk', { pingTimeoutMs: 0 });
      expect(down.zk).toMatchObject({ status: 'down', state: 'closed', server: zkConnectString() });
      expect(down.zk.sessionId).toBeUndefined();
      // Terminus answers 503 (ServiceUnavailableException) with the details.
      const failed = await app
        .get(HealthController)
        .check()
        .then(
          () => undefined,
          (error: { getStatus(): number; getResponse(): { details: Record<string, { status: string }> } }) => error,
        );
      expect(failed?.getStatus()).toBe(503);
      expect(failed?.getResponse().details.zookeeper!.status).toBe('down');
    } finally {
      await app.close();
    }
  });

  it('is degraded while suspended (the session may survive), up again after the reconnect', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const app = await boot([ZkLockModule.forRoot({ connection }), ZkLockHealthModule]);
      const indicator = app.get(ZkLockHealthIndicator);
      expect((await indicator.isHealthy()).zookeeper.status).toBe('up');
      const suspended = nextEvent(connection, 'suspended');
      proxy.cut();
      await suspended;
      const degraded = await indicator.isHealthy();
      expect(degraded.zookeeper).toMatchObject({ status: 'degraded', state: 'suspended' });
      expect((await indicator.isHealthy('zookeeper', { suspended: 'down' })).zookeeper.status).toBe('down');
      const reconnected = nextEvent(connection, 'reconnected');
      proxy.restore();
      await reconnected;
      expect((await indicator.isHealthy()).zookeeper.status).toBe('up');
      await app.close();
    } finally {
      await proxy.close();
    }
  });

  it('reports down when no ping answers in time while the state still says connected', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const app = await boot([ZkLockModule.forRoot({ connection }), ZkLockHealthModule]);
      proxy.dropReplies();
      const result = await app.get(ZkLockHealthIndicator).isHealthy('zookeeper', { pingTimeoutMs: 200 });
      expect(result.zookeeper.status).toBe('down');
      expect(result.zookeeper.message).toMatch(/did not answer within 200 ms|ping failed/);
      proxy.restore();
      await app.close();
    } finally {
      await proxy.close();
    }
  });
});

describe('nestjs-zk-lock CLI (dist/cli.js)', () => {
  it('is an executable script (shebang)', () => {
    expect(readFileSync(CLI, 'utf8').split('\n')[0]).toBe('#!/usr/bin/env node');
  });

  it('prints the holder of a held lock and the number waiting, as a table and as JSON', async () => {
    const root = uniquePath('cli');
    const holder = await engine({}, { app: 'tickets', instance: 'pod-7' });
    const waiter = await engine({}, { instance: 'pod-8' });
    const lease = await new Mutex(holder, 'orders', `${root}/orders`).acquire();
    const waiting = new Mutex(waiter, 'orders', `${root}/orders`).acquire();
    const pool = await new Semaphore(holder, 'pool', `${root}/pool`, { permits: 3 }).acquire({ permits: 2 });
    await eventually(async () => (await holder.connection.session!.getChildren(`${root}/orders`)).children.length === 2, 10_000, 20);
    try {
      const table = await runCli(['locks', root, '--connect', zkConnectString()]);
      expect(table.stderr).toBe('');
      expect(table.code).toBe(0);
      const lines = table.stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(/^LOCK\s+KIND\s+HOLDER\s+SESSION\s+SINCE\s+WAITING$/);
      const orders = lines.find((l) => l.startsWith(`${root}/orders `))!;
      expect(orders).toBeDefined();
      expect(orders).toContain(`${hostname()}:${process.pid} tickets/pod-7`);
      expect(orders).toContain(`0x${holder.connection.sessionId}`);
      expect(orders).toMatch(/\smutex\s/);
      expect(orders).toMatch(/\s1$/); // one waiting
      expect(lines.filter((l) => l.includes('semaphore 2/3') || l.includes('semaphore 2'))).toHaveLength(2);

      // ZK_CONNECT from the environment, JSON output, permit hint.
      const json = await runCli(['locks', root, '--json', '--permits', '3'], { ZK_CONNECT: zkConnectString() });
      expect(json.code).toBe(0);
      const parsed = JSON.parse(json.stdout) as {
        path: string;
        kind: string;
        permits?: number;
        holders: { path: string; sessionId: string; holder: { host: string; pid: number; app?: string; instance?: string } }[];
        waiting: { holder: { instance?: string } }[];
      }[];
      expect(parsed.map((l) => [l.path, l.kind])).toEqual([
        [`${root}/orders`, 'mutex'],
        [`${root}/pool`, 'semaphore'],
      ]);
      expect(parsed[0]!.holders).toEqual([
        expect.objectContaining({
          path: lease.path,
          sessionId: holder.connection.sessionId,
          holder: expect.objectContaining({ host: hostname(), pid: process.pid, app: 'tickets', instance: 'pod-7' }),
        }),
      ]);
      expect(parsed[0]!.waiting.map((w) => w.holder.instance)).toEqual(['pod-8']);
      expect(parsed[1]!.permits).toBe(3);
      expect(parsed[1]!.holders).toHaveLength(2);

      // The lock path itself, after the release: the waiter holds.
      await lease.release();
      const next = await waiting;
      const single = await runCli(['locks', `${root}/orders`, '--connect', zkConnectString(), '--json']);
      expect((JSON.parse(single.stdout) as { holders: { holder: { instance: string } }[] }[])[0]!.holders[0]!.holder.instance).toBe('pod-8');
      await next.release();
    } finally {
      await pool.release();
    }
  });

  it('revoke asks the holder to let go and prints whom it asked; nobody holding exits 3; without the credentials, NOAUTH', async () => {
    const root = uniquePath('cli-revoke');
    const holder = await engine({}, { app: 'reports', instance: 'pod-3' });
    const lease = await new Mutex(holder, 'nightly', `${root}/nightly`, { revocable: true }).acquire();
    const asked = await runCli(['revoke', `${root}/nightly`, '--connect', zkConnectString()]);
    expect(asked).toMatchObject({ code: 0, stderr: '' });
    expect(asked.stdout).toContain(`Asked its holder to let go (${root}/nightly):`);
    expect(asked.stdout).toContain(`${hostname()}:${process.pid} reports/pod-3  session 0x${holder.connection.sessionId}`);
    expect(((await whenAborted(lease.signal)) as LockLostError).reason).toBe('revoked');
    await lease.release();
    const nobody = await runCli(['revoke', `${root}/nightly`, '--connect', zkConnectString(), '--json']);
    expect(nobody).toMatchObject({ code: 3, stdout: '[]\n' });

    const secured = await engine({ auth: { credentials: 'ops:secret' } }, { parentAcl: SECURE_PARENT_ACL });
    const guarded = await new Mutex(secured, 'guarded', `${root}/guarded`, { revocable: true }).acquire();
    const refused = await runCli(['revoke', `${root}/guarded`, '--connect', zkConnectString()]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/not allowed \(NOAUTH\).*--auth/);
    expect(guarded.signal.aborted).toBe(false);
    expect(await runCli(['revoke', `${root}/guarded`, '--connect', zkConnectString(), '--auth', 'ops:secret'])).toMatchObject({ code: 0 });
    await guarded.release();
    expect((await runCli(['revoke', '--connect', zkConnectString()])).stderr).toMatch(/revoke needs the lock/);
  });

  it('says so when nothing is held, and refuses bad usage with exit code 1', async () => {
    const empty = await runCli(['locks', uniquePath('cli-none'), '--connect', zkConnectString()]);
    expect(empty).toMatchObject({ code: 0, stderr: '' });
    expect(empty.stdout).toMatch(/^No locks held under \/it\/cli-none-/);
    expect(await runCli(['locks', '--connect', zkConnectString(), '--json'].concat(['/it/none-at-all']))).toMatchObject({ code: 0, stdout: '[]\n' });

    const noEnsemble = await runCli(['locks']);
    expect(noEnsemble.code).toBe(1);
    expect(noEnsemble.stderr).toMatch(/no ensemble given/);
    expect((await runCli(['frobnicate', '--connect', zkConnectString()])).code).toBe(1);
    expect((await runCli(['locks', '--depth', 'x', '--connect', zkConnectString()])).code).toBe(1);
    const halfTls = await runCli(['locks', '--connect', zkConnectString(), '--tls-cert', '/etc/hostname']);
    expect(halfTls).toMatchObject({ code: 1, stderr: expect.stringMatching(/--tls-cert and --tls-key go together/) });
    const missingCa = await runCli(['locks', '--connect', zkConnectString(), '--tls-ca', '/nonexistent/ca.pem']);
    expect(missingCa).toMatchObject({ code: 1, stderr: expect.stringMatching(/--tls-ca: cannot read "\/nonexistent\/ca.pem" \(ENOENT\)/) });
    const tinyReplies = await runCli(['locks', '--connect', zkConnectString(), '--max-reply-bytes', '1000']);
    // It speaks of its flags, not of the connection options they set.
    expect(tinyReplies).toMatchObject({ code: 1, stderr: expect.stringMatching(/Invalid option "--max-reply-bytes": expected an integer from 1048575/) });
    const scheme = await runCli(['locks', '--connect', `zk://${zkConnectString()}`]);
    expect(scheme).toMatchObject({ code: 1, stderr: expect.stringMatching(/Invalid option "--connect": drop the "zk:\/\/"/) });
    const help = await runCli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: nestjs-zk-lock locks/);
  });

  it('exits with code 2 and a clear message when the ensemble is unreachable, within the timeout', async () => {
    const result = await runCli(['locks', '--connect', '127.0.0.1:1', '--timeout', '1500']);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/Cannot connect to ZooKeeper at 127\.0\.0\.1:1 \(unreachable\): no server answered within --timeout \(1500 ms\)/);
    expect(result.stderr).not.toContain('connectTimeoutMs');
    expect(result.ms).toBeLessThan(10_000);
    // A missing chroot is a connect failure too.
    const chroot = await runCli(['locks', '--connect', zkConnectString(), '--chroot', uniquePath('no-chroot')]);
    expect(chroot.code).toBe(2);
    expect(chroot.stderr).toMatch(/chroot-missing/);
  });
});

/** A minimal OpenTelemetry MeterProvider (the API only; no SDK installed) that records everything. */
class RecordingMeterProvider implements MeterProvider {
  readonly records: { instrument: string; value: number; attributes: Attributes }[] = [];
  readonly callbacks = new Map<string, Set<ObservableCallback>>();
  readonly meters: string[] = [];

  getMeter(name: string): Meter {
    this.meters.push(name);
    const record = (instrument: string) => (value: number, attributes: Attributes = {}) => {
      this.records.push({ instrument, value, attributes });
    };
    const observable = (instrument: string) => {
      const set = new Set<ObservableCallback>();
      this.callbacks.set(instrument, set);
      return { addCallback: (cb: ObservableCallback) => set.add(cb), removeCallback: (cb: ObservableCallback) => set.delete(cb) };
    };
    const meter = {
      createHistogram: (n: string) => ({ record: record(n) }) as Histogram,
      createCounter: (n: string) => ({ add: record(n) }) as Counter,
      createUpDownCounter: (n: string) => ({ add: record(n) }) as UpDownCounter,
      createGauge: (n: string) => ({ record: record(n) }),
      createObservableGauge: (n: string) => observable(n) as ObservableGauge,
      createObservableCounter: (n: string) => observable(n),
      createObservableUpDownCounter: (n: string) => observable(n),
      addBatchObservableCallback: () => undefined,
      removeBatchObservableCallback: () => undefined,
    };
    return meter as unknown as Meter;
  }

  /** Runs the observable callbacks of `instrument` (what a reader's collection does). */
  async observe(instrument: string): Promise<{ value: number; attributes: Attributes }[]> {
    const out: { value: number; attributes: Attributes }[] = [];
    const result: ObservableResult = { observe: (value, attributes = {}) => void out.push({ value, attributes }) };
    for (const cb of this.callbacks.get(instrument) ?? []) await cb(result);
    return out;
  }

  of(instrument: string) {
    return this.records.filter((r) => r.instrument === instrument);
  }
  sum(instrument: string, filter: (a: Attributes) => boolean = () => true): number {
    return this.of(instrument)
      .filter((r) => filter(r.attributes))
      .reduce((total, r) => total + r.value, 0);
  }
}

describe('enableZkLockMetrics', () => {
  it('records waits, holds, contention, losses and connection states through the global meter provider', async () => {
    const provider = new RecordingMeterProvider();
    expect(metrics.setGlobalMeterProvider(provider)).toBe(true);
    const stop = enableZkLockMetrics();
    try {
      expect(provider.meters).toEqual(['nestjs-zk-lock']);
      const connection = new ZkConnection({ connectString: zkConnectString(), sessionTimeoutMs: 5000 });
      await connection.connect();
      const e = new LockEngine(connection);
      const path = uniquePath('metrics');
      const mutex = () => new Mutex(e, 'm', path);

      const first = await mutex().acquire();
      const second = mutex().acquire(); // waits: contended
      await eventually(() => provider.of('zk_lock.contended').length === 1, 10_000, 10);
      await new Promise((r) => setTimeout(r, 30));
      await first.release();
      const got = await second;
      await expect(mutex().acquire({ waitMs: 0 })).rejects.toBeInstanceOf(LockNotAcquiredError);
      await got.release();
      // A lease that outlives its leaseMs is lost.
      const short = await new Mutex(e, 'short', `${path}-short`, { leaseMs: 50 }).acquire();
      await new Promise<void>((resolve) => short.signal.addEventListener('abort', () => resolve()));
      // A semaphore of 2 permits held and released; its internal lock is not reported.
      const pool = await new Semaphore(e, 'pool', `${path}-pool`, { permits: 2 }).acquire({ permits: 2 });
      expect(provider.sum('zk_lock.held', (a) => a['zk_lock.kind'] === 'semaphore')).toBe(1);
      await pool.release();

      const waits = provider.of('zk_lock.wait.duration');
      expect(waits.map((w) => [w.attributes['zk_lock.kind'], w.attributes['zk_lock.outcome']])).toEqual([
        ['mutex', 'acquired'],
        ['mutex', 'acquired'],
        ['mutex', 'timeout'],
        ['mutex', 'acquired'],
        ['semaphore', 'acquired'],
      ]);
      expect(waits[1]!.value).toBeGreaterThanOrEqual(25); // the second waited for the first
      expect(waits.every((w) => w.attributes['zk_lock.path'] === undefined)).toBe(true);

      const holds = provider.of('zk_lock.hold.duration');
      expect(holds.map((h) => [h.attributes['zk_lock.kind'], h.attributes['zk_lock.outcome']])).toEqual([
        ['mutex', 'released'],
        ['mutex', 'released'],
        ['mutex', 'lost'],
        ['semaphore', 'released'],
        ['semaphore', 'released'],
      ]);
      expect(holds[0]!.value).toBeGreaterThanOrEqual(25);
      const losses = provider.of('zk_lock.lost').map((r) => [r.value, r.attributes['zk_lock.lost.reason'], r.attributes['zk_lock.kind']]);
      expect(losses).toEqual([[1, 'lease-expired', 'mutex']]);
      // Everything acquired was let go, every acquire ended.
      expect(provider.sum('zk_lock.held')).toBe(0);
      expect(provider.sum('zk_lock.waiting')).toBe(0);
      expect(provider.of('zk_lock.held').map((r) => r.value).filter((v) => v > 0)).toHaveLength(4);
      expect(provider.of('zk_lock.waiting').filter((r) => r.value > 0)).toHaveLength(5);

      // Connection states: this connection's transitions, and the gauge.
      const transitions = provider
        .of('zk_lock.connection.transitions')
        .map((r) => `${r.attributes['zk_lock.connection.previous_state']}→${r.attributes['zk_lock.connection.state']}`);
      expect(transitions).toContain('connecting→connected');
      const connected = (await provider.observe('zk_lock.connection.state')).find((o) => o.attributes['zk_lock.connection.state'] === 'connected');
      expect(connected!.value).toBeGreaterThanOrEqual(1);
      await connection.close();
      expect(provider.of('zk_lock.connection.transitions').at(-1)!.attributes).toEqual({
        'zk_lock.connection.state': 'closed',
        'zk_lock.connection.previous_state': 'connected',
      });
      const after = (await provider.observe('zk_lock.connection.state')).find((o) => o.attributes['zk_lock.connection.state'] === 'connected');
      expect(after!.value).toBe(connected!.value - 1);
    } finally {
      stop();
      metrics.disable();
    }
    // Disabled: nobody listens, so the library publishes nothing (no cost), and nothing is recorded.
    expect(LockChannels.acquired.hasSubscribers).toBe(false);
    expect(LockChannels.connectionState.hasSubscribers).toBe(false);
    expect(provider.callbacks.get('zk_lock.connection.state')!.size).toBe(0);
    const before = provider.records.length;
    const e2 = await engine();
    await (await new Mutex(e2, 'm', uniquePath('metrics-off')).acquire()).release();
    expect(provider.records.length).toBe(before);
    stop(); // idempotent
  });

  // Holds were matched to their ends by path only: after a downgrade (write, then read on the same
  // path) the read's release counted against write, leaving write = -1 and read = +1.
  it('zk_lock.held by kind stays right through a read-write downgrade', async () => {
    const provider = new RecordingMeterProvider();
    const stop = enableZkLockMetrics(provider.getMeter('rw'));
    try {
      const rw = new ReadWriteLock(await engine(), 'rw', uniquePath('metrics-rw'));
      const heldOf = (kind: string) => provider.sum('zk_lock.held', (a) => a['zk_lock.kind'] === kind);
      let read!: Awaited<ReturnType<typeof rw.read.acquire>>;
      await rw.write.withLock(async () => {
        read = await rw.read.acquire({ waitMs: 5000 });
        expect([heldOf('write'), heldOf('read')]).toEqual([1, 1]);
      });
      expect([heldOf('write'), heldOf('read')]).toEqual([0, 1]);
      await read.release();
      expect([heldOf('write'), heldOf('read')]).toEqual([0, 0]);
    } finally {
      stop();
    }
  });

  it('takes an explicit meter, the path attribute and connections to observe', async () => {
    const provider = new RecordingMeterProvider();
    const meter = provider.getMeter('mine');
    const connection = await connect();
    const stop = enableZkLockMetrics(meter, { pathAttribute: true, connections: [connection] });
    try {
      const e = new LockEngine(connection);
      const path = uniquePath('metrics-path');
      await (await new Mutex(e, 'p', path).acquire()).release();
      expect(provider.of('zk_lock.wait.duration')[0]!.attributes).toEqual({ 'zk_lock.kind': 'mutex', 'zk_lock.outcome': 'acquired', 'zk_lock.path': path });
      const states = await provider.observe('zk_lock.connection.state');
      expect(states.filter((s) => s.value > 0)).toEqual([{ value: 1, attributes: { 'zk_lock.connection.state': 'connected' } }]);
      expect(states).toHaveLength(5);
    } finally {
      stop();
    }
  });
});
