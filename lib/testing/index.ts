/**
 * `nestjs-zk-lock/testing`: the real LockService over an in-memory ZooKeeper, for unit tests of
 * code that uses `LockService` or `@WithLock`, without a ZooKeeper server or the native addon.
 */
import { Module, type DynamicModule } from '@nestjs/common';
import { APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { ClientDisconnectInterceptor } from '../nest/client-disconnect.interceptor.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import { LockService } from '../nest/lock.service.js';
import { WithLockExplorer } from '../nest/with-lock.explorer.js';
import { LeaderElections } from '../nest/leader-elections.js';
import { LeadershipExplorer } from '../nest/leadership.explorer.js';
import { FAKE_LOCK_OPTIONS, FakeLockService, type FakeLockServiceOptions } from './fake-lock.service.js';
import { errorAnswerProviders } from '../nest/zk-lock.module-definition.js';
import type { ZkLockAnswerOptions } from '../nest/zk-lock-module-options.interface.js';

export { FakeLockService, FakeLockStore, FAKE_LOCK_OPTIONS, type FakeLockServiceOptions } from './fake-lock.service.js';
export { InMemoryZooKeeper, type InMemoryZooKeeperOptions, type InMemorySessionInfo } from './in-memory-zookeeper.js';

/** @publicApi */
export interface ZkLockTestingModuleOptions extends FakeLockServiceOptions, Partial<ZkLockAnswerOptions> {
  /** Register LockService globally (default true, so every module under test can inject it). */
  isGlobal?: boolean;
}

/**
 * Stands in for `ZkLockModule` in tests: provides `LockService` as a `FakeLockService` (the real
 * service over an in-memory ZooKeeper; also injectable as `FakeLockService`, for its test helpers)
 * and `ZkConnection`, and checks `@WithLock` methods at startup like the real module.
 *
 * ```ts
 * Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot(), SalesModule] })
 * ```
 * @publicApi
 */
@Module({})
export class ZkLockTestingModule {
  static forRoot(options: ZkLockTestingModuleOptions = {}): DynamicModule {
    const { isGlobal = true, answerErrors, answerLockNames, ...fakeOptions } = options;
    return {
      module: ZkLockTestingModule,
      global: isGlobal,
      imports: [DiscoveryModule],
      providers: [
        { provide: FAKE_LOCK_OPTIONS, useValue: fakeOptions },
        FakeLockService,
        { provide: LockService, useExisting: FakeLockService },
        { provide: ZkConnection, inject: [FakeLockService], useFactory: (locks: FakeLockService) => locks.connection },
        WithLockExplorer,
        LeaderElections,
        LeadershipExplorer,
        // As ZkLockModule: a request whose client disconnects stops waiting for its lock, and
        // the library's errors answer as in production (409, 503, 400).
        { provide: APP_INTERCEPTOR, useClass: ClientDisconnectInterceptor },
        ...errorAnswerProviders({ answerErrors, answerLockNames }),
      ],
      exports: [LockService, FakeLockService, ZkConnection, LeaderElections],
    };
  }
}
