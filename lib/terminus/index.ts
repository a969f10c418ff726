/**
 * `nestjs-zk-lock/terminus`: a health indicator for @nestjs/terminus (an optional peer; the main
 * entry never loads it).
 */
import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { ZkLockHealthIndicator } from './zk-lock.health.js';

export { ZkLockHealthIndicator, type ZkLockHealthOptions } from './zk-lock.health.js';

/**
 * Provides `ZkLockHealthIndicator` (and Terminus' own services). It finds the application's
 * `ZkLockModule` connection wherever it was imported, global or not.
 * @publicApi
 */
@Module({
  imports: [TerminusModule],
  providers: [ZkLockHealthIndicator],
  exports: [ZkLockHealthIndicator, TerminusModule],
})
export class ZkLockHealthModule {}
