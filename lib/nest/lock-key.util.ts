import { InvalidLockNameError } from '../core/errors.js';

/**
 * A lock key: a name, a template over the method's arguments (`'order:{0.id}'`), or a function of
 * the arguments returning a name or a list of names (a list is a multi-lock; a name listed twice
 * is taken once).
 */
export type LockKey = string | ((...args: any[]) => string | readonly string[]);

const PLACEHOLDER = /\{(\d+)((?:\.[A-Za-z_$][\w$]*)*)\}/g;

export function isTemplate(key: string): boolean {
  return new RegExp(PLACEHOLDER.source).test(key);
}

/** The lock names for one call. */
export function resolveLockNames(key: LockKey, args: readonly unknown[]): string[] {
  if (typeof key === 'function') {
    const result = key(...args);
    const names = typeof result === 'string' ? [result] : Array.isArray(result) ? [...result] : undefined;
    if (!names || names.length === 0 || names.some((n) => typeof n !== 'string')) {
      throw new InvalidLockNameError(String(result), 'the @WithLock key function must return a name or a non-empty list of names');
    }
    // One lock named twice (a transfer from account 7 to 7) is taken once.
    return [...new Set(names)];
  }
  return [renderTemplate(key, args)];
}

/**
 * `value` as text that stays inside one segment of a lock's path, reversibly: "%", "/", the
 * characters ZooKeeper refuses, and a lone "." or ".." are percent-encoded (UTF-8), so
 * `decodeURIComponent` gives the value back. Templates apply it to every placeholder; use it in a
 * key function for request input (a route parameter "y%2Fz" arrives as "y/z", which would otherwise
 * name the child lock "ticket:y/z" of lock "ticket:y").
 * @publicApi
 */
export function lockKeySegment(value: string | number | bigint | boolean): string {
  const text = String(value);
  if (text === '.' || text === '..') return text.replaceAll('.', '%2E');
  // A surrogate pair (e.g. an emoji) is one character, UTF-8 encoded; a lone surrogate cannot be.
  return text.replace(SEGMENT_UNSAFE, (c) => (c.length === 1 && c >= '\ud800' && c <= '\udfff' ? `%u${c.charCodeAt(0).toString(16).toUpperCase()}` : encodeURIComponent(c)));
}
/** What ZooKeeper refuses in a path (per UTF-16 unit, see validateZkPath), plus "%" and "/". */
const SEGMENT_UNSAFE = /[\ud800-\udbff][\udc00-\udfff]|[%/\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]/g;

function renderTemplate(template: string, args: readonly unknown[]): string {
  return template.replace(PLACEHOLDER, (_match, index: string, path: string) => {
    let value: unknown = args[Number(index)];
    for (const prop of path.split('.').slice(1)) value = value == null ? undefined : (value as Record<string, unknown>)[prop];
    if (value === undefined || value === null || typeof value === 'object' || typeof value === 'function') {
      throw new InvalidLockNameError(template, `placeholder {${index}${path}} has no usable value (got ${value === null ? 'null' : typeof value})`);
    }
    return lockKeySegment(value as string | number | bigint | boolean);
  });
}
