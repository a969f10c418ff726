import type { ZkConnectionOptions } from '../core/connection-options.js';
import type { LockEngineOptions } from '../core/lock-engine.js';
import type { ZkConnection } from '../core/zk-connection.js';

/** Either connection options (the module owns the session) or a connection you own. */
export type ZkLockConnectionSource = ZkConnectionOptions | { connection: ZkConnection };

/**
 * Options of `ZkLockModule.forRoot` / the factory of `forRootAsync`.
 * @publicApi
 */
export type ZkLockModuleOptions = ZkLockConnectionSource & LockEngineOptions;

/** For `forRootAsync({ useClass })`. @publicApi */
export interface ZkLockOptionsFactory {
  createZkLockOptions(): ZkLockModuleOptions | Promise<ZkLockModuleOptions>;
}
