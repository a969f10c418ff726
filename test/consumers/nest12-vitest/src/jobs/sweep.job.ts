import { Injectable } from '@nestjs/common';
import { Cron, Interval } from '@nestjs/schedule';
import { LeaderContext, LockContext, OnlyLeader, WithLock } from 'nestjs-zk-lock';

export interface JobRun {
  readonly at: number;
  readonly name: string | undefined;
  readonly path: string | undefined;
  readonly fencingToken: bigint | undefined;
}

@Injectable()
export class SweepJob {
  readonly sweeps: JobRun[] = [];
  readonly reports: JobRun[] = [];

  /** Every second, on one instance per tick: the others skip it. */
  @Cron('* * * * * *')
  @WithLock('jobs:sweep')
  async sweep(): Promise<void> {
    const lock = LockContext.current();
    this.sweeps.push({ at: Date.now(), name: lock?.name, path: lock?.path, fencingToken: lock?.fencingToken });
  }

  /** Every 100 ms, on the instance that leads the election 'jobs:report' only. */
  @Interval(100)
  @OnlyLeader('jobs:report')
  async report(): Promise<void> {
    const term = LeaderContext.current();
    this.reports.push({ at: Date.now(), name: term?.election, path: term?.path, fencingToken: term?.fencingToken });
  }
}
