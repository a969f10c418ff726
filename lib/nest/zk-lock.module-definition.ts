import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { InvalidOptionError } from '../core/errors.js';
import { ErrorAnswerInterceptor } from './error-answer.interceptor.js';
import type { AnswerSettings } from './error-answers.js';
import { moduleExceptionFilter } from './zk-lock-exception.filter.js';
import type { ZkLockAnswerOptions, ZkLockModuleExtras, ZkLockModuleOptions } from './zk-lock-module-options.interface.js';

/**
 * Options that decide which providers the module has, so they sit beside `useFactory` in
 * `forRootAsync` (as `isGlobal` does); in the options a factory returns they come too late.
 */
export const ANSWER_EXTRAS = ['answerErrors', 'answerLockNames'] as const;

function flag(extras: Partial<ZkLockAnswerOptions>, option: keyof ZkLockAnswerOptions, fallback: boolean): boolean {
  const value = extras[option];
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new InvalidOptionError(option, `expected true or false, got ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`);
  return value;
}

/**
 * The global interceptor and filter that answer the library's errors (docs/with-lock.md), unless
 * `answerErrors: false`; ZkLockTestingModule registers them too.
 */
export function errorAnswerProviders(options: Partial<ZkLockAnswerOptions>): Provider[] {
  const settings: AnswerSettings = { lockNames: flag(options, 'answerLockNames', false) };
  if (!flag(options, 'answerErrors', true)) return [];
  return [
    { provide: APP_INTERCEPTOR, inject: [HttpAdapterHost], useFactory: (host: HttpAdapterHost) => new ErrorAnswerInterceptor(host, settings) },
    // Errors raised outside a handler (guards, middleware) and every RPC answer.
    { provide: APP_FILTER, inject: [HttpAdapterHost], useFactory: (host: HttpAdapterHost) => moduleExceptionFilter(host, settings) },
  ];
}

export const {
  ConfigurableModuleClass: ZkLockConfigurableModule,
  MODULE_OPTIONS_TOKEN: ZK_LOCK_MODULE_OPTIONS,
} = new ConfigurableModuleBuilder<ZkLockModuleOptions>({ moduleName: 'ZkLock' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createZkLockOptions')
  .setExtras<ZkLockModuleExtras>({ isGlobal: true, answerErrors: true, answerLockNames: false }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
    providers: [...(definition.providers ?? []), ...errorAnswerProviders(extras)],
  }))
  .build();
