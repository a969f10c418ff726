import { Module } from '@nestjs/common';
import { JobsController } from './jobs.controller.js';
import { JobsService } from './jobs.service.js';
import { SalesReportJob } from './sales-report.job.js';

@Module({
  controllers: [JobsController],
  providers: [JobsService, SalesReportJob],
  exports: [JobsService],
})
export class JobsModule {}
