import { InvalidOptionError } from '../errors.js';
import { describe } from '../validation.js';

export interface AcquireOptions {
  /** How long to wait: undefined waits until acquired, 0 tries once. */
  waitMs?: number;
  /** Abort to give up waiting. */
  signal?: AbortSignal;
}

/** Checks what untyped callers may pass to acquire(): waitMs and signal. */
export function validateAcquireOptions(options: unknown): void {
  if (options === null || typeof options !== 'object') throw new InvalidOptionError('options', 'expected an object');
  const { waitMs, signal } = options as { waitMs?: unknown; signal?: unknown };
  if (waitMs !== undefined && (typeof waitMs !== 'number' || !Number.isInteger(waitMs) || waitMs < 0 || waitMs > 2_147_483_647)) {
    throw new InvalidOptionError('waitMs', `expected an integer from 0 to 2147483647 (0 tries once), got ${describe(waitMs)}`);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidOptionError('signal', 'expected an AbortSignal');
  }
}
