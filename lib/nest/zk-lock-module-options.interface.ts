import type { ZkConnectionOptions } from '../core/connection/connection-options.js';
import type { LockEngineOptions } from '../core/lock-engine.js';
import type { ZkConnection } from '../core/connection/zk-connection.js';

/** Either connection options (the module owns the session) or a connection you own. */
export type ZkLockConnectionSource = ZkConnectionOptions | { connection: ZkConnection };

/**
 * Options of `ZkLockModule.forRoot` / the factory of `forRootAsync`.
 * @publicApi
 */
export type ZkLockModuleOptions = ZkLockConnectionSource & LockEngineOptions & ZkLockBootOptions & ZkLockLeadershipOptions;

/** @publicApi */
export interface ZkLockBootOptions {
  /**
   * Default true: bootstrap waits for the first session (up to `connectTimeoutMs`) and fails
   * without it. false: the application starts at once and the session is opened in the
   * background, retrying until it connects; until then each lock call waits up to its `waitMs`
   * for the session, then fails with reason `connection` (503), and scheduled jobs skip their
   * runs with a warning.
   */
  waitForConnection?: boolean;
}

/** For `forRootAsync({ useClass })`. @publicApi */
export interface ZkLockOptionsFactory {
  createZkLockOptions(): ZkLockModuleOptions | Promise<ZkLockModuleOptions>;
}

/** @publicApi */
export interface ZkLockLeadershipOptions {
  /**
   * This application's id in every leader election it joins through `@OnlyLeader`, the leadership
   * hooks or `LeaderElections`: its nodes' data, which `participants()`, `leader()`, `inspect()`
   * and Curator's LeaderLatch read as the participant id. A non-empty string. Default
   * `<host>:<pid>` (`<host>:<pid>#<n>` for the process's n-th connection); set it where that does
   * not tell instances apart, e.g. containers that all run as pid 1 under one hostname (the pod
   * name is a good choice). `locks.leadership(name, { participantId })` takes its own.
   */
  participantId?: string;
}
