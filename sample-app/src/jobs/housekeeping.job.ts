import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { LeaderContext, OnlyLeader } from 'nestjs-zk-lock';
import { HOUSEKEEPING_JOB, JobsService } from './jobs.service.js';

/**
 * Every second, on the leader of the 'jobs:housekeeping' election only: one instance runs it
 * tick after tick (not whichever fires first), and another takes over when that one stops.
 */
@Injectable()
export class HousekeepingJob {
  constructor(private readonly jobs: JobsService) {}

  @Cron('* * * * * *')
  @OnlyLeader('jobs:housekeeping')
  async sweep(): Promise<void> {
    if (LeaderContext.current()?.signal.aborted) return; // leadership ended before we started
    this.jobs.recordRun(HOUSEKEEPING_JOB, JobsService.tickOf());
  }
}
