import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { LockContext, WithLock } from 'nestjs-zk-lock';
import { JobsService } from './jobs.service.js';

/**
 * Every second, on one instance per tick: every instance's cron fires, the first to create its
 * lock node runs, the others skip the tick quietly (the default for jobs). The lock is kept until
 * shortly before the next tick (the default hold for jobs, read from the schedule), so that an
 * instance whose tick fires a little later still finds it taken.
 */
@Injectable()
export class SalesSnapshotJob {
  constructor(private readonly jobs: JobsService) {}

  @Cron('* * * * * *')
  @WithLock('jobs:sales-snapshot')
  async snapshot(): Promise<void> {
    if (LockContext.current()?.signal.aborted) return; // lost the lock before we started
    this.jobs.recordSnapshot(JobsService.tickOf());
  }
}

/** LOCKS=off only (the demo's comparison run): the same job without the lock. */
@Injectable()
export class UnlockedSalesSnapshotJob {
  constructor(private readonly jobs: JobsService) {}

  @Cron('* * * * * *')
  snapshot(): void {
    this.jobs.recordSnapshot(JobsService.tickOf());
  }
}
