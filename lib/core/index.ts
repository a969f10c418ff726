/** The framework-free core: connection and lock recipes, usable without Nest. */
export * from './errors.js';
export { ZkError, ZkCode } from './zk-error.js';
export { ZkSession, CreateMode, ZkPerm, type ZkAcl, type ZkStat, type WatchListener, type WatchEventType } from './zk-session.js';
export { ZkConnection, type ConnectionState, type ConnectionEvents, type SessionLostReason } from './zk-connection.js';
export { type ZkConnectionOptions, type ZkAuth, CONNECTION_DEFAULTS } from './connection-options.js';
export { LockEngine, SECURE_PARENT_ACL, type LockEngineOptions } from './lock-engine.js';
export { resolveLockPath, validateZkPath, sortChildren, sortKey } from './lock-path.js';
export { type AcquireOptions } from './lock-queue.js';
export { type Lease } from './lease.js';
export { type Lockable, LockRecipe } from './lock-recipe.js';
export { Mutex, type MutexOptions } from './mutex.js';
export { Semaphore, type SemaphoreOptions, type SemaphoreAcquireOptions } from './semaphore.js';
export { ReadWriteLock, ReadLock, WriteLock, type ReadWriteLockOptions } from './read-write-lock.js';
export { MultiLock } from './multi-lock.js';
export { LeaseGroup } from './multi-lease.js';
export { LockContext, type LockContextValue } from './lock-context.js';
export { parseHolderData, type HolderInfo } from './holder-data.js';
export { LockChannels } from './diagnostics.js';
