import { ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { LockService } from 'nestjs-zk-lock';
import { ZkLockTestingModule } from 'nestjs-zk-lock/testing';
import { describe, expect, it } from 'vitest'; // optional: nest new's vitest.config.ts sets globals: true
import { JobsModule } from './jobs.module.js';
import { SweepJob } from './sweep.job.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
async function until(check: () => boolean, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !check(); await sleep(20)) if (Date.now() > end) throw new Error('timed out');
}

// The jobs as @nestjs/schedule runs them, over nestjs-zk-lock/testing's in-memory ZooKeeper.
describe('SweepJob (unit, @nestjs/schedule + nestjs-zk-lock/testing)', () => {
  it('runs the @Cron job under its lock, skips its ticks while the lock is held elsewhere, and runs the @Interval job as leader', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot(), ScheduleModule.forRoot(), JobsModule] }).compile();
    await moduleRef.init();
    const job = moduleRef.get(SweepJob);
    await until(() => job.sweeps.length > 0 && job.reports.length > 0);
    expect(job.sweeps[0]).toMatchObject({ name: 'jobs:sweep', fencingToken: expect.any(BigInt) });
    expect(job.reports[0]).toMatchObject({ name: 'jobs:report', fencingToken: expect.any(BigInt) });

    // Another holder (as another instance would): the ticks are skipped until it lets go.
    const lease = await moduleRef.get(LockService).mutex('jobs:sweep').acquire({ waitMs: 5_000 });
    const before = job.sweeps.length;
    await sleep(2_100);
    expect(job.sweeps.length).toBe(before);
    await lease.release();
    await until(() => job.sweeps.length > before, 5_000);
    await moduleRef.close();
  }, 30_000);
});
