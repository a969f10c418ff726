// ClientDisconnectInterceptor runs on every HTTP request of an application that imports
// ZkLockModule: the "client gone" signal is made only for a request that asks for it (@WithLock),
// and it still aborts when the client left before the question.
import { EventEmitter } from 'node:events';
import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { Observable } from 'rxjs';
import { ClientDisconnectInterceptor, clientGoneSignal } from '../../../lib/nest/client-disconnect.interceptor.js';

class FakeResponse extends EventEmitter {
  writableFinished = false;
  destroyed = false;
  /** The client leaves before the answer: what Node does on a closed connection. */
  clientLeaves(): void {
    this.destroyed = true;
    this.emit('close');
  }
  /** The answer went out, then the response closes. */
  finish(): void {
    this.writableFinished = true;
    this.destroyed = true;
    this.emit('close');
  }
}

/** Runs `inside` where the interceptor's handler would run; returns what it returned. */
function intercept<T>(response: FakeResponse, inside: () => T): T {
  const context = { getType: () => 'http', switchToHttp: () => ({ getResponse: () => response }) } as unknown as ExecutionContext;
  let result: T | undefined;
  const next: CallHandler = { handle: () => ((result = inside()), new Observable()) };
  new ClientDisconnectInterceptor().intercept(context, next);
  return result as T;
}

describe('ClientDisconnectInterceptor', () => {
  it('adds nothing to a request that never asks for the signal', () => {
    const response = new FakeResponse();
    intercept(response, () => undefined);
    expect(response.listenerCount('close')).toBe(0);
  });

  it('aborts the signal when the client leaves before the answer', () => {
    const response = new FakeResponse();
    const signal = intercept(response, () => clientGoneSignal());
    expect(signal?.aborted).toBe(false);
    expect(response.listenerCount('close')).toBe(1);
    response.clientLeaves();
    expect(signal?.aborted).toBe(true);
    expect(response.listenerCount('close')).toBe(0);
  });

  it('gives an aborted signal when the client left before it was asked for', () => {
    const response = new FakeResponse();
    const signal = intercept(response, () => {
      response.clientLeaves();
      return clientGoneSignal();
    });
    expect(signal?.aborted).toBe(true);
  });

  it('does not abort when the response finished, and leaves no listener behind', () => {
    const response = new FakeResponse();
    const signal = intercept(response, () => clientGoneSignal());
    response.finish();
    expect(signal?.aborted).toBe(false);
    expect(response.listenerCount('close')).toBe(0);
  });

  it('gives one signal per request, however often it is asked for', () => {
    const response = new FakeResponse();
    const [a, b] = intercept(response, () => [clientGoneSignal(), clientGoneSignal()]);
    expect(a).toBe(b);
    expect(response.listenerCount('close')).toBe(1);
  });
});
