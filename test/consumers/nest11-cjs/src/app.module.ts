import { Module } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { ZkLockExceptionFilter, ZkLockModule } from 'nestjs-zk-lock';
import { JobsModule } from './jobs/jobs.module';
import { TicketsModule } from './tickets/tickets.module';

@Module({
  imports: [
    ZkLockModule.forRoot({ connectString: process.env.ZK_CONNECT ?? '127.0.0.1:2181', app: 'nest11-cjs' }),
    ScheduleModule.forRoot(),
    TicketsModule,
    JobsModule,
  ],
  providers: [{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
})
export class AppModule {}
