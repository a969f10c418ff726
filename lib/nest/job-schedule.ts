import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Logger } from '@nestjs/common';

// @nestjs/schedule's metadata keys and SchedulerType values (read, never imported: it is optional).
export const SCHEDULER_TYPE = 'SCHEDULER_TYPE';
const SCHEDULE_CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const SCHEDULE_INTERVAL_OPTIONS = 'SCHEDULE_INTERVAL_OPTIONS';
const CRON = 1;
const INTERVAL = 3;

/** The longest default hold: a job that fires a minute late elsewhere is not the same tick any more. */
export const MAX_DEFAULT_HOLD_MS = 60_000;
/**
 * Any cron schedule fires at most once per second: the hold when the schedule cannot be read
 * (the `cron` package @nestjs/schedule uses was not found).
 */
export const FALLBACK_CRON_HOLD_MS = 500;

const logger = new Logger('WithLock');

export function isScheduledJob(method: Function): boolean {
  return Reflect.getMetadata(SCHEDULER_TYPE, method) !== undefined;
}

/**
 * The default `minHoldMs` of a scheduled job, from its schedule: until a little before its next
 * run (a quarter of the gap, at most 1 s), at most a minute. Instances fire the same tick a little
 * apart; a short job would release before a late instance tries, and the tick would run twice.
 * Holding until just before the next tick makes the late one skip, while every instance finds the
 * lock free again for the next tick. 0 for `@Timeout` (each instance's own one-off) and other methods.
 */
export function defaultJobHoldMs(method: Function, label: string): number {
  const type: unknown = Reflect.getMetadata(SCHEDULER_TYPE, method);
  if (type === INTERVAL) {
    const { timeout } = (Reflect.getMetadata(SCHEDULE_INTERVAL_OPTIONS, method) ?? {}) as { timeout?: unknown };
    return typeof timeout === 'number' ? holdBefore(timeout) : 0;
  }
  if (type !== CRON) return 0;
  const options = (Reflect.getMetadata(SCHEDULE_CRON_OPTIONS, method) ?? {}) as { cronTime?: unknown; timeZone?: string; utcOffset?: number };
  const untilNext = msUntilNextCronRun(options, label);
  return untilNext === undefined ? FALLBACK_CRON_HOLD_MS : holdBefore(untilNext);
}

function holdBefore(gapMs: number): number {
  if (!(gapMs > 0)) return 0;
  return Math.min(MAX_DEFAULT_HOLD_MS, Math.floor(gapMs - Math.min(1000, gapMs / 4)));
}

type CronTimeClass = new (source: unknown, timeZone?: string | null, utcOffset?: number | null) => { getTimeout(): number };
let cronTime: CronTimeClass | null | undefined;
const warned = new Set<string>();

/** Milliseconds until the schedule's next run, read with the `cron` package @nestjs/schedule runs it with. */
function msUntilNextCronRun(options: { cronTime?: unknown; timeZone?: string; utcOffset?: number }, label: string): number | undefined {
  if (cronTime === undefined) cronTime = loadCronTime();
  if (!cronTime) {
    if (!warned.has(label)) {
      warned.add(label);
      logger.warn(`${label}: could not read its cron schedule (package 'cron' not found); holding its lock ${FALLBACK_CRON_HOLD_MS} ms per run (set minHoldMs to choose)`);
    }
    return undefined;
  }
  try {
    const time = options.timeZone != null ? new cronTime(options.cronTime, options.timeZone) : options.utcOffset != null ? new cronTime(options.cronTime, null, options.utcOffset) : new cronTime(options.cronTime);
    return time.getTimeout();
  } catch {
    return undefined; // @nestjs/schedule reports a bad schedule itself
  }
}

function loadCronTime(): CronTimeClass | null {
  // From @nestjs/schedule's own location (its `cron` dependency), found from here or from the app.
  const from = [createRequire(import.meta.url), createRequire(join(process.cwd(), 'package.json'))];
  for (const require of from) {
    try {
      const schedule = require.resolve('@nestjs/schedule');
      return (createRequire(schedule)('cron') as { CronTime: CronTimeClass }).CronTime;
    } catch {
      // try the next place
    }
  }
  return null;
}
