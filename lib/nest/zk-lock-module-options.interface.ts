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

/**
 * Options that shape the module itself: `forRoot({ ..., answerErrors: false })`, and in
 * `forRootAsync` beside `useFactory` (`forRootAsync({ useFactory, inject, answerErrors: false })`),
 * not in the options the factory returns.
 * @publicApi
 */
export interface ZkLockModuleExtras extends ZkLockAnswerOptions {
  /** Default true: the module is global (feature modules inject LockService without importing it). */
  isGlobal: boolean;
}

/** How the library's errors answer callers (ZkLockModule and ZkLockTestingModule). @publicApi */
export interface ZkLockAnswerOptions {
  /**
   * Default true: the library's errors answer HTTP, RPC and WebSocket callers with their meaning,
   * with no setup: 409 (lock not acquired) and 503 (ZooKeeper away, not the leader) with
   * `Retry-After`, 400 (the request cannot name a lock), each with a machine-readable `reason`
   * (see docs/with-lock.md). The module registers a global interceptor and a global exception
   * filter limited to those errors; every other error passes through untouched. false: it
   * registers neither, for applications that map the library's errors themselves
   * (`ZkLockExceptionFilter` stays available to register by hand).
   */
  answerErrors: boolean;
  /**
   * Default false: answers never name the lock (its name may carry request input, and its path the
   * base path). true: they carry `lockName` (at most 64 characters of it), and a 400 quotes the
   * name it refused.
   */
  answerLockNames: boolean;
}
