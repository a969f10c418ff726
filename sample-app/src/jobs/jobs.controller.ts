import { BadRequestException, Controller, Get, Query } from '@nestjs/common';
import { HOUSEKEEPING_JOB, JobsService, SNAPSHOT_JOB, type TickRuns } from './jobs.service.js';

@Controller('jobs')
export class JobsController {
  constructor(private readonly jobs: JobsService) {}

  /** Runs of a per-second job (`job`: the snapshot job, or `housekeeping`, the leader's), per tick (from `since`, a Unix second). */
  @Get('cron-runs')
  cronRuns(@Query('since') since?: string, @Query('job') job: string = SNAPSHOT_JOB): { job: string; ticks: TickRuns[] } {
    if (since !== undefined && !/^\d{1,12}$/.test(since)) throw new BadRequestException('since must be a Unix time in seconds');
    if (job !== SNAPSHOT_JOB && job !== HOUSEKEEPING_JOB) throw new BadRequestException(`job must be ${SNAPSHOT_JOB} or ${HOUSEKEEPING_JOB}`);
    return { job, ticks: this.jobs.cronRuns(since === undefined ? 0 : Number(since), job) };
  }

  /** The sales report and who rebuilt it when. */
  @Get('sales-report')
  salesReport() {
    return this.jobs.report();
  }
}
