import { Module } from '@nestjs/common';
import { SweepJob } from './sweep.job.js';

@Module({ providers: [SweepJob] })
export class JobsModule {}
