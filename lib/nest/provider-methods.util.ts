import type { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';

/** One method of an application provider or controller instance. */
export interface ProviderMethod {
  wrapper: InstanceWrapper;
  instance: Record<string, unknown>;
  method: Function;
  /** The method's name on the instance. */
  key: string;
  /**
   * False for a request-scoped provider (or one that depends on one): Nest builds its instances
   * per request, and `instance` is only a placeholder made from its prototype (no injection).
   */
  isStatic: boolean;
}

export interface ProviderMethodsOptions {
  /**
   * `'method'` (default): every method once (a method shared through a prototype is visited
   * once, on the first instance that has it): for checks of the decorated methods themselves.
   * `'instance'`: every method of every distinct instance Nest built, so a class provided under
   * two tokens (or in two modules) is visited on each instance; an alias (`useExisting`) or one
   * object under two tokens is visited once, and a transient provider on each consumer's instance.
   */
  each?: 'method' | 'instance';
}

/**
 * Every method of the application's provider and controller instances: for explorers that find
 * decorated methods.
 */
export function* providerMethods(discovery: DiscoveryService, scanner: MetadataScanner, options: ProviderMethodsOptions = {}): Generator<ProviderMethod> {
  const perInstance = options.each === 'instance';
  const seenMethods = new Set<Function>();
  const seenInstances = new Set<object>();
  for (const wrapper of [...discovery.getProviders(), ...discovery.getControllers()]) {
    if (perInstance && wrapper.isAlias) continue; // the instance of the provider it points to
    for (const instance of instancesOf(wrapper, perInstance)) {
      if (seenInstances.has(instance)) continue;
      seenInstances.add(instance);
      const isStatic = wrapper.isDependencyTreeStatic();
      for (const key of scanner.getAllMethodNames(Object.getPrototypeOf(instance) as object)) {
        const method = instance[key];
        if (typeof method !== 'function') continue;
        if (!perInstance) {
          if (seenMethods.has(method)) continue;
          seenMethods.add(method);
        }
        yield { wrapper, instance, method, key, isStatic };
      }
    }
  }
}

/**
 * With `perInstance`, the instances Nest calls lifecycle hooks (onModuleInit, ...) on: a
 * transient provider's instance per consumer (the one of its own token is a placeholder that
 * no constructor ran on), or the placeholder of a request-scoped provider (flagged not static).
 */
function instancesOf(wrapper: InstanceWrapper, perInstance: boolean): Record<string, unknown>[] {
  const isObject = (i: unknown): i is Record<string, unknown> => i !== null && typeof i === 'object';
  if (!perInstance || !wrapper.isTransient || !wrapper.isDependencyTreeStatic()) return [wrapper.instance].filter(isObject);
  return wrapper.getStaticTransientInstances().map((i) => i?.instance as unknown).filter(isObject);
}
