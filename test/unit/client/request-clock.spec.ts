import { afterEach, beforeEach, jest } from '@jest/globals';
import { RequestClock, reportLagMs } from '../../../lib/core/client/session-bookkeeping.js';

const OK = 0;
const CONNECTION_LOSS = -4;
const NO_NODE = -101;

describe('reportLagMs', () => {
  it('allows half a tick and some room, the tick taken as at most half the session timeout', () => {
    expect(reportLagMs(2000, 15_000)).toBe(1100);
    expect(reportLagMs(250, 4000)).toBe(225);
    expect(reportLagMs(2000, 2000)).toBe(600); // a 2 s session: the tick is at most 1 s
  });
});

describe('RequestClock: when the leader last heard of us', () => {
  const LAG = 300;
  let clock: RequestClock;
  let before: number;
  beforeEach(() => {
    jest.useFakeTimers({ now: 0 });
    clock = new RequestClock(() => LAG);
    clock.newLink();
    before = clock.lastAnsweredSentAt;
  });
  afterEach(() => {
    jest.useRealTimers();
  });
  const advance = (ms: number) => jest.advanceTimersByTime(ms);
  const now = () => performance.now();

  it('an answered sync moves it to the newest request answered at least the report lag before that sync was sent', () => {
    const t0 = now();
    const read = clock.sent(false);
    advance(10);
    read(OK);
    expect(clock.lastAnsweredSentAt).toBe(before); // a read's answer moves nothing
    advance(200);
    const early = clock.sent(true);
    advance(10);
    early(OK); // sent 210 ms after the read was answered: not enough
    expect(clock.lastAnsweredSentAt).toBe(before);
    advance(200);
    const sync = clock.sent(true);
    advance(10);
    sync(NO_NODE); // any answer of the server's counts
    expect(clock.lastAnsweredSentAt).toBe(t0); // the read's send time
  });

  it('a request that waited on its way proves nothing until its answer is a report lag old', () => {
    const t0 = now();
    const held = clock.sent(false); // a stalled link: it reaches the server with the next one
    advance(1000);
    const sync = clock.sent(true);
    held(OK);
    advance(10);
    sync(OK);
    expect(clock.lastAnsweredSentAt).toBe(before);
    advance(LAG);
    const next = clock.sent(true);
    advance(10);
    next(OK);
    expect(clock.lastAnsweredSentAt).toBe(t0 + 1000); // the first sync's send time
  });

  it('two writes answered together (one multi) count from that answer', () => {
    const w1 = clock.sent(true);
    advance(1200);
    const w2 = clock.sent(true);
    advance(1800);
    w1(OK);
    w2(OK);
    expect(clock.lastAnsweredSentAt).toBe(before);
    advance(400);
    const sync = clock.sent(true);
    advance(10);
    sync(OK);
    expect(clock.lastAnsweredSentAt).toBe(1200);
  });

  it('answers of an earlier link, and answers the client made up, move nothing', () => {
    const old = clock.sent(false);
    advance(10);
    old(OK);
    advance(500);
    clock.newLink();
    const sync = clock.sent(true);
    sync(OK);
    expect(clock.lastAnsweredSentAt).toBe(before);
    const lost = clock.sent(false);
    lost(CONNECTION_LOSS);
    advance(500);
    const sync2 = clock.sent(true);
    sync2(OK);
    expect(clock.lastAnsweredSentAt).toBe(before + 510); // the first sync of this link, not the lost read
  });

  it('keeps what an unanswered request still needs through a long burst', () => {
    const t0 = now();
    clock.sent(false)(OK);
    advance(LAG);
    const slow = clock.sent(true);
    for (let i = 0; i < 5000; i++) {
      advance(1);
      clock.sent(false)(OK);
    }
    slow(OK);
    expect(clock.lastAnsweredSentAt).toBe(t0);
  });

  it('counts how long the oldest request has waited', () => {
    expect(clock.unansweredForMs()).toBe(0);
    const first = clock.sent(false);
    advance(40);
    clock.sent(false);
    advance(60);
    expect(clock.unansweredForMs()).toBe(100);
    first(OK);
    expect(clock.unansweredForMs()).toBe(60);
  });
});

describe('RequestClock: the deadline across handshakes', () => {
  beforeEach(() => {
    jest.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  it('counts a handshake from when its ConnectRequest went out, not from when its answer was read', () => {
    const clock = new RequestClock(() => 300);
    const sentAt = performance.now() + 100;
    jest.advanceTimersByTime(1600); // the answer is read 1.5 s after the request went out
    clock.negotiated(2000, sentAt);
    expect(clock.deadline(2000)).toBe(sentAt + 2000);
  });

  it('takes the shortest timeout any handshake negotiated, and never moves back', () => {
    const clock = new RequestClock(() => 300);
    clock.negotiated(8000, 100);
    expect(clock.deadline(8000)).toBe(8100);
    clock.negotiated(2000, 50); // a re-attach granted less; its request is no news
    expect(clock.deadline(2000)).toBe(2100);
    clock.negotiated(8000, 1000); // a later re-attach granted more again: a touch reported late from the 2 s link may still come
    expect(clock.deadline(8000)).toBe(3000);
  });

  it('without a send time (the C client), only the timeout counts', () => {
    const clock = new RequestClock(() => 300);
    const created = clock.lastAnsweredSentAt;
    jest.advanceTimersByTime(5000);
    clock.negotiated(4000);
    expect(clock.deadline(4000)).toBe(created + 4000);
  });
});
