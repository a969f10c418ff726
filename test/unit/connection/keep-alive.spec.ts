import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { systemClock, type Clock, type ClockTimer } from '../../../lib/core/clock.js';

/** The system clock, recording the intervals it arms: whether each is ref'd and whether it was cleared. */
function recordingClock() {
  const intervals = new Map<ClockTimer, { refed: boolean; cleared: boolean }>();
  const clock: Clock = {
    ...systemClock,
    setInterval: (run, ms) => {
      const timer = systemClock.setInterval(run, ms).unref(); // never holds the test runner
      const record = { refed: true, cleared: false };
      const handle: ClockTimer = {
        ref: () => ((record.refed = true), handle),
        unref: () => ((record.refed = false), handle),
      };
      intervals.set(handle, record);
      timers.set(handle, timer);
      return handle;
    },
    clearInterval: (handle) => {
      if (!handle || !intervals.has(handle)) return;
      intervals.get(handle)!.cleared = true;
      systemClock.clearInterval(timers.get(handle));
    },
  };
  const timers = new Map<ClockTimer, ClockTimer>();
  const live = () => [...intervals.values()].filter((r) => r.refed && !r.cleared).length;
  return { clock, armed: () => intervals.size, live };
}

function deferred() {
  let resolve!: () => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

// A connection that is never opened: keepAliveUntilSettled is bookkeeping on the clock alone.
describe('ZkConnection.keepAliveUntilSettled: one ref’d timer while any call is pending', () => {
  it('arms one timer for any number of pending calls and clears it when the last settles, rejected or not', async () => {
    const { clock, armed, live } = recordingClock();
    const connection = new ZkConnection({ connectString: '127.0.0.1:1' }, undefined, clock);
    const first = deferred();
    const second = deferred();
    const returned = connection.keepAliveUntilSettled(first.promise);
    connection.keepAliveUntilSettled(second.promise).catch(() => undefined);
    expect(returned).toBe(first.promise); // the caller's own promise, not a wrapper
    expect({ armed: armed(), live: live() }).toEqual({ armed: 1, live: 1 });
    first.resolve();
    await first.promise;
    expect(live()).toBe(1);
    second.reject(new Error('refused'));
    await second.promise.catch(() => undefined);
    expect({ armed: armed(), live: live() }).toEqual({ armed: 1, live: 0 });
    // A later call arms it again.
    const third = deferred();
    connection.keepAliveUntilSettled(third.promise);
    expect({ armed: armed(), live: live() }).toEqual({ armed: 2, live: 1 });
    third.resolve();
    await third.promise;
    expect(live()).toBe(0);
  });
});
