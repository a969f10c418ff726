import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { ZkLockModuleOptions } from './zk-lock-module-options.interface.js';

export const {
  ConfigurableModuleClass: ZkLockConfigurableModule,
  MODULE_OPTIONS_TOKEN: ZK_LOCK_MODULE_OPTIONS,
} = new ConfigurableModuleBuilder<ZkLockModuleOptions>({ moduleName: 'ZkLock' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createZkLockOptions')
  .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
