// The one clock of the client: every reading of the time and every timer of the session and the
// connection go through it, so that a simulation can run that code on virtual time
// (test/simulation/). The system clock is performance.now() and Node's timers.

/** A timer the clock armed; `unref()` lets the process exit while only such timers remain. */
export interface ClockTimer {
  unref(): ClockTimer;
  ref(): ClockTimer;
}

/** @publicApi */
export interface Clock {
  /** Milliseconds on a monotonic clock (performance.now() on the system clock). */
  now(): number;
  setTimeout(run: () => void, ms: number): ClockTimer;
  clearTimeout(timer: ClockTimer | undefined): void;
  setInterval(run: () => void, ms: number): ClockTimer;
  clearInterval(timer: ClockTimer | undefined): void;
  /** Runs `run` in a macrotask of its own, after the I/O already read (Node's setImmediate). */
  setImmediate(run: () => void): void;
  /** A number in [0, 1) (jitter, host order). */
  random(): number;
}

/** performance.now() and Node's timers. */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (run, ms) => setTimeout(run, ms),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined),
  setInterval: (run, ms) => setInterval(run, ms),
  clearInterval: (timer) => clearInterval(timer as NodeJS.Timeout | undefined),
  setImmediate: (run) => void setImmediate(run),
  random: () => Math.random(),
};

/** Resolves after `ms` on `clock` (the timer does not keep the process alive). */
export function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimeout(resolve, ms).unref());
}
