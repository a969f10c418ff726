import { afterEach, beforeEach, jest } from '@jest/globals';
import { RequestClock, reportLagMs } from '../../lib/core/session-bookkeeping.js';

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
  beforeEach(() => {
    jest.useFakeTimers({ now: 0 });
    clock = new RequestClock(() => LAG);
    clock.newLink();
  });
  afterEach(() => {
    jest.useRealTimers();
  });
  const advance = (ms: number) => jest.advanceTimersByTime(ms);
  const start = () => performance.now();

  it('an answered sync moves it to the newest request sent at least the report lag before that sync', () => {
    const t0 = start();
    const read = clock.sent(false);
    advance(100);
    const read2 = clock.sent(false);
    advance(250);
    const sync = clock.sent(true);
    advance(20);
    read(OK);
    read2(OK);
    expect(clock.lastAnsweredSentAt).toBe(t0); // reads answered: nothing
    sync(OK);
    // 350 ms after the first read, 250 ms after the second: only the first was surely reported.
    expect(clock.lastAnsweredSentAt).toBe(t0);
    advance(400);
    const sync2 = clock.sent(true);
    sync2(NO_NODE); // a server's answer counts, whatever its code
    expect(clock.lastAnsweredSentAt).toBe(t0 + 350); // the first sync itself
  });

  it('with no request of this link sent long enough before, an answer moves nothing', () => {
    const before = clock.lastAnsweredSentAt;
    advance(1000);
    const sync = clock.sent(true);
    advance(10);
    sync(OK);
    expect(clock.lastAnsweredSentAt).toBe(before);
  });

  it('requests of an earlier link do not count, nor does an answer made up by the client', () => {
    const before = clock.lastAnsweredSentAt;
    clock.sent(false);
    advance(500);
    clock.newLink();
    const sync = clock.sent(true);
    sync(OK);
    expect(clock.lastAnsweredSentAt).toBe(before);
    advance(500);
    const lost = clock.sent(true);
    lost(CONNECTION_LOSS);
    expect(clock.lastAnsweredSentAt).toBe(before);
  });

  it('keeps what an unanswered request still needs through a long burst', () => {
    const t0 = start();
    clock.sent(false);
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
