import type { ArgumentsHost } from '@nestjs/common';
import { firstValueFrom, isObservable } from 'rxjs';
import { LockNotAcquiredError } from '../../../lib/core/errors.js';
import { ZkLockExceptionFilter } from '../../../lib/nest/zk-lock-exception.filter.js';

// The filter's answer per transport (HTTP and TCP microservices run for real in the e2e tests).
function hostOf(type: string, client?: object): ArgumentsHost {
  return { getType: () => type, switchToWs: () => ({ getClient: () => client }) } as unknown as ArgumentsHost;
}
const busy = new LockNotAcquiredError('seat:7', 'timeout');
const unavailable = new LockNotAcquiredError('seat:7', 'connection');

describe('ZkLockExceptionFilter outside HTTP', () => {
  const filter = new ZkLockExceptionFilter();

  it('rpc: an Observable that errors with the answer, never naming the lock', async () => {
    const result = filter.catch(unavailable, hostOf('rpc'));
    expect(isObservable(result)).toBe(true);
    const error = await firstValueFrom(result!).catch((e: unknown) => e);
    expect(error).toEqual({ status: 'error', statusCode: 503, error: 'Service Unavailable', message: 'The lock service is unavailable; retry later', retryAfterSeconds: 5 });
    expect(JSON.stringify(error)).not.toContain('seat');
  });

  it('ws: an `exception` event to the client, as Nest\'s WS filter sends', () => {
    const sent: unknown[] = [];
    filter.catch(busy, hostOf('ws', { emit: (event: string, payload: unknown) => sent.push([event, payload]) }));
    expect(sent).toEqual([['exception', { status: 'error', statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', retryAfterSeconds: 1 }]]);
  });

  it('other contexts (and HTTP without an HTTP adapter): the error unchanged', () => {
    expect(() => filter.catch(busy, hostOf('graphql'))).toThrow(busy);
    expect(() => filter.catch(busy, hostOf('http'))).toThrow(busy);
  });
});
