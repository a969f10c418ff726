export * from './core/index.js';
export { ZkLockModule } from './nest/zk-lock.module.js';
export { LockService } from './nest/lock.service.js';
export type { ZkLockModuleOptions, ZkLockOptionsFactory, ZkLockConnectionSource } from './nest/zk-lock-module-options.interface.js';
export { ZK_LOCK_MODULE_OPTIONS } from './nest/zk-lock.module-definition.js';
