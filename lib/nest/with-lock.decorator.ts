import { Inject, Logger, Optional } from '@nestjs/common';
import { defer, isObservable, Observable } from 'rxjs';
import { InvalidOptionError, LockNotAcquiredError, LockUsageError } from '../core/errors.js';
import { optionalPositiveInteger, positiveInteger, describe } from '../core/validation.js';
import type { Lockable } from '../core/recipes/lock-recipe.js';
import type { Lease } from '../core/leases/lease.js';
import { LockContext } from '../core/leases/lock-context.js';
import { clientGoneSignal } from './client-disconnect.interceptor.js';
import { copyMethodMetadata } from './copy-method-metadata.util.js';
import { defaultJobHoldMs, isScheduledJob } from './job-schedule.js';
import { resolveLockNames, type LockKey } from './lock-key.util.js';
import { LockService } from './lock.service.js';
import type { WithLockOptions } from './with-lock-options.interface.js';

/** Metadata on a decorated method: `{ key, options, label }` (read by the startup explorer). */
export const WITH_LOCK_METADATA = Symbol.for('nestjs-zk-lock:with-lock');
/** The property through which @WithLock gets LockService (property injection). */
export const LOCK_SERVICE_PROPERTY = '__zkLockService';

export interface WithLockMetadata {
  key: LockKey;
  options: WithLockOptions;
  label: string;
  /** The wrapper @WithLock installed: another function there means a decorator above wrapped it again. */
  wrapper?: Function;
  /** Declared to return an Observable: the lock is taken, and the body runs, per subscription. */
  returnsObservable?: boolean;
}

export const EVENT_LISTENER_METADATA = 'EVENT_LISTENER_METADATA'; // @nestjs/event-emitter's, on @OnEvent methods
const logger = new Logger('WithLock');

/**
 * Runs the decorated method while holding a distributed lock. Wraps the method itself, so it
 * works on controller handlers, `@Cron`/`@Interval`/`@Timeout` jobs, `@OnEvent` listeners, queue
 * processors and any provider method, in either decorator order.
 * @publicApi
 */
export function WithLock<K extends LockKey>(key: K, given: WithLockOptions = {}): LockedMethodDecorator<K> {
  validateWithLockOptions(key, given);
  // Fixed as validated: a later change to the object passed in cannot reach a call (where a bad
  // value would fail every request instead of the startup).
  const options: WithLockOptions = Object.freeze({ ...given });
  // Optional: a module that cannot see LockService (ZkLockModule with isGlobal: false, not
  // imported there) gets the explorer's bootstrap error naming the fix, not Nest's generic one.
  const injectService = Inject(LockService);
  const optional = Optional();
  return (target: object, propertyKey: string | symbol, descriptor: PropertyDescriptor) => {
    const original = descriptor.value as unknown;
    if (typeof target === 'function') {
      // Nothing injects LockService into a class itself.
      throw new LockUsageError(`@WithLock cannot decorate a static method (${target.name}.${String(propertyKey)}); use an instance method of a provider`);
    }
    const label = `${(target as object).constructor.name}.${String(propertyKey)}`;
    if (typeof original !== 'function') throw new LockUsageError(`@WithLock can only decorate methods (${label})`);
    injectService(target, LOCK_SERVICE_PROPERTY);
    optional(target, LOCK_SERVICE_PROPERTY);

    const returnsObservable = Reflect.getMetadata('design:returntype', target, propertyKey) === Observable;
    const isGenerator = original.constructor?.name === 'AsyncGeneratorFunction';
    const call = (self: any, args: unknown[], wrapper: Function) => {
      if (self === undefined || self === null || self === globalThis) {
        throw new LockUsageError(`@WithLock on ${label}: called without its instance (as a detached function); call it as a method or bind it`);
      }
      const service: unknown = self?.[LOCK_SERVICE_PROPERTY];
      if (!(service instanceof LockService)) {
        // Fail closed: never run unlocked.
        throw new LockUsageError(
          `@WithLock on ${label}: LockService was not injected. Create ${label.split('.')[0]} through Nest, ` +
            'in an application that imports ZkLockModule.forRoot() (global by default).',
        );
      }
      return new LockedCall(service, original as (...a: unknown[]) => unknown, self, args, key, options, label, wrapper);
    };

    // Each flavour reports a failure the way its callers expect (rejection, error notification, throw).
    let wrapper: Function;
    if (returnsObservable) {
      wrapper = function (this: unknown, ...args: unknown[]) {
        return defer(() => call(this, args, wrapper).asObservable());
      };
    } else if (isGenerator) {
      wrapper = async function* (this: unknown, ...args: unknown[]) {
        return yield* call(this, args, wrapper).asAsyncGenerator();
      };
    } else {
      wrapper = async function (this: unknown, ...args: unknown[]) {
        return call(this, args, wrapper).asPromise();
      };
    }
    copyMethodMetadata(original, wrapper);
    Reflect.defineMetadata(WITH_LOCK_METADATA, { key, options, label, wrapper, returnsObservable } satisfies WithLockMetadata, wrapper);
    descriptor.value = wrapper;
    return descriptor;
  };
}

/**
 * What a locked method may return: the wrapper waits for the lock before it calls the method, so it
 * always answers asynchronously. A method typed to return a plain value (or `void`) would return a
 * Promise at run time while its type says otherwise, and a synchronous throw would become a
 * rejection nobody awaits: declare it `async` (or return an Observable or an async generator).
 */
export type LockedMethod = (...args: any[]) => PromiseLike<unknown> | Observable<unknown> | AsyncIterable<unknown>;
/**
 * @WithLock's decorator type: it does not compile on a method whose return type is synchronous,
 * nor with a key function that cannot take the method's arguments (it is called with them).
 */
export type LockedMethodDecorator<K = LockKey> = <T extends LockedMethod>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<T> & KeyFitsMethod<K, T>,
) => TypedPropertyDescriptor<T> | void;

/** `unknown` when key `K` can be called with method `T`'s arguments; otherwise a type nothing matches, naming the problem. */
export type KeyFitsMethod<K, T extends (...args: any[]) => unknown> = K extends (...args: any[]) => unknown
  ? K extends (...args: Parameters<T>) => unknown
    ? unknown
    : { 'the @WithLock key function must accept the method\'s parameters': Parameters<T> }
  : unknown;

/** One invocation of a decorated method. */
class LockedCall {
  /** On the connection's (monotonic) clock: a wall-clock step must not stretch a hold. */
  private readonly started: number;
  /** When the lock may go at the earliest (on that clock): `minHoldMs` after the start. */
  private readonly holdUntil: number;

  constructor(
    private readonly service: LockService,
    private readonly original: (...args: unknown[]) => unknown,
    private readonly self: unknown,
    private readonly args: unknown[],
    private readonly key: LockKey,
    private readonly options: WithLockOptions,
    private readonly label: string,
    private readonly wrapper: Function,
  ) {
    // A job that tries once gets a hold from its schedule, so a late instance skips the tick; one
    // that waits (waitMs) asks to run on every instance in turn, so its hold would only delay them.
    const triesOnce = (options.waitMs ?? service.defaultWaitMs) === 0;
    this.started = service.connection.clock.now();
    this.holdUntil = this.started + (options.minHoldMs ?? (triesOnce ? defaultJobHoldMs(wrapper, label) : 0));
  }

  async asPromise(): Promise<unknown> {
    const lockable = this.lockable();
    const lease = await this.acquire(lockable);
    if (!lease) return undefined;
    try {
      const result = await lockable.runHolding(lease, () => this.original.apply(this.self, this.args));
      // An Observable that was not declared as the return type: hold until it finishes if the
      // caller subscribes now, as Nest's HTTP, SSE and RPC layers do (in the same turn of the
      // event loop); a caller that discards it (a scheduler, an event emitter) lets the lock go.
      if (isObservable(result)) return this.holdIfSubscribed(lockable, lease, result);
      return result;
    } finally {
      if (!this.holdingStream) this.release(lease);
    }
  }

  asObservable(): Observable<unknown> {
    const lockable = this.lockable();
    return new Observable<unknown>((subscriber) => {
      // A subscriber that leaves while waiting takes its waiter out of the queue.
      const gone = new AbortController();
      let inner: { unsubscribe(): void } | undefined;
      this.acquire(lockable, gone.signal).then(
        (lease) => {
          if (gone.signal.aborted) return lease && this.release(lease); // left as the lock came
          if (!lease) return subscriber.complete(); // skipped
          let source: unknown;
          try {
            source = lockable.runHolding(lease, () => this.original.apply(this.self, this.args));
          } catch (error) {
            this.release(lease);
            return subscriber.error(error);
          }
          if (!isObservable(source)) {
            // Declared Observable but returned something else (null on some path): nothing left
            // to hold the lock for; the caller gets the value.
            this.release(lease);
            if (source !== undefined && source !== null) subscriber.next(source);
            return subscriber.complete();
          }
          inner = this.holdUntilDone(lockable, lease, source).subscribe(subscriber);
        },
        (error) => subscriber.error(error),
      );
      return () => {
        gone.abort();
        inner?.unsubscribe();
      };
    });
  }

  async *asAsyncGenerator(): AsyncGenerator<unknown, unknown, unknown> {
    const lockable = this.lockable();
    const lease = await this.acquire(lockable);
    if (!lease) return undefined;
    try {
      const generator = lockable.runHolding(lease, () => this.original.apply(this.self, this.args)) as AsyncGenerator<unknown>;
      return yield* generator;
    } finally {
      this.release(lease);
    }
  }

  private holdingStream = false;

  private holdIfSubscribed(lockable: Lockable, lease: Lease, source: Observable<unknown>): Observable<unknown> {
    let state: 'waiting' | 'subscribed' | 'released' = 'waiting';
    const held = this.holdUntilDone(lockable, lease, source);
    setImmediate(() => {
      if (state !== 'waiting') return;
      state = 'released';
      this.release(lease);
    });
    return new Observable((subscriber) => {
      if (state !== 'waiting') {
        // Never run the stream unlocked: a late (or second) subscriber gets an error.
        subscriber.error(new LockUsageError(`@WithLock on ${this.label}: its Observable was subscribed after the lock was released (or twice); declare the return type Observable<...> to lock per subscription`));
        return;
      }
      state = 'subscribed';
      return held.subscribe(subscriber);
    });
  }

  private holdUntilDone(lockable: Lockable, lease: Lease, source: Observable<unknown>): Observable<unknown> {
    this.holdingStream = true;
    return new Observable((subscriber) => {
      let inner: { unsubscribe(): void };
      try {
        inner = lockable.runHolding(lease, () =>
          source.subscribe({
            next: (v) => subscriber.next(v),
            error: (e) => {
              this.release(lease);
              subscriber.error(e);
            },
            complete: () => {
              this.release(lease);
              subscriber.complete();
            },
          }),
        );
      } catch (error) {
        // A source whose subscribe throws: release here, the teardown below was never returned.
        this.release(lease);
        throw error;
      }
      return () => {
        inner.unsubscribe();
        this.release(lease);
      };
    });
  }

  private lockable(): Lockable {
    const names = resolveLockNames(this.key, this.args);
    const { kind = 'mutex', permits, leaseMs, reentrant = false, revocable = false } = this.options;
    const one = (name: string): Lockable => {
      switch (kind) {
        case 'read':
          return this.service.readWriteLock(name, { leaseMs, revocable }).read;
        case 'write':
          return this.service.readWriteLock(name, { leaseMs, revocable }).write;
        case 'semaphore':
          return this.service.semaphore(name, { permits: permits!, leaseMs });
        default:
          return this.service.mutex(name, { leaseMs, reentrant, revocable });
      }
    };
    return names.length === 1 ? one(names[0]!) : this.service.multiLock(names.map(one));
  }

  /** The lease, or undefined when the call is skipped; throws per `onLocked`. */
  private async acquire(lockable: Lockable, subscriberGone?: AbortSignal): Promise<Lease | undefined> {
    // An HTTP client that disconnects while its request waits takes the waiter out of the queue.
    const clientGone = clientGoneSignal();
    const signals = [subscriberGone, clientGone].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    try {
      return await lockable.acquire({ waitMs: this.options.waitMs ?? this.service.defaultWaitMs, signal });
    } catch (error) {
      if (subscriberGone?.aborted || clientGone?.aborted) return undefined; // nobody is left to answer
      if (!(error instanceof LockNotAcquiredError)) throw error;
      const onLocked = this.options.onLocked ?? (this.isJob() ? 'skip' : 'throw');
      if (error.reason === 'connection' && onLocked === 'skip') {
        // Not contention: nobody may be running this, so it is worth an operator's attention.
        logger.warn(`${this.label}: ZooKeeper is unavailable (${error.message}); skipped this run`);
        return undefined;
      }
      if (error.reason !== 'timeout') throw error;
      // Contention is a job's normal outcome on every instance but one: nothing is logged (Nest's
      // default logger prints every level); LockChannels.notAcquired and the metrics count it.
      if (onLocked === 'skip') return undefined;
      if (typeof onLocked === 'function') throw onLocked(lockable.name);
      if (LockContext.current()?.name === lockable.name) {
        throw new LockNotAcquiredError(
          lockable.name,
          'timeout',
          `Lock ${JSON.stringify(lockable.name)} was not acquired: this call chain already holds it (${this.label} ` +
            'was called inside its own lock); nested @WithLock calls need { reentrant: true }',
        );
      }
      throw error;
    }
  }

  /** Releases now, or at `holdUntil` (sooner if the application shuts down). */
  private release(lease: Lease): void {
    // Asked to let go: whoever asked is waiting for it now, not after the minimum hold.
    if (this.options.revocable) {
      if (lease.signal.aborted) return void lease.release();
      lease.signal.addEventListener('abort', () => void lease.release(), { once: true });
    }
    this.service.releaseAt(lease, this.holdUntil);
  }

  private isJob(): boolean {
    return isScheduledJob(this.wrapper);
  }
}

/** Throws InvalidOptionError naming the option, and where it was given (the key). */
function validateWithLockOptions(key: unknown, options: WithLockOptions): void {
  try {
    checkWithLockOptions(key, options);
  } catch (error) {
    if (!(error instanceof InvalidOptionError) || error.option === 'key') throw error;
    const detail = error.message.slice(`Invalid option "${error.option}": `.length);
    throw new InvalidOptionError(error.option, `${detail} (in @WithLock(${typeof key === 'string' ? JSON.stringify(key) : 'a key function'}, { ${error.option}: ... }))`);
  }
}

function checkWithLockOptions(key: unknown, options: WithLockOptions): void {
  if (typeof key !== 'string' && typeof key !== 'function') {
    throw new InvalidOptionError('key', `@WithLock needs a lock name, a template or a function, got ${describe(key)}`);
  }
  if (options === null || typeof options !== 'object') throw new InvalidOptionError('options', 'expected an object');
  const { kind = 'mutex', onLocked } = options;
  if (!['mutex', 'read', 'write', 'semaphore'].includes(kind)) {
    throw new InvalidOptionError('kind', `expected 'mutex', 'read', 'write' or 'semaphore', got ${describe(kind)}`);
  }
  if (kind === 'semaphore') {
    if (options.permits === undefined) throw new InvalidOptionError('permits', "is required with kind: 'semaphore'");
    positiveInteger(options.permits, 'permits', 1);
  }
  else if (options.permits !== undefined) throw new InvalidOptionError('permits', "only applies to kind: 'semaphore'");
  if (options.waitMs !== undefined) positiveInteger(options.waitMs, 'waitMs', 0, 0);
  optionalPositiveInteger(options.leaseMs, 'leaseMs');
  if (options.minHoldMs !== undefined) positiveInteger(options.minHoldMs, 'minHoldMs', 0, 0);
  if (options.reentrant !== undefined && typeof options.reentrant !== 'boolean') {
    throw new InvalidOptionError('reentrant', `expected a boolean, got ${describe(options.reentrant)}`);
  }
  if (options.reentrant && kind !== 'mutex') {
    throw new InvalidOptionError('reentrant', 'only for kind mutex (read-write halves always re-enter within their call chain; semaphores never do)');
  }
  if (options.revocable !== undefined && typeof options.revocable !== 'boolean') {
    throw new InvalidOptionError('revocable', `expected a boolean, got ${describe(options.revocable)}`);
  }
  if (options.revocable && kind === 'semaphore') throw new InvalidOptionError('revocable', 'semaphore leases are not revocable (nor are Curator\'s)');
  if (onLocked !== undefined && onLocked !== 'throw' && onLocked !== 'skip' && typeof onLocked !== 'function') {
    throw new InvalidOptionError('onLocked', `expected 'throw', 'skip' or a function, got ${describe(onLocked)}`);
  }
}
