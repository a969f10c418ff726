import type { ArgumentsHost } from '@nestjs/common';
import { firstValueFrom, isObservable } from 'rxjs';
import {
  ConnectionClosedError,
  DeadlockError,
  InvalidLockNameError,
  InvalidOptionError,
  LockLostError,
  LockNotAcquiredError,
  LockUsageError,
  NotLeaderError,
  ReplyTooLargeError,
  SessionWaitAbortedError,
  ZkConnectError,
} from '../../../lib/core/errors.js';
import { ZkCode, ZkError } from '../../../lib/core/client/zk-error.js';
import { resolveLockPath } from '../../../lib/core/paths.js';
import { answerFor } from '../../../lib/nest/error-answers.js';
import { ZkLockExceptionFilter } from '../../../lib/nest/zk-lock-exception.filter.js';

// The answer for each of the library's errors (HTTP, RPC and WebSocket run for real in the e2e tests).
function hostOf(type: string, client?: object): ArgumentsHost {
  return { getType: () => type, switchToWs: () => ({ getClient: () => client }) } as unknown as ArgumentsHost;
}
const busy = new LockNotAcquiredError('seat:7', 'timeout');
const unavailable = new LockNotAcquiredError('seat:7', 'connection');
const member = (lock: string, waitsFor: string, pid: number) => ({
  lock,
  holdingNode: `${lock}/_c_1-lock-0000000000`,
  holder: { host: 'h', pid },
  sessionId: '1',
  waitsFor,
  waitingNode: `${waitsFor}/_c_2-lock-0000000001`,
  waitingSince: new Date(0),
});
const deadlock = new DeadlockError('event:1', { members: [member('/locks/event:2', '/locks/event:1', 1), member('/locks/event:1', '/locks/event:2', 2)] });
const basePath = '/secret-base';
function refusedName(name: string): InvalidLockNameError {
  try {
    resolveLockPath(basePath, name);
  } catch (error) {
    return error as InvalidLockNameError;
  }
  throw new Error(`${name} was accepted`);
}

describe('answerFor: the answer for each of the library errors', () => {
  const zkAway = { statusCode: 503, error: 'Service Unavailable', message: 'The lock service is unavailable; retry later', reason: 'zookeeper-unavailable', retryAfterSeconds: 5 };
  it.each([
    ['a wait that ran out (contention)', busy, { statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-timeout', retryAfterSeconds: 1 }],
    ['a wait cut short', new LockNotAcquiredError('seat:7', 'aborted'), { statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-wait-aborted', retryAfterSeconds: 1 }],
    ['a wait that ended in a deadlock', deadlock, { statusCode: 409, error: 'Conflict', message: 'The request waited for a lock in a deadlock with another request; retry later', reason: 'deadlock', retryAfterSeconds: 1 }],
    ['a wait that ended with ZooKeeper away', unavailable, zkAway],
    ['the connection closed (shutdown)', new ConnectionClosedError('the lock module is shutting down'), zkAway],
    ['no session at connect', new ZkConnectError('zk:2181', 'unreachable', 'no server answered'), zkAway],
    ['an inspection that gave up waiting for a session', new SessionWaitAbortedError('inspect', { cause: new DOMException('timed out', 'TimeoutError') }), zkAway],
    ['ZooKeeper refusing the credentials', new ZkError(ZkCode.NOAUTH, 'create', '/locks/x'), zkAway],
    ['a lost connection', new ZkError(ZkCode.CONNECTIONLOSS, 'getChildren', '/locks/x'), zkAway],
    ['an expired session', new ZkError(ZkCode.SESSIONEXPIRED, 'create', '/locks/x'), zkAway],
    ['a leader-only call elsewhere', new NotLeaderError('reports'), { statusCode: 503, error: 'Service Unavailable', message: 'This instance is not the leader; retry later', reason: 'not-leader', retryAfterSeconds: 1 }],
    ['a lock lost meanwhile', new LockLostError('seat:7', 'session-expired'), { statusCode: 503, error: 'Service Unavailable', message: 'The lock was lost while the request was served; retry later', reason: 'lock-lost', retryAfterSeconds: 1 }],
    ['a reply over maxReplyBytes', new ReplyTooLargeError('getChildren', '/locks/x', 2_000_000, 1_048_575), { statusCode: 503, error: 'Service Unavailable', message: 'The lock service cannot read this lock now; retry later', reason: 'reply-too-large', retryAfterSeconds: 5 }],
  ])('%s', (_label, error, answer) => {
    expect(answerFor(error)).toEqual(answer);
  });

  it.each([
    ['a 5 000-character name', 'k'.repeat(5_000), `The request cannot name a lock: its path is ${basePath.length + 5_001} characters long (at most 1024)`],
    ['a lone surrogate', 'seat-\ud83c', 'The request cannot name a lock: its path contains a character ZooKeeper does not allow (U+D83C)'],
    ['an empty segment', 'a//b', 'The request cannot name a lock: its path contains an empty segment ("//")'],
    ['a ".." segment', 'a/../b', 'The request cannot name a lock: its path contains a ".." segment'],
    ['an empty name', ' ', 'The request cannot name a lock: the name is empty'],
  ])('a name the library cannot use (%s): 400 with reason invalid-lock-key, naming neither the name nor its path', (_label, name, message) => {
    const answer = answerFor(refusedName(name));
    expect(answer).toEqual({ statusCode: 400, error: 'Bad Request', message, reason: 'invalid-lock-key' });
    expect(JSON.stringify(answer)).not.toContain(basePath);
    if (name.length > 10) expect(JSON.stringify(answer)).not.toContain(name.slice(0, 10));
  });

  it('answerLockNames: the answers carry lockName, at most 64 characters of a refused one, and a 400 quotes it shortened', () => {
    expect(answerFor(busy, { lockNames: true })).toMatchObject({ reason: 'lock-timeout', lockName: 'seat:7' });
    expect(answerFor(new NotLeaderError('reports'), { lockNames: true })).toMatchObject({ lockName: 'reports' });
    const long = answerFor(refusedName('k'.repeat(5_000)), { lockNames: true })!;
    expect(long.lockName).toBe(`${'k'.repeat(64)}…`);
    expect(long.message).toMatch(/^The request cannot name a lock \("k{64}"… \(5000 characters\)\): the path is 5013 characters long/);
  });

  it.each([
    ['a plain Error', new Error('boom')],
    ['a DOMException TimeoutError of the application', new DOMException('timed out', 'TimeoutError')],
    ['a bad option (a bug)', new InvalidOptionError('waitMs', 'expected a number')],
    ['a misuse (a bug)', new LockUsageError('upgrade')],
    ['a ZkError that is neither about the session nor the credentials', new ZkError(ZkCode.BADVERSION, 'setData', '/x')],
  ])('no answer for %s: it passes through', (_label, error) => {
    expect(answerFor(error)).toBeUndefined();
  });
});

describe('ZkLockExceptionFilter outside HTTP', () => {
  const filter = new ZkLockExceptionFilter();

  it('rpc: an Observable that errors with the answer, never naming the lock', async () => {
    const result = filter.catch(unavailable, hostOf('rpc'));
    expect(isObservable(result)).toBe(true);
    const error = await firstValueFrom(result!).catch((e: unknown) => e);
    expect(error).toEqual({ status: 'error', statusCode: 503, error: 'Service Unavailable', message: 'The lock service is unavailable; retry later', reason: 'zookeeper-unavailable', retryAfterSeconds: 5 });
    expect(JSON.stringify(error)).not.toContain('seat');
  });

  it("ws: an `exception` event to the client, as Nest's WS filter sends", () => {
    const sent: unknown[] = [];
    filter.catch(busy, hostOf('ws', { emit: (event: string, payload: unknown) => sent.push([event, payload]) }));
    expect(sent).toEqual([['exception', { status: 'error', statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-timeout', retryAfterSeconds: 1 }]]);
  });

  it("rpc: a ZkError it does not answer is Nest's unknown error", async () => {
    const error = await firstValueFrom(filter.catch(new ZkError(ZkCode.BADVERSION, 'setData', '/x'), hostOf('rpc'))!).catch((e: unknown) => e);
    expect(error).toEqual({ status: 'error', message: 'Internal server error' });
  });

  it('other contexts (and HTTP without an HTTP adapter): the error unchanged', () => {
    expect(() => filter.catch(busy, hostOf('graphql'))).toThrow(busy);
    expect(() => filter.catch(busy, hostOf('http'))).toThrow(busy);
  });
});
