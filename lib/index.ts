export * from './core/index.js';
export { ZkLockModule } from './nest/zk-lock.module.js';
export { LockService } from './nest/lock.service.js';
export type { ZkLockModuleOptions, ZkLockOptionsFactory, ZkLockConnectionSource } from './nest/zk-lock-module-options.interface.js';
export { ZK_LOCK_MODULE_OPTIONS } from './nest/zk-lock.module-definition.js';
export { WithLock, WITH_LOCK_METADATA } from './nest/with-lock.decorator.js';
export type { WithLockOptions } from './nest/with-lock-options.interface.js';
export type { LockKey } from './nest/lock-key.util.js';
export { ZkLockExceptionFilter } from './nest/zk-lock-exception.filter.js';
