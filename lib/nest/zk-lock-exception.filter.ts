import { Catch, HttpStatus, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { throwError, type Observable } from 'rxjs';
import { InvalidLockNameError, LockNotAcquiredError, NotLeaderError } from '../core/errors.js';
import { ZkCode, ZkError } from '../core/client/zk-error.js';

/** What every transport tells the caller, without naming the lock. */
type Handled = LockNotAcquiredError | InvalidLockNameError | NotLeaderError | ZkError;

interface Answer {
  statusCode: number;
  error: string;
  message: string;
  retryAfterSeconds: number | undefined;
}

const logger = new Logger('ZkLockExceptionFilter');

/** At most this many characters of a lock name go into an answer or a log line. */
const SHOWN_NAME_CHARS = 64;

/** A quoted string of the caller's, shortened: `"abc…" (10000 characters)`. */
function shortQuoted(text: string): string {
  if (text.length <= SHOWN_NAME_CHARS) return JSON.stringify(text);
  return `${JSON.stringify(text.slice(0, SHOWN_NAME_CHARS))}… (${text.length} characters)`;
}

/**
 * Why a lock name was refused, without echoing a long name (or the path made of it) in full:
 * e.g. `contains a character ZooKeeper does not allow (U+D83C)`.
 */
export function lockNameProblem(error: InvalidLockNameError): string {
  const prefix = `Invalid lock name ${JSON.stringify(error.lockName)}: `;
  const detail = error.message.startsWith(prefix) ? error.message.slice(prefix.length) : error.message;
  // Quoted strings in the detail (the path built from the name) are shortened too.
  return detail.replace(/"(?:[^"\\]|\\.)*"/g, (quoted) => {
    try {
      return shortQuoted(JSON.parse(quoted) as string);
    } catch {
      return quoted;
    }
  });
}

/** ZooKeeper refused this application's credentials, or the session is unusable: not the caller's fault. */
function isUnavailable(error: ZkError): boolean {
  return error.code === ZkCode.NOAUTH || error.code === ZkCode.AUTHFAILED || error.isConnectionError || error.isSessionGone;
}

function answerFor(error: Handled): Answer {
  if (error instanceof ZkError) {
    if (isUnavailable(error)) {
      return { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable', message: 'The lock service is unavailable; retry later', retryAfterSeconds: 5 };
    }
    return { statusCode: HttpStatus.INTERNAL_SERVER_ERROR, error: 'Internal Server Error', message: 'Internal server error', retryAfterSeconds: undefined };
  }
  if (error instanceof NotLeaderError) {
    // Another instance leads: the caller may retry (a load balancer may reach the leader).
    return { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable', message: 'This instance is not the leader; retry later', retryAfterSeconds: 1 };
  }
  if (error instanceof InvalidLockNameError) {
    // A lock key built from request input that cannot name a lock (e.g. too long): say why.
    return {
      statusCode: HttpStatus.BAD_REQUEST,
      error: 'Bad Request',
      message: `The request cannot name a lock (${shortQuoted(error.lockName)}): ${lockNameProblem(error)}`,
      retryAfterSeconds: undefined,
    };
  }
  const unavailable = error.reason === 'connection';
  return {
    statusCode: unavailable ? HttpStatus.SERVICE_UNAVAILABLE : HttpStatus.CONFLICT,
    error: unavailable ? 'Service Unavailable' : 'Conflict',
    message: unavailable ? 'The lock service is unavailable; retry later' : 'The resource is busy; retry later',
    retryAfterSeconds: unavailable ? 5 : 1,
  };
}

/** What the operator reads: the reason the caller was given, and what to fix when it is ours. */
function logFor(error: Handled, answer: Answer): void {
  if (error instanceof InvalidLockNameError) {
    logger.warn(`Answered ${answer.statusCode}: the request cannot name a lock (${shortQuoted(error.lockName)}): ${lockNameProblem(error)}`);
  } else if (error instanceof ZkError && (error.code === ZkCode.NOAUTH || error.code === ZkCode.AUTHFAILED)) {
    logger.error(
      `Answered ${answer.statusCode}: ZooKeeper refused this application (${error.codeName}) on ${error.operation}` +
        `${error.path === undefined ? '' : ` ${error.path}`}: the lock nodes belong to other credentials; ` +
        "check ZkLockModule's auth option (digest user:password) against the ACL of the locks' parent nodes",
    );
  } else if (error instanceof ZkError && answer.statusCode === HttpStatus.SERVICE_UNAVAILABLE) {
    logger.warn(`Answered ${answer.statusCode}: ${error.message}`);
  } else if (error instanceof ZkError) {
    // As Nest's own handler logs an error it does not know.
    logger.error(error.message, error.stack);
  }
}

/**
 * Opt-in: answers callers whose lock was not acquired in their transport's way, without naming the
 * lock. HTTP: 409 Conflict (503 when the lock service itself is unavailable, or for a leader-only
 * call on an instance that does not lead: NotLeaderError) with `Retry-After`;
 * 400 when the request's input cannot name a lock (InvalidLockNameError, e.g. too long; the
 * message says why, quoting at most 64 characters of the name); 503 when ZooKeeper refuses the
 * application's credentials (a ZkError NOAUTH, logged as an error naming the fix) or the session
 * is unusable; any other ZkError a plain 500, logged as Nest logs an unknown error.
 * Microservices (`rpc`): an error reply `{ status: 'error', statusCode, error, message,
 * retryAfterSeconds }`, as Nest's RPC filters answer. WebSockets (`ws`): an `exception` event with
 * the same payload, as Nest's WS filter sends it (socket.io and native `ws`). Other contexts get the
 * error rethrown. Register with `{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }` or
 * `app.useGlobalFilters(new ZkLockExceptionFilter(app.get(HttpAdapterHost)))`; Nest applies no
 * global filter to WebSocket gateways, so a gateway also needs `@UseFilters(ZkLockExceptionFilter)`.
 * @publicApi
 */
@Catch(LockNotAcquiredError, InvalidLockNameError, NotLeaderError, ZkError)
export class ZkLockExceptionFilter implements ExceptionFilter<Handled> {
  constructor(private readonly adapterHost?: HttpAdapterHost) {}

  catch(error: Handled, host: ArgumentsHost): void | Observable<never> {
    const answer = answerFor(error);
    if (['http', 'rpc', 'ws'].includes(host.getType<string>())) logFor(error, answer);
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
