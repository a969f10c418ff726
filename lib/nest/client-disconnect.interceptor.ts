import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Observable } from 'rxjs';

interface ResponseLike {
  writableFinished?: boolean;
  /** Set (before `close` is emitted) once the response or its connection is closed. */
  destroyed?: boolean;
  once(event: 'close', listener: () => void): unknown;
}

/**
 * One HTTP request's "the client went away" signal, made when first asked for: only a request
 * that waits for a lock asks (`@WithLock`), and every other request of the application pays
 * for none of it (no AbortController, no listener, no operator on its Observable).
 */
class ClientGone {
  private controller: AbortController | undefined;

  constructor(private readonly response: ResponseLike) {}

  get signal(): AbortSignal {
    if (this.controller) return this.controller.signal;
    const controller = (this.controller = new AbortController());
    const { response } = this;
    const gone = () => !response.writableFinished && controller.abort(new Error('the client closed the request'));
    // Closed before anyone asked: aborted at once. Otherwise the response's `close` tells; it is
    // emitted once the response finished too, which takes the listener off (and aborts nothing).
    if (response.destroyed) gone();
    else response.once('close', gone);
    return controller.signal;
  }
}

const storage = new AsyncLocalStorage<ClientGone>();

/** The signal of the HTTP request this code serves: it aborts when the client goes away before the answer. */
export function clientGoneSignal(): AbortSignal | undefined {
  return storage.getStore()?.signal;
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
    if (typeof response?.once !== 'function') return next.handle();
    // Nest binds the handler's async context where handle() is called.
    return storage.run(new ClientGone(response), () => next.handle());
  }
}
