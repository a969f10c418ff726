import { Module } from '@nestjs/common';
import { ConditionalModule, ConfigModule, ConfigService } from '@nestjs/config';
import { ScheduleModule } from '@nestjs/schedule';
import { ZkLockModule } from 'nestjs-zk-lock';
import { locksEnabled, metricsMode, validateConfig, type AppConfig } from './config.js';
import { DatabaseModule } from './database/database.module.js';
import { EventsModule } from './events/events.module.js';
import { PurchaseController } from './events/purchase.controller.js';
import { UnlockedPurchaseController } from './events/unlocked-purchase.controller.js';
import { JobsModule } from './jobs/jobs.module.js';
import { SalesSnapshotJob, UnlockedSalesSnapshotJob } from './jobs/sales-snapshot.job.js';
import { HousekeepingJob } from './jobs/housekeeping.job.js';
import { LocksController } from './locks/locks.controller.js';
import { MetricsModule } from './metrics/metrics.module.js';

/** The purchase route and the per-second jobs, under locks and leadership (the normal case). */
@Module({ imports: [EventsModule, JobsModule], controllers: [PurchaseController], providers: [SalesSnapshotJob, HousekeepingJob] })
export class LockedSalesModule {}

/** LOCKS=off: the same route and job without locks, for the demo's comparison run. */
@Module({ imports: [EventsModule, JobsModule], controllers: [UnlockedPurchaseController], providers: [UnlockedSalesSnapshotJob] })
export class UnlockedSalesModule {}

@Module({
  imports: [
    ConfigModule.forRoot({ isGlobal: true, ignoreEnvFile: true, validate: validateConfig }),
    ZkLockModule.forRootAsync({
      inject: [ConfigService],
      useFactory: (config: ConfigService<AppConfig, true>) => ({
        connectString: config.get('ZK_CONNECT', { infer: true }),
        basePath: config.get('LOCK_BASE_PATH', { infer: true }),
        app: 'ticket-sale',
        instance: config.get('INSTANCE', { infer: true }),
      }),
      isGlobal: true,
    }),
    ScheduleModule.forRoot(),
    DatabaseModule,
    EventsModule,
    JobsModule,
    ConditionalModule.registerWhen(LockedSalesModule, (env) => locksEnabled(env), { debug: false }),
    ConditionalModule.registerWhen(UnlockedSalesModule, (env) => !locksEnabled(env), { debug: false }),
    // METRICS=prometheus: GET /metrics; otherwise the module (and the OpenTelemetry SDK) is not loaded.
    ConditionalModule.registerWhen(MetricsModule, (env) => metricsMode(env) === 'prometheus', { debug: false }),
  ],
  // ZkLockModule answers LockNotAcquiredError (the seat's lock not taken within LOCK_WAIT_MS) with 409 and Retry-After.
  controllers: [LocksController],
})
export class AppModule {}
