import { Catch, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { BaseExceptionFilter, HttpAdapterHost } from '@nestjs/core';
import { throwError, type Observable } from 'rxjs';
import { ANSWERED_ERRORS, answerFor, DEFAULT_ANSWER_SETTINGS, httpBody, logAnswer, sendWsException, transportPayload, type AnswerSettings } from './error-answers.js';

/** Nest's answer to an error it does not know, outside HTTP (where BaseExceptionFilter gives it). */
const UNKNOWN = { status: 'error', message: 'Internal server error' } as const;

const logger = new Logger('ZkLockExceptionFilter');

/** The settings of the instances ZkLockModule makes (answerLockNames); one registered by hand has the defaults. */
const moduleSettings = new WeakMap<ZkLockExceptionFilter, AnswerSettings>();

/**
 * Answers the library's errors in the caller's transport, without naming the lock: HTTP 409
 * Conflict with `Retry-After` when the lock was not acquired, 503 with `Retry-After` when
 * ZooKeeper is away (or refuses the application's credentials: logged as an error naming the fix),
 * for `NotLeaderError`, a lost lock or an inspection that gave up waiting for a session
 * (`SessionWaitAbortedError`), 400 when the request's input cannot name a lock
 * (`InvalidLockNameError`: says why, names neither the key nor the path); every body has a
 * machine-readable `reason`. Microservices (`rpc`): an error reply `{ status: 'error', statusCode,
 * error, message, reason, retryAfterSeconds }`, as Nest's RPC filters answer. WebSockets (`ws`): an
 * `exception` event with the same payload. A ZkError about something else is answered as Nest
 * answers an unknown error; other contexts get the error rethrown.
 *
 * ZkLockModule registers it (and an interceptor that answers in handlers, WebSocket gateways
 * included) unless `answerErrors: false`: register it by hand only then, e.g. to answer with
 * it in some controllers (`@UseFilters(ZkLockExceptionFilter)`).
 * @publicApi
 */
@Catch(...ANSWERED_ERRORS)
export class ZkLockExceptionFilter implements ExceptionFilter {
  constructor(private readonly adapterHost?: HttpAdapterHost) {}

  catch(error: Error, host: ArgumentsHost): void | Observable<never> {
    const type = host.getType<string>();
    const answer = answerFor(error, moduleSettings.get(this) ?? DEFAULT_ANSWER_SETTINGS);
    if (!answer) return this.answerUnknown(error, host);
    if (['http', 'rpc', 'ws'].includes(type)) logAnswer(error, answer);
    switch (type) {
      case 'http': {
        // Without an HTTP adapter (a microservice-only app) there is no HTTP to answer.
        const adapter = this.adapterHost?.httpAdapter;
        if (!adapter) throw error;
        const response = host.switchToHttp().getResponse();
        if (answer.retryAfterSeconds !== undefined) adapter.setHeader(response, 'Retry-After', String(answer.retryAfterSeconds));
        adapter.reply(response, httpBody(answer), answer.statusCode);
        return;
      }
      case 'rpc':
        // Nest's RPC exception path sends what the filter's Observable errors with; a rethrow
        // sends nothing and the client waits for its own timeout.
        return throwError(() => transportPayload(answer));
      case 'ws':
        sendWsException(host.switchToWs().getClient(), transportPayload(answer));
        return;
      default:
        throw error;
    }
  }

  /** A ZkError that is not about the session or the credentials: as Nest answers an error it does not know. */
  private answerUnknown(error: Error, host: ArgumentsHost): void | Observable<never> {
    const adapter = this.adapterHost?.httpAdapter;
    switch (host.getType<string>()) {
      case 'http':
        if (!adapter) throw error;
        new BaseExceptionFilter(adapter).catch(error, host);
        return;
      case 'rpc':
        logger.error(error.message, error.stack);
        return throwError(() => ({ ...UNKNOWN }));
      case 'ws':
        logger.error(error.message, error.stack);
        sendWsException(host.switchToWs().getClient(), { ...UNKNOWN });
        return;
      default:
        throw error;
    }
  }
}

/** The filter ZkLockModule registers (APP_FILTER), with its `answerLockNames`. */
export function moduleExceptionFilter(adapterHost: HttpAdapterHost, settings: AnswerSettings): ZkLockExceptionFilter {
  const filter = new ZkLockExceptionFilter(adapterHost);
  moduleSettings.set(filter, settings);
  return filter;
}
