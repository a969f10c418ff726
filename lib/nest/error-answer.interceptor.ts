import { HttpException, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import { catchError, EMPTY, throwError, type Observable } from 'rxjs';
import { answerFor, httpBody, logAnswer, sendWsException, transportPayload, type AnswerSettings } from './error-answers.js';

/**
 * Registered globally by ZkLockModule (unless `answerErrors: false`): a library error that leaves
 * a handler becomes its answer before any exception filter runs.
 * - HTTP: an HttpException with the answer's status and body (the library's error as its `cause`)
 *   and the `Retry-After` header set, so Nest's own handling, and any filter of the application's
 *   (one that catches everything included, whatever the order it was registered in), answers it
 *   as the 409/503/400 it is.
 * - WebSocket: Nest applies no global filter to gateways, so the `exception` event is sent here.
 * - RPC: left to the module's filter (an RpcException would need @nestjs/microservices).
 * Errors the library does not answer pass through untouched.
 */
export class ErrorAnswerInterceptor implements NestInterceptor {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly settings: AnswerSettings,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const type = context.getType<string>();
    if (type !== 'http' && type !== 'ws') return next.handle();
    return next.handle().pipe(
      catchError((error: unknown) => {
        const answer = answerFor(error, this.settings);
        const adapter = this.adapterHost.httpAdapter;
        if (!answer || (type === 'http' && !adapter)) return throwError(() => error);
        logAnswer(error, answer);
        if (type === 'ws') {
          sendWsException(context.switchToWs().getClient(), transportPayload(answer));
          return EMPTY;
        }
        if (answer.retryAfterSeconds !== undefined) adapter.setHeader(context.switchToHttp().getResponse(), 'Retry-After', String(answer.retryAfterSeconds));
        return throwError(() => new HttpException(httpBody(answer), answer.statusCode, { cause: error }));
      }),
    );
  }
}
