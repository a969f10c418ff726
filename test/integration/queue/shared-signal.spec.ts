import { getEventListeners } from 'node:events';
import { LockNotAcquiredError } from '../../../lib/core/errors.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { closeAll, engine, uniquePath } from '../../support/helpers.js';

afterAll(closeAll);

describe('many acquires sharing one AbortSignal (an application-wide shutdown signal)', () => {
  it('adds one listener to the signal, not one per waiter (no MaxListenersExceededWarning), and aborts them all', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    try {
      const e = await engine();
      const path = uniquePath('signal');
      const holder = await new Mutex(e, 'shared', path).acquire();
      const shutdown = new AbortController();
      // Waves of waiters that give up (deadline) and come back: listeners must not pile up either.
      for (let wave = 0; wave < 3; wave++) {
        const timedOut = Array.from({ length: 15 }, () => new Mutex(e, 'shared', path, { coalesce: false }).acquire({ waitMs: 50, signal: shutdown.signal }));
        await Promise.allSettled(timedOut);
      }
      const waiting = Array.from({ length: 30 }, (_, i) => new Mutex(e, 'shared', path, { coalesce: i % 2 === 0 }).acquire({ signal: shutdown.signal }));
      await new Promise((resolve) => setTimeout(resolve, 200));
      // One listener for all of them (a listener each made Node warn of a leak past 10).
      expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(1);
      shutdown.abort(new Error('shutting down'));
      const outcomes = await Promise.allSettled(waiting);
      expect(outcomes.every((o) => o.status === 'rejected' && o.reason instanceof LockNotAcquiredError && o.reason.reason === 'aborted')).toBe(true);
      await holder.release();
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((w) => w.startsWith('MaxListenersExceededWarning'))).toEqual([]);
      // And none left behind once nobody waits on it.
      const later = new AbortController();
      await Promise.allSettled([new Mutex(e, 'shared', path).acquire({ waitMs: 0, signal: later.signal })]);
      expect(getEventListeners(later.signal, 'abort')).toHaveLength(0);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
