import { Catch, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { throwError, type Observable } from 'rxjs';
import { InvalidLockNameError, LockNotAcquiredError, NotLeaderError } from '../core/errors.js';

/** What every transport tells the caller, without naming the lock. */
type Handled = LockNotAcquiredError | InvalidLockNameError | NotLeaderError;

function answerFor(error: Handled) {
  if (error instanceof NotLeaderError) {
    // Another instance leads: the caller may retry (a load balancer may reach the leader).
    return { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable', message: 'This instance is not the leader; retry later', retryAfterSeconds: 1 };
  }
  if (error instanceof InvalidLockNameError) {
    // A lock key built from request input that cannot name a lock (e.g. too long).
    return { statusCode: HttpStatus.BAD_REQUEST, error: 'Bad Request', message: 'The request cannot name a lock', retryAfterSeconds: undefined };
  }
  const unavailable = error.reason === 'connection';
  return {
    statusCode: unavailable ? HttpStatus.SERVICE_UNAVAILABLE : HttpStatus.CONFLICT,
    error: unavailable ? 'Service Unavailable' : 'Conflict',
    message: unavailable ? 'The lock service is unavailable; retry later' : 'The resource is busy; retry later',
    retryAfterSeconds: unavailable ? 5 : 1,
  };
}

/**
 * Opt-in: answers callers whose lock was not acquired in their transport's way, without naming the
 * lock. HTTP: 409 Conflict (503 when the lock service itself is unavailable, or for a leader-only
 * call on an instance that does not lead: NotLeaderError) with `Retry-After`;
 * 400 when the request's input cannot name a lock (InvalidLockNameError, e.g. too long).
 * Microservices (`rpc`): an error reply `{ status: 'error', statusCode, error, message,
 * retryAfterSeconds }`, as Nest's RPC filters answer. WebSockets (`ws`): an `exception` event with
 * the same payload, as Nest's WS filter sends it (socket.io and native `ws`). Other contexts get the
 * error rethrown. Register with `{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }` or
 * `app.useGlobalFilters(new ZkLockExceptionFilter(app.get(HttpAdapterHost)))`; Nest applies no
 * global filter to WebSocket gateways, so a gateway also needs `@UseFilters(ZkLockExceptionFilter)`.
 * @publicApi
 */
@Catch(LockNotAcquiredError, InvalidLockNameError, NotLeaderError)
export class ZkLockExceptionFilter implements ExceptionFilter<Handled> {
  constructor(private readonly adapterHost?: HttpAdapterHost) {}

  catch(error: Handled, host: ArgumentsHost): void | Observable<never> {
    const answer = answerFor(error);
    switch (host.getType<string>()) {
      case 'http': {
        // Without an HTTP adapter (a microservice-only app) there is no HTTP to answer.
        const adapter = this.adapterHost?.httpAdapter;
        if (!adapter) throw error;
        const response = host.switchToHttp().getResponse();
        if (answer.retryAfterSeconds !== undefined) adapter.setHeader(response, 'Retry-After', String(answer.retryAfterSeconds));
        const { statusCode, error: name, message } = answer;
        adapter.reply(response, { statusCode, error: name, message }, statusCode);
        return;
      }
      case 'rpc':
        // Nest's RPC exception path sends what the filter's Observable errors with; a rethrow
        // sends nothing and the client waits for its own timeout.
        return throwError(() => ({ status: 'error', ...answer }));
      case 'ws':
        sendWsException(host.switchToWs().getClient(), { status: 'error', ...answer });
        return;
      default:
        throw error;
    }
  }
}

/**
 * An `exception` event as Nest's own WS filter sends it: a native `ws` socket (numeric readyState,
 * `send`) gets an `{ event, data }` frame — its `emit` only fires a local event the client never
 * sees; socket.io and other emitters get `emit`.
 */
function sendWsException(client: unknown, payload: object): void {
  const socket = client as { readyState?: unknown; send?: (frame: string) => void; emit?: (event: string, data: unknown) => void };
  if (typeof socket.readyState === 'number' && typeof socket.send === 'function') socket.send(JSON.stringify({ event: 'exception', data: payload }));
  else socket.emit?.('exception', payload);
}
