import { HttpStatus, Logger } from '@nestjs/common';
import {
  ConnectionClosedError,
  DeadlockError,
  describeDeadlock,
  InvalidLockNameError,
  LockLostError,
  LockNotAcquiredError,
  NotLeaderError,
  ReplyTooLargeError,
  SessionWaitAbortedError,
  ZkConnectError,
} from '../core/errors.js';
import { ZkCode, ZkError } from '../core/client/zk-error.js';

/**
 * Why the caller got its answer, machine-readable (the `reason` of every answer body).
 * @publicApi
 */
export type ZkLockAnswerReason =
  /** 409: the lock was not acquired within its wait (`waitMs`): someone else holds it. */
  | 'lock-timeout'
  /** 409: the wait for the lock was cut short (the HTTP client went away, or the caller's signal). */
  | 'lock-wait-aborted'
  /**
   * 409: the request held a lock and waited for one whose holder waited for it (directly or along
   * a cycle of processes): of the cycle's waits, its wait began last and gave up (`DeadlockError`).
   */
  | 'deadlock'
  /** 503: no usable ZooKeeper session (away, closed, expired, or refusing the credentials). */
  | 'zookeeper-unavailable'
  /** 503: a leader-only call (`NotLeaderError`) on an instance that does not lead. */
  | 'not-leader'
  /** 400: the request's input cannot name a lock (too long, a character ZooKeeper refuses, ...). */
  | 'invalid-lock-key'
  /** 503: the lock was lost while the request was served (its signal aborted). */
  | 'lock-lost'
  /** 503: ZooKeeper's reply (a lock's queue listing) is larger than the client reads (`maxReplyBytes`). */
  | 'reply-too-large';

/** What a caller is told, in every transport. */
export interface ErrorAnswer {
  statusCode: number;
  error: string;
  message: string;
  reason: ZkLockAnswerReason;
  retryAfterSeconds?: number;
  /** Only with `answerLockNames: true`; at most 64 characters of a name the library refused. */
  lockName?: string;
}

export interface AnswerSettings {
  /** Whether answers name the lock (`answerLockNames`). */
  lockNames: boolean;
}

export const DEFAULT_ANSWER_SETTINGS: AnswerSettings = { lockNames: false };

/** The library's errors that get an answer of their own (the filter's `@Catch`). */
export const ANSWERED_ERRORS = [
  LockNotAcquiredError,
  InvalidLockNameError,
  NotLeaderError,
  ConnectionClosedError,
  ZkConnectError,
  SessionWaitAbortedError,
  LockLostError,
  ReplyTooLargeError,
  ZkError,
] as const;

const logger = new Logger('ZkLockExceptionFilter');

/** At most this many characters of a lock name go into an answer or a log line. */
const SHOWN_NAME_CHARS = 64;

/** A quoted string of the caller's, shortened: `"abc…" (10000 characters)`. */
function shortQuoted(text: string): string {
  if (text.length <= SHOWN_NAME_CHARS) return JSON.stringify(text);
  return `${JSON.stringify(text.slice(0, SHOWN_NAME_CHARS))}… (${text.length} characters)`;
}

function shortName(text: string): string {
  return text.length <= SHOWN_NAME_CHARS ? text : `${text.slice(0, SHOWN_NAME_CHARS)}…`;
}

/** The detail of an InvalidLockNameError, after `Invalid lock name "<name>": `. */
function detailOf(error: InvalidLockNameError): string {
  const prefix = `Invalid lock name ${JSON.stringify(error.lockName)}: `;
  return error.message.startsWith(prefix) ? error.message.slice(prefix.length) : error.message;
}

/**
 * Why a lock name was refused, without echoing a long name (or the path made of it) in full:
 * e.g. `contains a character ZooKeeper does not allow (U+D83C)`. For logs and for answers that
 * may name the lock (`answerLockNames`).
 */
export function lockNameProblem(error: InvalidLockNameError): string {
  // Quoted strings in the detail (the path built from the name) are shortened.
  return detailOf(error).replace(/"(?:[^"\\]|\\.)*"/g, (quoted) => {
    try {
      return shortQuoted(JSON.parse(quoted) as string);
    } catch {
      return quoted;
    }
  });
}

/**
 * Why a lock name was refused, naming neither the name nor its path (which holds the base path):
 * `its path is 5012 characters long (at most 1024)`. The index of a refused character counts
 * from the path's start, which the caller does not know, so it goes too.
 */
function anonymousProblem(error: InvalidLockNameError): string {
  return detailOf(error)
    .replace(/^the path "(?:[^"\\]|\\.)*" /, 'its path ')
    .replace(/^the path /, 'its path ')
    .replace(/^(is |expected )/, 'the name $1')
    .replace(/ at index \d+/, '');
}

/** ZooKeeper refused this application's credentials, or the session is unusable: not the caller's fault. */
function isUnavailable(error: ZkError): boolean {
  return error.code === ZkCode.NOAUTH || error.code === ZkCode.AUTHFAILED || error.isConnectionError || error.isSessionGone;
}

const UNAVAILABLE = { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable' } as const;

function unavailable(message = 'The lock service is unavailable; retry later'): ErrorAnswer {
  return { ...UNAVAILABLE, message, reason: 'zookeeper-unavailable', retryAfterSeconds: 5 };
}

function withName(answer: ErrorAnswer, name: string, settings: AnswerSettings): ErrorAnswer {
  return settings.lockNames ? { ...answer, lockName: shortName(name) } : answer;
}

/**
 * The answer for one of the library's errors, or undefined for any other error (and for a
 * ZkError that is not about the session or the credentials: a bug to report, left to Nest).
 */
export function answerFor(error: unknown, settings: AnswerSettings = DEFAULT_ANSWER_SETTINGS): ErrorAnswer | undefined {
  if (error instanceof DeadlockError) {
    // Contention of a kind a retry resolves: the other members went on once this one let go.
    const answer: ErrorAnswer = {
      statusCode: HttpStatus.CONFLICT,
      error: 'Conflict',
      message: 'The request waited for a lock in a deadlock with another request; retry later',
      reason: 'deadlock',
      retryAfterSeconds: 1,
    };
    return withName(answer, error.lockName, settings);
  }
  if (error instanceof LockNotAcquiredError) {
    if (error.reason === 'connection') return withName(unavailable(), error.lockName, settings);
    const answer: ErrorAnswer = {
      statusCode: HttpStatus.CONFLICT,
      error: 'Conflict',
      message: 'The resource is busy; retry later',
      reason: error.reason === 'timeout' ? 'lock-timeout' : 'lock-wait-aborted',
      retryAfterSeconds: 1,
    };
    return withName(answer, error.lockName, settings);
  }
  if (error instanceof InvalidLockNameError) {
    // A lock key built from request input that cannot name a lock (e.g. too long): say why.
    const message = settings.lockNames
      ? `The request cannot name a lock (${shortQuoted(error.lockName)}): ${lockNameProblem(error)}`
      : `The request cannot name a lock: ${anonymousProblem(error)}`;
    return withName({ statusCode: HttpStatus.BAD_REQUEST, error: 'Bad Request', message, reason: 'invalid-lock-key' }, error.lockName, settings);
  }
  if (error instanceof NotLeaderError) {
    // Another instance leads: the caller may retry (a load balancer may reach the leader).
    const answer: ErrorAnswer = { ...UNAVAILABLE, message: 'This instance is not the leader; retry later', reason: 'not-leader', retryAfterSeconds: 1 };
    return withName(answer, error.election, settings);
  }
  if (error instanceof LockLostError) {
    const answer: ErrorAnswer = { ...UNAVAILABLE, message: 'The lock was lost while the request was served; retry later', reason: 'lock-lost', retryAfterSeconds: 1 };
    return withName(answer, error.lockName, settings);
  }
  if (error instanceof ReplyTooLargeError) {
    // Not the caller's fault and not a bug: the queue (or tree) shrinks, or the operator raises
    // maxReplyBytes (the log says so). 503, as for any condition of the server side that passes.
    return { ...UNAVAILABLE, message: 'The lock service cannot read this lock now; retry later', reason: 'reply-too-large', retryAfterSeconds: 5 };
  }
  if (error instanceof ConnectionClosedError || error instanceof ZkConnectError || error instanceof SessionWaitAbortedError) return unavailable();
  if (error instanceof ZkError && isUnavailable(error)) return unavailable();
  return undefined;
}

/** What the operator reads: the reason the caller was given, and what to fix when it is ours. */
export function logAnswer(error: unknown, answer: ErrorAnswer): void {
  if (error instanceof InvalidLockNameError) {
    logger.warn(`Answered ${answer.statusCode}: the request cannot name a lock (${shortQuoted(error.lockName)}): ${lockNameProblem(error)}`);
  } else if (error instanceof ZkError && (error.code === ZkCode.NOAUTH || error.code === ZkCode.AUTHFAILED)) {
    logger.error(
      `Answered ${answer.statusCode}: ZooKeeper refused this application (${error.codeName}) on ${error.operation}` +
        `${error.path === undefined ? '' : ` ${error.path}`}: the lock nodes belong to other credentials; ` +
        "check ZkLockModule's auth option (digest user:password) against the ACL of the locks' parent nodes",
    );
  } else if (error instanceof ReplyTooLargeError) {
    logger.error(`Answered ${answer.statusCode}: ${error.message}`);
  } else if (error instanceof DeadlockError) {
    // A lock order to fix in the application: who waited for whom.
    logger.warn(`Answered ${answer.statusCode}: deadlock: ${describeDeadlock(error.deadlock)}`);
  } else if (error instanceof ZkError) {
    logger.warn(`Answered ${answer.statusCode}: ${error.message}`);
  }
}

/** The HTTP body: the answer without the header's `retryAfterSeconds`. */
export function httpBody(answer: ErrorAnswer): Omit<ErrorAnswer, 'retryAfterSeconds'> {
  const { retryAfterSeconds: _header, ...body } = answer;
  return body;
}

/** The RPC error reply or WebSocket `exception` payload, as Nest's own filters shape theirs. */
export function transportPayload(answer: ErrorAnswer): { status: 'error' } & ErrorAnswer {
  return { status: 'error', ...answer };
}

/**
 * An `exception` event as Nest's own WS filter sends it: a native `ws` socket (numeric readyState,
 * `send`) gets an `{ event, data }` frame — its `emit` only fires a local event the client never
 * sees; socket.io and other emitters get `emit`.
 */
export function sendWsException(client: unknown, payload: object): void {
  const socket = client as { readyState?: unknown; send?: (frame: string) => void; emit?: (event: string, data: unknown) => void };
  if (typeof socket.readyState === 'number' && typeof socket.send === 'function') socket.send(JSON.stringify({ event: 'exception', data: payload }));
  else socket.emit?.('exception', payload);
}
