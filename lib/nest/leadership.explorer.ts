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
import { ZkConnection } from '../core/zk-connection.js';
import { closeOwnedConnectionOnError, OWNS_CONNECTION } from './zk-lock.providers.js';

/**
 * At startup, finds every `@OnlyLeader` method and leadership hook and validates the election
 * names (a bad one fails the bootstrap); once the application has booted, wires the hooks and
 * joins each election named (an app whose bootstrap failed never leads, and hooks never run
 * before every module is initialised).
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
  private readonly hooks: { instance: object; method: Function; hook: LeadershipHookMetadata }[] = [];

  async onModuleInit(): Promise<void> {
    await closeOwnedConnectionOnError(this.connection, this.ownsConnection, () => this.findElections());
  }

  onApplicationBootstrap(): void {
    for (const { instance, method, hook } of this.hooks) {
      this.elections.get(hook.election).on(hook.event, (...args: unknown[]) => {
        // A hook that fails is logged: it must not break the election.
        Promise.resolve()
          .then(() => method.apply(instance, args))
          .catch((error: unknown) => this.logger.error(`${instance.constructor.name}.${method.name} (leadership ${hook.event} of ${JSON.stringify(hook.election)}) failed: ${String(error)}`));
      });
    }
    for (const name of this.names) this.elections.get(name);
    if (this.names.size > 0) this.logger.log(`Joined leader election(s): ${[...this.names].join(', ')}`);
  }

  private findElections(): void {
    const { names, hooks } = this;
    for (const { instance, method } of providerMethods(this.discovery, this.scanner)) {
      const leaderOnly = Reflect.getMetadata(ONLY_LEADER_METADATA, method) as OnlyLeaderMetadata | undefined;
      if (leaderOnly) {
        if (!(instance[LEADER_ELECTIONS_PROPERTY] instanceof LeaderElections)) {
          throw new LockUsageError(`@OnlyLeader on ${leaderOnly.label}: LeaderElections was not injected (a provider built by useFactory/useValue, or a module that cannot see ZkLockModule); register the class with Nest`);
        }
        names.add(leaderOnly.election);
      }
      const hook = Reflect.getMetadata(LEADERSHIP_HOOK_METADATA, method) as LeadershipHookMetadata | undefined;
      if (hook) {
        hooks.push({ instance, method, hook });
        names.add(hook.election);
      }
    }
    for (const name of names) this.locks.pathOf(name); // throws InvalidLockNameError
  }
}
