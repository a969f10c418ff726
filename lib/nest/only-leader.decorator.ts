import { Inject, Optional } from '@nestjs/common';
import { LockUsageError, NotLeaderError } from '../core/errors.js';
import { copyMethodMetadata } from './copy-method-metadata.util.js';
import { LeaderElections, runInLeaderContext } from './leader-elections.js';

/** Metadata on a leader-only method and on leadership hooks (read by LeadershipExplorer). */
export const ONLY_LEADER_METADATA = Symbol.for('nestjs-zk-lock:only-leader');
export const LEADERSHIP_HOOK_METADATA = Symbol.for('nestjs-zk-lock:leadership-hook');
/** The property through which leader-only methods get LeaderElections (property injection). */
export const LEADER_ELECTIONS_PROPERTY = '__zkLeaderElections';

/** @publicApi */
export interface OnlyLeaderOptions {
  /**
   * On an instance that does not lead: `'skip'` the call (it resolves undefined) or `'throw'` a
   * NotLeaderError (answered 503). Default: `'throw'` for HTTP route
   * handlers (a skipped one would answer 200 with nothing done), `'skip'` elsewhere (a job runs on
   * the leader only).
   */
  onNotLeader?: 'skip' | 'throw';
}

export interface OnlyLeaderMetadata {
  election: string;
  label: string;
}
export interface LeadershipHookMetadata {
  election: string;
  event: 'gained' | 'lost';
}

const PATH_METADATA = 'path'; // @nestjs/common's route metadata key (@Get, @Post, ...)

/**
 * Runs the decorated method only on the instance that leads `election` (a leader election in
 * Curator's LeaderLatch layout under the module's base path); elsewhere the call is skipped or
 * throws. Wraps the method itself, so it works on `@Cron`/`@Interval` jobs, event listeners, HTTP
 * handlers and any provider method, in either order with decorators that set metadata. The
 * application joins the election at bootstrap. Inside, `LeaderContext.current()` has the term
 * (its `signal` aborts when leadership ends, before another instance can lead).
 * @publicApi
 */
export function OnlyLeader(election: string, options: OnlyLeaderOptions = {}) {
  if (typeof election !== 'string') throw new LockUsageError('@OnlyLeader needs an election name');
  const { onNotLeader } = options ?? {};
  if (onNotLeader !== undefined && onNotLeader !== 'skip' && onNotLeader !== 'throw') throw new LockUsageError(`@OnlyLeader: onNotLeader must be 'skip' or 'throw'`);
  const inject = Inject(LeaderElections);
  const optional = Optional();
  return <T extends (...args: any[]) => PromiseLike<unknown>>(target: object, propertyKey: string | symbol, descriptor: TypedPropertyDescriptor<T>): TypedPropertyDescriptor<T> => {
    if (typeof target === 'function') throw new LockUsageError(`@OnlyLeader cannot decorate a static method (${target.name}.${String(propertyKey)})`);
    const original = descriptor.value as unknown;
    const label = `${target.constructor.name}.${String(propertyKey)}`;
    if (typeof original !== 'function') throw new LockUsageError(`@OnlyLeader can only decorate methods (${label})`);
    inject(target, LEADER_ELECTIONS_PROPERTY);
    optional(target, LEADER_ELECTIONS_PROPERTY);
    const wrapper = async function (this: Record<string, unknown>, ...args: unknown[]) {
      const elections = this?.[LEADER_ELECTIONS_PROPERTY];
      if (!(elections instanceof LeaderElections)) {
        throw new LockUsageError(`@OnlyLeader on ${label}: LeaderElections was not injected. Create the class through Nest, in an application that imports ZkLockModule.forRoot()`);
      }
      const term = elections.get(election).term;
      if (!term) {
        // A route handler that skipped would answer 200 with nothing done: it throws by default (503).
        const isRoute = Reflect.getMetadata(PATH_METADATA, wrapper) !== undefined;
        if ((onNotLeader ?? (isRoute ? 'throw' : 'skip')) === 'throw') throw new NotLeaderError(election);
        return undefined; // a follower's normal outcome, on every tick: nothing is logged
      }
      return runInLeaderContext(election, term, () => (original as (...a: unknown[]) => unknown).apply(this, args));
    };
    copyMethodMetadata(original, wrapper);
    Reflect.defineMetadata(ONLY_LEADER_METADATA, { election, label } satisfies OnlyLeaderMetadata, wrapper);
    descriptor.value = wrapper as unknown as T;
    return descriptor;
  };
}

/** Called with the term when this instance becomes leader of `election`. @publicApi */
export function OnLeadershipGained(election: string): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    Reflect.defineMetadata(LEADERSHIP_HOOK_METADATA, { election, event: 'gained' } satisfies LeadershipHookMetadata, descriptor.value as object);
  };
}

/** Called with the term and the reason when this instance's leadership of `election` ends. @publicApi */
export function OnLeadershipLost(election: string): MethodDecorator {
  return (target, propertyKey, descriptor) => {
    Reflect.defineMetadata(LEADERSHIP_HOOK_METADATA, { election, event: 'lost' } satisfies LeadershipHookMetadata, descriptor.value as object);
  };
}
