import type { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';

/** One method of an application provider or controller instance. */
export interface ProviderMethod {
  wrapper: InstanceWrapper;
  instance: Record<string, unknown>;
  method: Function;
}

/**
 * Every method of the application's provider and controller instances, once each (a method
 * shared through a prototype is visited once): for explorers that find decorated methods.
 */
export function* providerMethods(discovery: DiscoveryService, scanner: MetadataScanner): Generator<ProviderMethod> {
  const seen = new Set<Function>();
  for (const wrapper of [...discovery.getProviders(), ...discovery.getControllers()]) {
    const instance = wrapper.instance as Record<string, unknown> | undefined;
    if (!instance || typeof instance !== 'object') continue;
    for (const name of scanner.getAllMethodNames(Object.getPrototypeOf(instance) as object)) {
      const method = instance[name];
      if (typeof method !== 'function' || seen.has(method)) continue;
      seen.add(method);
      yield { wrapper, instance, method };
    }
  }
}
