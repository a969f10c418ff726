import { Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { ClientDisconnectInterceptor } from './client-disconnect.interceptor.js';
import { LockEngine } from '../core/lock-engine.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import { LockService } from './lock.service.js';
import { WithLockExplorer } from './with-lock.explorer.js';
import { LeaderElections } from './leader-elections.js';
import { LeadershipExplorer } from './leadership.explorer.js';
import { ZkLockConfigurableModule } from './zk-lock.module-definition.js';
import { guardBootstraps } from './bootstrap-guard.js';
import { connectionProvider, engineProvider, ModuleConnection, moduleConnectionProvider, OWNS_CONNECTION, ownsConnectionProvider } from './zk-lock.providers.js';

guardBootstraps();

/**
 * Owns one ZooKeeper session for the application: opens it during bootstrap, releases held locks
 * and closes it on shutdown (`app.close()`, or a signal with `app.enableShutdownHooks()`).
 * @publicApi
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    moduleConnectionProvider,
    connectionProvider,
    ownsConnectionProvider,
    engineProvider,
    LockService,
    LeaderElections,
    WithLockExplorer,
    LeadershipExplorer,
    { provide: APP_INTERCEPTOR, useClass: ClientDisconnectInterceptor },
  ],
  exports: [ZkConnection, LockEngine, LockService, LeaderElections],
})
export class ZkLockModule extends ZkLockConfigurableModule implements OnApplicationShutdown {
  constructor(
    private readonly engine: LockEngine,
    private readonly connection: ZkConnection,
    @Inject(OWNS_CONNECTION) private readonly ownsConnection: boolean,
    private readonly moduleConnection: ModuleConnection,
    private readonly locks: LockService,
  ) {
    super();
  }

  /**
   * After Nest closed the HTTP server (and other transports), so requests in flight finished with
   * locks working: then locks kept only for `minHoldMs` go, held locks get `shutdownGraceMs` (e.g. running cron jobs), their signals
   * abort, their nodes go, and the session closes.
   */
  async onApplicationShutdown(): Promise<void> {
    this.locks.releaseHeldForMinimum();
    await this.engine.shutdown();
    this.moduleConnection.close();
    if (this.ownsConnection) await this.connection.close();
  }
}
