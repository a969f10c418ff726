import type { ZkConnectionOptions } from '../core/connection-options.js';
import type { LockEngineOptions } from '../core/lock-engine.js';
import type { ZkConnection } from '../core/zk-connection.js';

/** Either connection options (the module owns the session) or a connection you own. */
export type ZkLockConnectionSource = ZkConnectionOptions | { connection: ZkConnection };

/**
 * Options of `ZkLockModule.forRoot` / the factory of `forRootAsync`.
 * @publicApi
 */
export type ZkLockModuleOptions = ZkLockConnectionSource & LockEngineOptions & ZkLockBootOptions;

/** @publicApi */
export interface ZkLockBootOptions {
  /**
   * Default true: bootstrap waits for the first session (up to `connectTimeoutMs`) and fails
   * without it. false: the application starts at once and the session is opened in the
   * background, retrying until it connects; until then lock calls fail with reason `connection`
   * (503 through `ZkLockExceptionFilter`) and scheduled jobs skip their runs with a warning.
   */
  waitForConnection?: boolean;
}

/** For `forRootAsync({ useClass })`. @publicApi */
export interface ZkLockOptionsFactory {
  createZkLockOptions(): ZkLockModuleOptions | Promise<ZkLockModuleOptions>;
}
