import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import { finalize, type Observable } from 'rxjs';

const storage = new AsyncLocalStorage<AbortSignal>();

/** The signal of the HTTP request this code serves: it aborts when the client goes away before the answer. */
export function clientGoneSignal(): AbortSignal | undefined {
  return storage.getStore();
}

interface ResponseLike {
  writableFinished?: boolean;
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}

/**
 * Registered globally by ZkLockModule: lets `@WithLock` stop waiting for a lock (and never run the
 * handler) once the HTTP client that asked has disconnected. The response's `close` before it
 * finished is the one sign of that for Express and Fastify alike.
 */
@Injectable()
export class ClientDisconnectInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    const reply = context.switchToHttp().getResponse<{ raw?: ResponseLike } & Partial<ResponseLike>>();
    const response = (reply?.raw ?? reply) as ResponseLike | undefined;
    if (typeof response?.once !== 'function' || typeof response.off !== 'function') return next.handle();
    const gone = new AbortController();
    const onClose = () => {
      if (!response.writableFinished) gone.abort(new Error('the client closed the request'));
    };
    response.once('close', onClose);
    // Nest binds the handler's async context where handle() is called.
    return storage.run(gone.signal, () => next.handle()).pipe(finalize(() => response.off('close', onClose)));
  }
}
