import { BadRequestException, Controller, Get, Query } from '@nestjs/common';
import { JobsService, SNAPSHOT_JOB, type TickRuns } from './jobs.service.js';

@Controller('jobs')
export class JobsController {
  constructor(private readonly jobs: JobsService) {}

  /** Runs of the per-second cron job, per tick (from `since`, a Unix second). */
  @Get('cron-runs')
  cronRuns(@Query('since') since?: string): { job: string; ticks: TickRuns[] } {
    if (since !== undefined && !/^\d{1,12}$/.test(since)) throw new BadRequestException('since must be a Unix time in seconds');
    return { job: SNAPSHOT_JOB, ticks: this.jobs.cronRuns(since === undefined ? 0 : Number(since)) };
  }

  /** The sales report and who rebuilt it when. */
  @Get('sales-report')
  salesReport() {
    return this.jobs.report();
  }
}
