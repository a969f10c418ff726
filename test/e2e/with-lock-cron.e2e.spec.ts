import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Injectable, Module, type INestApplication, type LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { childrenOf, closeAll, connect, eventually, zkConnectString } from '../support/helpers.js';

afterAll(closeAll);

const INSTANCE = fileURLToPath(new URL('./fixtures/cron-instance.mjs', import.meta.url));

/** Runs per second, from "<second> <label>" lines. */
function runsPerSecond(lines: string[]): Map<number, string[]> {
  const bySecond = new Map<number, string[]>();
  for (const line of lines) {
    const [second, label] = line.split(' ');
    bySecond.set(Number(second), [...(bySecond.get(Number(second)) ?? []), label!]);
  }
  return bySecond;
}

function startInstance(args: string[]): Promise<{ exited: Promise<number | null> }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [INSTANCE, ...args], {
      env: { ...process.env, ZK_CONNECT: zkConnectString() },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise<number | null>((done) => child.on('exit', done));
    child.stdout.once('data', () => resolve({ exited }));
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`instance exited early (${code})`)));
  });
}

describe('@WithLock on @Cron jobs across application instances', () => {
  it.each(['lock-above', 'lock-below'])(
    'runs exactly once per tick across 3 separate processes (@WithLock %s @Cron)',
    async (order) => {
      const dir = await mkdtemp(join(tmpdir(), 'zk-cron-'));
      const runs = join(dir, 'runs');
      const lockName = `cron-${order}-${process.pid}`;
      try {
        const instances = await Promise.all(['a', 'b', 'c'].map((label) => startInstance([runs, lockName, order, label, '5500'])));
        await Promise.all(instances.map((i) => i.exited));
        const bySecond = runsPerSecond((await readFile(runs, 'utf8')).trim().split('\n'));
        // All three were up for at least ~4 whole ticks; every tick ran on exactly one of them.
        expect(bySecond.size).toBeGreaterThanOrEqual(4);
        for (const [, labels] of bySecond) expect(labels).toHaveLength(1);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    60_000,
  );

  it('runs a 1 ms job at most once per tick by default (no minHoldMs): 3 processes × 16 ticks', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'zk-cron-'));
    const runs = join(dir, 'runs');
    const lockName = `cron-default-${process.pid}`;
    try {
      const instances = await Promise.all(['a', 'b', 'c'].map((label) => startInstance([runs, lockName, 'lock-above', label, '16500', 'default'])));
      await Promise.all(instances.map((i) => i.exited));
      const bySecond = runsPerSecond((await readFile(runs, 'utf8')).trim().split('\n'));
      expect(bySecond.size).toBeGreaterThanOrEqual(14);
      const doubled = [...bySecond].filter(([, labels]) => labels.length > 1);
      expect(doubled).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('works the same in one process with instances in both decorator orders, and jobs skip quietly by default', async () => {
    const runs: number[] = [];
    const lockName = `cron-inproc-${process.pid}`;
    @Injectable()
    class Above {
      @WithLock(lockName, { minHoldMs: 500 }) // default for jobs: skip
      @Cron('* * * * * *')
      async run() {
        runs.push(Math.round(Date.now() / 1000));
      }
    }
    @Injectable()
    class Below {
      @Cron('* * * * * *')
      @WithLock(lockName, { minHoldMs: 500 })
      async run() {
        runs.push(Math.round(Date.now() / 1000));
      }
    }
    const apps = await Promise.all(
      [Above, Below, Above].map(async (job) => {
        @Module({ imports: [ScheduleModule.forRoot(), ZkLockModule.forRoot({ connectString: zkConnectString() })], providers: [job] })
        class AppModule {}
        const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
        moduleRef.useLogger(false);
        return moduleRef.createNestApplication().init();
      }),
    );
    const started = Date.now();
    while (new Set(runs).size < 4 && Date.now() - started < 20_000) await new Promise((r) => setTimeout(r, 100));
    await Promise.all(apps.map((a) => a.close()));
    const counts = [...runsPerSecond(runs.map((s) => `${s} x`)).values()].map((labels) => labels.length);
    expect(counts.length).toBeGreaterThanOrEqual(4);
    expect(counts.every((c) => c === 1)).toBe(true);
  }, 60_000);
});

describe("a job's default hold at shutdown", () => {
  it('keeps the lock until shortly before the next run, and lets it go at once when the app closes', async () => {
    const lockName = `cron-hold-${process.pid}`;
    @Injectable()
    class Hourly {
      @WithLock(lockName)
      @Cron('0 0 * * * *')
      async run() {
        return 'ran';
      }
    }
    @Module({ imports: [ZkLockModule.forRoot({ connectString: zkConnectString() })], providers: [Hourly] })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(false);
    const app = await moduleRef.createNestApplication().init();
    // Called by hand (the hourly tick is far): it runs, and its lock stays held for the default hold.
    await expect(app.get(Hourly).run()).resolves.toBe('ran');
    const observer = await connect();
    const path = `/locks/${lockName}`;
    expect(await childrenOf(observer, path)).toHaveLength(1);
    const closing = Date.now();
    await app.close();
    // Not the 10 s shutdownGraceMs: the job's work was done, only its hold remained.
    expect(Date.now() - closing).toBeLessThan(5000);
    expect(await childrenOf(observer, path)).toHaveLength(0);
  }, 60_000);
});

describe("a job's hold, from the reviewer's interleavings", () => {
  const apps: INestApplication[] = [];
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });

  async function start<T>(job: new () => T, options: { shutdownGraceMs?: number } = {}, logger: LoggerService | false = false): Promise<{ app: INestApplication; job: T }> {
    @Module({ imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), ...options })], providers: [job] })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(logger);
    const app = await moduleRef.createNestApplication().init();
    apps.push(app);
    return { app, job: app.get(job) };
  }

  it('a job still running when the app closes lets its lock go when it ends (no wait for shutdownGraceMs)', async () => {
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    @Injectable()
    class Slow {
      @WithLock(`hold-shutdown-${process.pid}`)
      @Interval(30_000)
      async run() {
        entered();
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
    }
    const warnings: string[] = [];
    const logger: LoggerService = { log: () => undefined, error: () => undefined, warn: (m: unknown) => void warnings.push(String(m)) };
    const { app, job } = await start(Slow, { shutdownGraceMs: 3000 }, logger);
    const running = job.run();
    await inside;
    const closing = performance.now();
    await app.close();
    apps.splice(apps.indexOf(app), 1);
    await running;
    expect(performance.now() - closing).toBeLessThan(2000);
    expect(warnings.filter((w) => w.includes('still held'))).toEqual([]);
  });

  it('a job that waits for the lock (waitMs) keeps no hold: every instance runs it in turn, at once', async () => {
    const ran: number[] = [];
    @Injectable()
    class Queued {
      @WithLock(`hold-wait-${process.pid}`, { waitMs: 10_000 })
      @Cron('0 0 * * * *')
      async run() {
        ran.push(performance.now());
      }
    }
    const instances = await Promise.all([start(Queued), start(Queued), start(Queued)]);
    const started = performance.now();
    await Promise.all(instances.map(({ job }) => job.run()));
    expect(ran).toHaveLength(3);
    expect(Math.max(...ran) - started).toBeLessThan(5000); // not after the hourly job's 60 s hold
  });

  it('a wall-clock step back during the job does not stretch its hold', async () => {
    const lockName = `hold-clock-${process.pid}`;
    const realNow = Date.now;
    @Injectable()
    class Stepped {
      @WithLock(lockName, { minHoldMs: 500 })
      @Cron('0 0 * * * *')
      async run() {
        Date.now = () => realNow() - 3_600_000; // NTP steps the clock back an hour mid-run
      }
    }
    const { job } = await start(Stepped);
    try {
      await job.run();
    } finally {
      Date.now = realNow;
    }
    const observer = await connect();
    await eventually(async () => (await childrenOf(observer, `/locks/${lockName}`)).length === 0, 5000);
  });
});

describe('the same jobs without @WithLock (control: the test above can fail)', () => {
  it('run on every instance each tick', async () => {
    const runs: number[] = [];
    @Injectable()
    class Unlocked {
      @Cron('* * * * * *')
      run() {
        runs.push(Math.round(Date.now() / 1000));
      }
    }
    const apps = await Promise.all(
      [1, 2, 3].map(async () => {
        @Module({ imports: [ScheduleModule.forRoot()], providers: [Unlocked] })
        class AppModule {}
        const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
        moduleRef.useLogger(false);
        return moduleRef.createNestApplication().init();
      }),
    );
    const started = Date.now();
    while (new Set(runs).size < 3 && Date.now() - started < 20_000) await new Promise((r) => setTimeout(r, 100));
    await Promise.all(apps.map((a) => a.close()));
    const counts = [...runsPerSecond(runs.map((s) => `${s} x`)).values()].map((labels) => labels.length);
    expect(Math.max(...counts)).toBe(3);
  }, 60_000);
});
