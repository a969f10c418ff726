import { type CallHandler, type ExecutionContext, HttpException, Injectable, type NestInterceptor } from '@nestjs/common';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { finalize, Observable, tap } from 'rxjs';

interface HttpRequest {
  method: string;
  path: string;
  route?: { path?: string };
}

/**
 * TRACES only: a span per HTTP request (`POST /events/:id/purchase`), active while its handler
 * runs, so that the lock spans of `@WithLock` are its children. An application would get these
 * from `@opentelemetry/instrumentation-http` instead.
 */
@Injectable()
export class RequestSpans implements NestInterceptor {
  private readonly tracer = trace.getTracer('ticket-sale');

  intercept(execution: ExecutionContext, next: CallHandler): Observable<unknown> {
    const http = execution.switchToHttp();
    const request = http.getRequest<HttpRequest>();
    const route = `${request.method} ${request.route?.path ?? request.path}`;
    const span = this.tracer.startSpan(route, { kind: SpanKind.SERVER, attributes: { 'http.request.method': request.method, 'http.route': route } });
    const active = trace.setSpan(context.active(), span);
    // Subscribing calls the handler: it runs in the request span's context.
    return new Observable((subscriber) => context.with(active, () => next.handle().subscribe(subscriber))).pipe(
      tap({
        error: (error: unknown) => {
          const status = error instanceof HttpException ? error.getStatus() : 500;
          span.setAttribute('http.response.status_code', status);
          if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: String(error) });
        },
        complete: () => span.setAttribute('http.response.status_code', http.getResponse<{ statusCode: number }>().statusCode),
      }),
      finalize(() => span.end()),
    );
  }
}
