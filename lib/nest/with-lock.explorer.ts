import { Inject, Injectable, Logger, Optional, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { LockService } from './lock.service.js';
import { isTemplate } from './lock-key.util.js';
import { EVENT_LISTENER_METADATA, LOCK_SERVICE_PROPERTY, WITH_LOCK_METADATA, type WithLockMetadata } from './with-lock.decorator.js';
import { SCHEDULER_TYPE } from './job-schedule.js';
import { providerMethods } from './provider-methods.util.js';
import { LockUsageError } from '../core/errors.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import { closeOwnedConnectionOnError, OWNS_CONNECTION } from './zk-lock.providers.js';

/**
 * At startup, finds every @WithLock method of the application's providers and controllers,
 * validates static lock names (a bad name fails the bootstrap, not the first call) and logs an
 * inventory. It does not wrap anything: the decorator already did.
 */
@Injectable()
export class WithLockExplorer implements OnModuleInit {
  private readonly logger = new Logger('WithLock');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly locks: LockService,
    @Optional() private readonly connection?: ZkConnection,
    @Optional() @Inject(OWNS_CONNECTION) private readonly ownsConnection?: boolean,
  ) {}

  async onModuleInit(): Promise<void> {
    const found = await closeOwnedConnectionOnError(this.connection, this.ownsConnection, () => this.inventory());
    for (const { label, key, options } of found) {
      if (typeof key === 'string' && !isTemplate(key)) this.locks.pathOf(key); // throws InvalidLockNameError
      this.logger.debug?.(`${label} → ${typeof key === 'string' ? key : 'key function'} (${options.kind ?? 'mutex'})`);
    }
    if (found.length > 0) this.logger.log(`${found.length} method(s) run under @WithLock: ${found.map((f) => f.label).join(', ')}`);
  }

  /**
   * Every decorated method, once each. A provider built by `useFactory`/`useValue` never gets
   * property injection: its decorated methods would fail at their first call, so the bootstrap
   * fails here instead.
   */
  inventory(): WithLockMetadata[] {
    const out: WithLockMetadata[] = [];
    for (const { wrapper, instance, method } of providerMethods(this.discovery, this.scanner)) {
      const metadata = Reflect.getMetadata(WITH_LOCK_METADATA, method) as WithLockMetadata | undefined;
      if (!metadata) continue;
      const injected = builtPerConsumer(wrapper) ? lockServiceVisibleFrom(wrapper) : instance[LOCK_SERVICE_PROPERTY] instanceof LockService;
      if (!injected && wrapper.metatype === instance.constructor) {
        const host = wrapper.host?.name ?? 'its module';
        throw new LockUsageError(
          `@WithLock on ${metadata.label}: ${host} cannot see LockService (ZkLockModule was registered with ` +
            `isGlobal: false and nothing ${host} imports exports it). Import into ${host} a module that ` +
            're-exports it (`@Module({ imports: [ZkLockModule.forRoot(...)], exports: [ZkLockModule] })`), ' +
            'or leave ZkLockModule global (the default).',
        );
      }
      if (!injected) {
        throw new LockUsageError(
          `@WithLock on ${metadata.label}: provider ${String(wrapper.name)} was not built from its class by Nest ` +
            '(useFactory or useValue), so LockService was never injected into it; register the class ' +
            '(`providers: [' + metadata.label.split('.')[0] + ']` or `useClass`).',
        );
      }
      const discarded = [SCHEDULER_TYPE, EVENT_LISTENER_METADATA].some((k) => Reflect.getMetadata(k, method) !== undefined);
      if (metadata.returnsObservable && discarded) {
        // Schedulers and event emitters ignore what the method returns: nobody would subscribe,
        // so the body (which runs per subscription, under the lock) would never run.
        throw new LockUsageError(
          `@WithLock on ${metadata.label}: a job or event listener declared to return an Observable never runs ` +
            '(nobody subscribes to what it returns); return a Promise (declare it async).',
        );
      }
      if (metadata.wrapper && method !== metadata.wrapper) {
        // A decorator above @WithLock wrapped the method again (copying our metadata): its work,
        // e.g. a transaction's commit, runs after the lock is released.
        this.logger.warn(
          `${metadata.label}: a decorator above @WithLock wraps this method, so what it does after the call ` +
            '(e.g. commit a transaction) happens after the lock is released. Put @WithLock above it.',
        );
      }
      out.push(metadata);
    }
    return out;
  }
}

/**
 * A request-scoped provider (or one that depends on one) or a transient one: Nest builds its
 * instances per request or per consumer, with their properties injected, and `wrapper.instance`
 * is only a placeholder made from the prototype (no injection), so it says nothing.
 */
function builtPerConsumer(wrapper: InstanceWrapper): boolean {
  return wrapper.isTransient || !wrapper.isDependencyTreeStatic();
}

/**
 * Whether LockService is visible from the provider's module, as Nest looks a dependency up (its
 * own providers, then what its imports export, through re-exported modules): a scoped provider's
 * properties are injected when an instance is built, and its placeholder has none.
 */
function lockServiceVisibleFrom(wrapper: InstanceWrapper): boolean {
  const host = wrapper.host as NestModule | undefined;
  if (!host) return true; // nothing to check against: the call itself fails closed
  return host.providers.has(LockService) || exportedByImports(host, LockService, new Set(), false);
}

/** The parts of Nest's Module the lookup reads. */
interface NestModule {
  id: string;
  metatype: unknown;
  providers: Map<unknown, unknown>;
  exports: Set<unknown>;
  imports: Set<NestModule | undefined>;
}

function exportedByImports(module: NestModule, token: unknown, seen: Set<string>, traversing: boolean): boolean {
  for (const related of module.imports ?? []) {
    if (!related || seen.has(related.id)) continue;
    if (traversing && !module.exports.has(related.metatype)) continue;
    seen.add(related.id);
    if (related.exports.has(token) && related.providers.has(token)) return true;
    if (exportedByImports(related, token, seen, true)) return true;
  }
  return false;
}
