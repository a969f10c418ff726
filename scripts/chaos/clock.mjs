// One clock for the whole run: process.hrtime (CLOCK_MONOTONIC, shared by every process of the
// machine), which the workers report too; and the run's log on stderr.

export const now = () => Number(process.hrtime.bigint()) / 1e6;
export const T0 = now();
/**
 * Seconds since the start of the run (for the report).
 * @overload
 * @param {number} t
 * @returns {number}
 */
/**
 * @overload
 * @param {number | undefined} t
 * @returns {number | undefined}
 */
/** @param {number | undefined} t */
export function rel(t) {
  return t === undefined ? undefined : (t - T0) / 1000;
}
/** @param {string} message */
export function log(message) {
  process.stderr.write(`[chaos +${((now() - T0) / 1000).toFixed(1).padStart(5)}s] ${message}\n`);
}

/** Milliseconds from `a` to `b`, rounded; undefined when either is unknown. */
export const ms = (/** @type {number | undefined} */ a, /** @type {number | undefined} */ b) => (a === undefined || b === undefined ? undefined : Math.round(b - a));
