// Checks of option values shared by the connection, the engine and the recipes, and how a bad
// value is named in the error.
import { InvalidOptionError } from './errors.js';

/** A finite integer within [min, max] (milliseconds, permits, ...), or the default when undefined. */
export function positiveInteger(value: unknown, option: string, fallback: number, min = 1, max = 2_147_483_647): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidOptionError(option, `expected an integer from ${min} to ${max}, got ${describe(value)}`);
  }
  return value;
}

export function optionalPositiveInteger(value: unknown, option: string): number | undefined {
  return value === undefined ? undefined : positiveInteger(value, option, 0);
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value === null) return 'null';
  return typeof value;
}
