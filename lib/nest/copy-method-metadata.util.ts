/**
 * Makes `wrapper` look like `original` to other decorators and to Nest: every reflect-metadata key
 * (route, @Cron, @OnEvent, Swagger...), `name` and `length`. Lets @WithLock sit above or below them.
 */
export function copyMethodMetadata(original: Function, wrapper: Function): void {
  for (const key of Reflect.getOwnMetadataKeys(original)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapper);
  }
  Object.defineProperty(wrapper, 'name', { value: original.name, configurable: true });
  Object.defineProperty(wrapper, 'length', { value: original.length, configurable: true });
}
