import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { ZkLockModule } from 'nestjs-zk-lock';
import { JobsModule } from './jobs/jobs.module.js';
import { TicketsModule } from './tickets/tickets.module.js';

// Nothing registered for errors: ZkLockModule answers contention with 409, a key ZooKeeper cannot take with 400.
@Module({
  imports: [
    ZkLockModule.forRoot({ connectString: process.env.ZK_CONNECT ?? '127.0.0.1:2181', app: 'nest12-vitest' }),
    ScheduleModule.forRoot(),
    TicketsModule,
    JobsModule,
  ],
})
export class AppModule {}
