// nestjs-zk-lock/testing: after expireSession(), the next call finds a new session, also under
// Jest's fake timers (docs/testing.md): after a session that lived, the connection opens the next
// one at once (the pause with jitter is only for sessions that end young).
import { jest } from '@jest/globals';
import { FakeLockService, FakeLockStore } from '../../../lib/testing/index.js';

it('after expireSession(), a tryAcquire on the same service gets the free lock', async () => {
  const one = new FakeLockService({ store: new FakeLockStore() });
  await one.expireSession();
  const lease = await one.mutex('report').tryAcquire();
  expect(lease).not.toBeNull();
  await lease?.release();
  await one.onApplicationShutdown();
});

it('under fake timers, after expireSession(), an acquire on the same service settles', async () => {
  jest.useFakeTimers();
  try {
    const one = new FakeLockService({ store: new FakeLockStore() });
    await one.expireSession();
    const outcome = await Promise.race([
      one.mutex('report').acquire().then(() => 'acquired', (error: unknown) => `rejected: ${String(error)}`),
      // Real time, not the faked clock: how long the test waits for the acquire.
      new Promise<string>((resolve) => jest.requireActual<typeof import('node:timers')>('node:timers').setTimeout(() => resolve('pending after 2 s'), 2000)),
    ]);
    expect(outcome).toBe('acquired');
  } finally {
    jest.useRealTimers();
  }
});
