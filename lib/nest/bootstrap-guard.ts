import { AsyncLocalStorage } from 'node:async_hooks';
import { Logger } from '@nestjs/common';
import { NestApplication, NestApplicationContext } from '@nestjs/core';
import { InstanceLoader } from '@nestjs/core/injector/instance-loader.js';

/** A session a bootstrap opened: closed if that bootstrap fails. */
export interface BootstrapSession {
  /** Stops what the module started (its log, and the connection when the module opened it). */
  abandon(reason: string): Promise<void>;
}

/** One application's bootstrap: the sessions its modules opened, and whether it failed. */
class Bootstrap {
  private readonly sessions = new Set<BootstrapSession>();
  private failure: string | undefined;

  join(session: BootstrapSession): void {
    if (this.failure === undefined) this.sessions.add(session);
    else void session.abandon(this.failure); // opened after the bootstrap had already failed
  }

  fail(error: unknown): void {
    this.failure ??= error instanceof Error ? error.message : String(error);
    for (const session of this.sessions) void session.abandon(this.failure);
    this.sessions.clear();
  }

  /** The application started: its shutdown hooks close the sessions from now on. */
  started(): void {
    this.sessions.clear();
  }
}

const building = new AsyncLocalStorage<Bootstrap>();
const byContainer = new WeakMap<object, Bootstrap>();
const GUARDED = Symbol.for('nestjs-zk-lock:bootstrap-guard');
const logger = new Logger('ZkLockModule');

/**
 * Nest calls no hook when an application fails to start: not when a provider cannot be built
 * (`NestFactory.create(..., { abortOnError: false })`, `Test.createTestingModule().compile()`), nor
 * when `init()` fails (an `onModuleInit` that throws). The session ZkLockModule opened during the
 * build would then stay open, and the native client's socket keeps the process alive. So the
 * module follows the build and the initialisation of its application (Nest's InstanceLoader and
 * `init()`, wrapped once per process) and closes its session when either fails.
 */
export function guardBootstraps(): void {
  wrap(InstanceLoader.prototype, 'createInstancesOfDependencies', function (this: { container?: object }, original, args) {
    const bootstrap = new Bootstrap();
    if (this.container) byContainer.set(this.container, bootstrap);
    return building.run(bootstrap, () => original.apply(this, args)).catch((error: unknown) => {
      bootstrap.fail(error);
      throw error;
    });
  });
  for (const prototype of [NestApplicationContext.prototype, NestApplication.prototype]) {
    wrap(prototype, 'init', function (this: { container?: object }, original, args) {
      const bootstrap = this.container ? byContainer.get(this.container) : undefined;
      return original.apply(this, args).then(
        (result) => {
          bootstrap?.started();
          return result;
        },
        (error: unknown) => {
          bootstrap?.fail(error);
          throw error;
        },
      );
    });
  }
}

/** Called by the module's connection provider while Nest builds it: ties the session to that bootstrap. */
export function joinBootstrap(session: BootstrapSession): void {
  building.getStore()?.join(session);
}

/** Says why a session goes before its application started. */
export function logAbandoned(description: string, reason: string): void {
  logger.warn(`Closing the ZooKeeper session to ${description}: the application failed to start (${reason.split('\n')[0]})`);
}

type Method = (...args: unknown[]) => Promise<unknown>;

function wrap(prototype: object, name: string, around: (this: any, original: Method, args: unknown[]) => Promise<unknown>): void {
  const target = prototype as Record<string | symbol, unknown>;
  const original = target[name];
  if (typeof original !== 'function' || (original as unknown as Record<symbol, unknown>)[GUARDED]) return;
  const wrapped = function (this: unknown, ...args: unknown[]) {
    return around.call(this, original as Method, args);
  };
  Object.defineProperty(wrapped, GUARDED, { value: true });
  Object.defineProperty(wrapped, 'name', { value: original.name });
  target[name] = wrapped;
}
