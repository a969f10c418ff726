import { Catch, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { LockNotAcquiredError } from '../core/errors.js';

/**
 * Opt-in: answers HTTP requests whose lock was not acquired with 409 Conflict and `Retry-After`
 * (503 when the lock service itself is unavailable), without naming the lock. Outside HTTP the
 * error is rethrown unchanged. Register with `{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }`
 * or `app.useGlobalFilters(new ZkLockExceptionFilter(app.get(HttpAdapterHost)))`.
 * @publicApi
 */
@Catch(LockNotAcquiredError)
export class ZkLockExceptionFilter implements ExceptionFilter<LockNotAcquiredError> {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(error: LockNotAcquiredError, host: ArgumentsHost): void {
    if (host.getType() !== 'http') throw error;
    const adapter = this.adapterHost.httpAdapter;
    const response = host.switchToHttp().getResponse();
    const unavailable = error.reason === 'connection';
    const status = unavailable ? HttpStatus.SERVICE_UNAVAILABLE : HttpStatus.CONFLICT;
    adapter.setHeader(response, 'Retry-After', unavailable ? '5' : '1');
    adapter.reply(
      response,
      {
        statusCode: status,
        error: unavailable ? 'Service Unavailable' : 'Conflict',
        message: unavailable ? 'The lock service is unavailable; retry later' : 'The resource is busy; retry later',
      },
      status,
    );
  }
}
