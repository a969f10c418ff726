import { Inject, Injectable, Logger, Optional, type OnApplicationBootstrap, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { LockUsageError } from '../core/errors.js';
import { LeaderElections } from './leader-elections.js';
import { LockService } from './lock.service.js';
import {
  LEADER_ELECTIONS_PROPERTY,
  LEADERSHIP_HOOK_METADATA,
  ONLY_LEADER_METADATA,
  type LeadershipHookMetadata,
  type OnlyLeaderMetadata,
} from './only-leader.decorator.js';
import { providerMethods } from './provider-methods.util.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import { closeOwnedConnectionOnError, OWNS_CONNECTION } from './zk-lock.providers.js';

/**
 * At startup, finds every `@OnlyLeader` method and leadership hook and validates the election
 * names (a bad one fails the bootstrap); once the application has booted, wires the hooks and
 * joins each election named (an app whose bootstrap failed never leads, and hooks never run
 * before every module is initialised). Hooks are wired on every instance Nest built (those it
 * calls `onModuleInit` on), as `@nestjs/schedule` and `@nestjs/event-emitter` wire theirs: a
 * class provided under two tokens, by `useValue`/`useFactory` or transient has each instance's
 * hooks called; request-scoped providers have no instance to call, so their hooks are skipped
 * with a warning (as `@nestjs/schedule` does).
 */
@Injectable()
export class LeadershipExplorer implements OnModuleInit, OnApplicationBootstrap {
  private readonly logger = new Logger('OnlyLeader');

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly locks: LockService,
    private readonly elections: LeaderElections,
    @Optional() private readonly connection?: ZkConnection,
    @Optional() @Inject(OWNS_CONNECTION) private readonly ownsConnection?: boolean,
  ) {}

  private readonly names = new Set<string>();
  private readonly hooks: { instance: object; method: Function; label: string; hook: LeadershipHookMetadata }[] = [];

  async onModuleInit(): Promise<void> {
    await closeOwnedConnectionOnError(this.connection, this.ownsConnection, () => this.findElections());
  }

  onApplicationBootstrap(): void {
    for (const { instance, method, label, hook } of this.hooks) {
      this.elections.get(hook.election).on(hook.event, (...args: unknown[]) => {
        // A hook that fails is logged: it must not break the election.
        Promise.resolve()
          .then(() => method.apply(instance, args))
          .catch((error: unknown) =>
            // Reported as the library reports a leadership listener that throws (ZkLockWarning).
            this.locks.warn(`@${hook.event === 'gained' ? 'OnLeadershipGained' : 'OnLeadershipLost'} hook ${label} of leader election ${JSON.stringify(hook.election)} threw: ${String(error)}`),
          );
      });
    }
    for (const name of this.names) this.elections.get(name);
    if (this.names.size > 0) this.logger.log(`Joined leader election(s): ${[...this.names].join(', ')}`);
  }

  private findElections(): void {
    const { names, hooks } = this;
    for (const { wrapper, instance, method, key, isStatic } of providerMethods(this.discovery, this.scanner, { each: 'instance' })) {
      const label = `${instance.constructor.name}.${key}`;
      const leaderOnly = Reflect.getMetadata(ONLY_LEADER_METADATA, method) as OnlyLeaderMetadata | undefined;
      if (leaderOnly) {
        // A request-scoped instance is built per request (with its properties injected): only its
        // placeholder is here, so there is nothing to check.
        if (isStatic && !(instance[LEADER_ELECTIONS_PROPERTY] instanceof LeaderElections)) {
          throw new LockUsageError(
            `@OnlyLeader on ${label}: LeaderElections was not injected into provider ${tokenName(wrapper.token)} ` +
              '(built by useFactory/useValue, so Nest injected no properties, or in a module that cannot see ZkLockModule); ' +
              'register the class with Nest (`providers: [' + instance.constructor.name + ']` or `useClass`)',
          );
        }
        names.add(leaderOnly.election);
      }
      const hook = Reflect.getMetadata(LEADERSHIP_HOOK_METADATA, method) as LeadershipHookMetadata | undefined;
      if (hook) {
        if (!isStatic) {
          const decorator = hook.event === 'gained' ? '@OnLeadershipGained' : '@OnLeadershipLost';
          this.logger.warn(
            `Cannot register ${decorator}(${JSON.stringify(hook.election)}) hook ${label} of provider ${tokenName(wrapper.token)}: ` +
              'it is request-scoped (or depends on a request-scoped provider), so there is no instance to call. Move the hook to a singleton provider.',
          );
          continue;
        }
        hooks.push({ instance, method, label, hook });
        names.add(hook.election);
      }
    }
    for (const name of names) this.locks.pathOf(name); // throws InvalidLockNameError
  }
}

/** A provider's token as written in `providers` (a class by name). */
function tokenName(token: unknown): string {
  return typeof token === 'function' ? token.name : String(token);
}
