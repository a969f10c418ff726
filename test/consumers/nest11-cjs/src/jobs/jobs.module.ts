import { Module } from '@nestjs/common';
import { SweepJob } from './sweep.job';

@Module({ providers: [SweepJob] })
export class JobsModule {}
