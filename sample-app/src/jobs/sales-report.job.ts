import { Injectable, Logger } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { Interval } from '@nestjs/schedule';
import { LockService } from 'nestjs-zk-lock';
import type { AppConfig } from '../config.js';
import { JobsService } from './jobs.service.js';

/**
 * Uses LockService directly (no decorator): every instance looks each second whether the sales
 * report is older than REPORT_EVERY_MS, and rebuilds it if so. The look and the rebuild are a
 * check-then-act, so they run under one lock: one try, and if another instance has it, that
 * instance is doing the work.
 */
@Injectable()
export class SalesReportJob {
  private readonly logger = new Logger(SalesReportJob.name);
  private readonly locksEnabled: boolean;

  constructor(
    private readonly locks: LockService,
    private readonly jobs: JobsService,
    config: ConfigService<AppConfig, true>,
  ) {
    this.locksEnabled = config.get('LOCKS', { infer: true });
  }

  @Interval(1000)
  async run(): Promise<void> {
    if (!this.locksEnabled) {
      this.jobs.rebuildReportIfStale(undefined); // LOCKS=off: the demo's comparison run
      return;
    }
    try {
      const lease = await this.locks.mutex('jobs:sales-report').tryAcquire();
      if (!lease) return; // another instance holds it
      try {
        if (!lease.signal.aborted) this.jobs.rebuildReportIfStale(lease.fencingToken);
      } finally {
        await lease.release();
      }
    } catch (error) {
      this.logger.warn(`Sales report not rebuilt: ${(error as Error).message}`);
    }
  }
}
