import { jest } from '@jest/globals';
import 'reflect-metadata';
import { Cron, Interval, Timeout } from '@nestjs/schedule';
import { defaultJobHoldMs, FALLBACK_CRON_HOLD_MS, MAX_DEFAULT_HOLD_MS } from '../../../lib/nest/job-schedule.js';

/** The method `decorator` marks, as @WithLock's wrapper sees it. */
function job(decorator: MethodDecorator): Function {
  class Jobs {
    run() {}
  }
  const descriptor = Object.getOwnPropertyDescriptor(Jobs.prototype, 'run')!;
  decorator(Jobs.prototype, 'run', descriptor);
  return descriptor.value as Function;
}

describe("a scheduled job's default minHoldMs (from its schedule)", () => {
  it('@Cron every second: until a quarter second before the next run', () => {
    const hold = defaultJobHoldMs(job(Cron('* * * * * *')), 'Jobs.run');
    const untilNext = 1000 - (Date.now() % 1000);
    expect(hold).toBeLessThanOrEqual(untilNext - untilNext / 4 + 1);
    expect(hold).toBeGreaterThanOrEqual(0);
  });

  it('@Cron every 5 seconds, in a time zone: until a second before the next run', () => {
    const hold = defaultJobHoldMs(job(Cron('*/5 * * * * *', { timeZone: 'Europe/Berlin' })), 'Jobs.run');
    const untilNext = 5000 - (Date.now() % 5000);
    expect(Math.abs(hold - (untilNext - Math.min(1000, untilNext / 4)))).toBeLessThan(100);
  });

  it('@Cron hourly: at most a minute (read at 10:10, as when it fired at 10:00 and still runs)', () => {
    // A fixed clock: read in the minute before the hour, "until a second before the next run" is
    // less than a minute (a fresh-clone run at 06:59:13 got 46 201 ms).
    jest.useFakeTimers({ now: new Date('2026-01-01T10:10:00Z'), doNotFake: ['nextTick', 'setImmediate', 'setTimeout', 'setInterval', 'queueMicrotask'] });
    try {
      expect(defaultJobHoldMs(job(Cron('0 0 * * * *')), 'Jobs.run')).toBe(MAX_DEFAULT_HOLD_MS);
    } finally {
      jest.useRealTimers();
    }
  });

  it('@Cron hourly, read 30 s before the hour: until a second before the next run', () => {
    jest.useFakeTimers({ now: new Date('2026-01-01T10:59:30Z'), doNotFake: ['nextTick', 'setImmediate', 'setTimeout', 'setInterval', 'queueMicrotask'] });
    try {
      expect(defaultJobHoldMs(job(Cron('0 0 * * * *')), 'Jobs.run')).toBe(29_000);
    } finally {
      jest.useRealTimers();
    }
  });

  it('@Cron with a schedule cron cannot read: the fallback (every cron schedule fires at most once a second)', () => {
    expect(defaultJobHoldMs(job(Cron('not a schedule')), 'Jobs.run')).toBe(FALLBACK_CRON_HOLD_MS);
  });

  it('@Interval: the interval less a quarter of it, at most a second', () => {
    expect(defaultJobHoldMs(job(Interval(1000)), 'Jobs.run')).toBe(750);
    expect(defaultJobHoldMs(job(Interval('named', 10_000)), 'Jobs.run')).toBe(9000);
    expect(defaultJobHoldMs(job(Interval(3_600_000)), 'Jobs.run')).toBe(MAX_DEFAULT_HOLD_MS);
  });

  it('@Timeout and methods that are no jobs: no hold', () => {
    expect(defaultJobHoldMs(job(Timeout(1000)), 'Jobs.run')).toBe(0);
    expect(defaultJobHoldMs(job(() => undefined), 'Jobs.run')).toBe(0);
  });
});
