// Review of the new-session backoff (zk-connection.ts openSuccessor) in nestjs-zk-lock/testing:
// FakeLockService.expireSession() resolves on 'lost', and "opens a new session for later calls"
// (its doc). The successor now opens after a 10-50 ms timer, so a try right after finds no
// session, and under Jest's fake timers (which docs/testing.md says may be used freely) the next
// session never opens until the test advances them.
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
