// MutexOptions.releaseInBackground: release() resolves once the delete of our node is sent, not
// when ZooKeeper confirmed it. Against the real ZooKeeper, with the test proxy holding back or
// losing our traffic: the release resolves before the delete is known to be applied (the default
// one does not), the delete is tried again after a dropped link, shutdown waits for it, this
// process's next acquire goes out behind it at no extra cost, and another process holds only once
// the delete is applied. The invariant checked throughout: never two holders, nothing left behind.
import { InvalidOptionError } from '../../../lib/core/errors.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex, type MutexOptions } from '../../../lib/core/recipes/mutex.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import type { ZkSession } from '../../../lib/core/client/session.js';
import { childrenOf, closeAll, connect, engine, eventually, exists, nextEvent, uniquePath } from '../../support/helpers.js';
import {
  countRequests,
  cycles,
  delay,
  lastingPath,
  nameOf,
  notAcquired,
  settledFlag,
  shortcutArmed,
  untilChildCount,
  within,
  withProxy,
} from '../../support/lock-test-helpers.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';

afterEach(closeAll);

/** The option under test (set it to {} to see which tests catch its absence). */
const BACKGROUND: MutexOptions = { releaseInBackground: true };
const DEFAULT: MutexOptions = {};

/** Deletes `session` has sent whose answer has not come yet (from now on). */
function deletesInFlight(session: ZkSession): () => number {
  let inFlight = 0;
  const original = session.delete.bind(session);
  session.delete = (...args) => {
    inFlight++;
    return original(...args).finally(() => inFlight--);
  };
  return () => inFlight;
}

/** `work`, its rejection handled: a test that failed before awaiting it does not fail the next one too. */
function quiet<T>(work: Promise<T>): Promise<T> {
  work.catch(() => undefined);
  return work;
}

/** A shared holder count across engines: `max` above 1 means two held at once. */
function holderCount() {
  const count = { now: 0, max: 0, tokens: [] as bigint[] };
  return {
    count,
    held<T extends Lease>(lease: T): T {
      count.now++;
      count.max = Math.max(count.max, count.now);
      count.tokens.push(lease.fencingToken);
      return lease;
    },
    /** Called before release(): after it, another process may hold as soon as the delete is applied. */
    letGo(lease: Lease): Promise<void> {
      count.now--;
      return lease.release();
    },
  };
}

function expectRising(tokens: bigint[]): void {
  for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
}

/** An engine behind `proxy`; a session timeout long enough that holding traffic for a while costs nothing. */
function proxiedEngine(proxy: TcpProxy): Promise<LockEngine> {
  return engine({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 });
}

/** Until `observer` (another session) no longer sees `path`. */
const gone = (observer: ZkConnection, path: string) => eventually(async () => !(await exists(observer, path)), 20_000, 20);

describe('release() resolves once the delete is sent', () => {
  // Broken if release() waited for the delete's answer (fails: not settled within 5 s), or if the
  // delete were not retried after the link dropped (the node would stay until the session ends).
  it('our delete kept from the server (silent link): the background release resolves while another client still sees the node, which goes once the link is back; the default release waits for that', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rib-silent');
      const observer = await connect();
      const e = await proxiedEngine(proxy);
      for (const [options, background] of [[BACKGROUND, true], [DEFAULT, false]] as const) {
        const lease = await new Mutex(e, 'silent', path, options).acquire();
        proxy.blackhole();
        const released = lease.release();
        const settled = settledFlag(released);
        if (background) await within(released, 5000, 'background release on a silent link');
        expect(await exists(observer, lease.path)).toBe(true); // the delete has not reached the server
        if (!background) {
          await delay(300);
          expect(settled()).toBe(false);
        }
        const reconnected = nextEvent(e.connection, 'reconnected');
        proxy.restore(); // the delete is lost with the connection, and sent again on the next one
        await reconnected;
        if (background) {
          await gone(observer, lease.path);
        } else {
          await within(released, 20_000, 'default release after the reconnect');
          expect(await exists(observer, lease.path)).toBe(false); // resolved only with the node gone
        }
        await within(e.drain(), 20_000, 'the delete');
      }
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });

  // Broken if release() waited for the answer: the background release would not settle while it is held.
  it("only the delete's answer held back: the background release resolves before the answer comes (the server applied the delete); the default release only after", async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rib-answer');
      const observer = await connect();
      const e = await proxiedEngine(proxy);
      for (const [options, background] of [[BACKGROUND, true], [DEFAULT, false]] as const) {
        const lease = await new Mutex(e, 'answer', path, options).acquire();
        proxy.slowReplies(0); // requests pass, answers wait in the proxy
        const released = lease.release();
        const settled = settledFlag(released);
        if (background) await within(released, 5000, 'background release with its answer held');
        await gone(observer, lease.path);
        const drained = settledFlag(e.drain());
        await delay(300);
        expect(drained()).toBe(false); // the answer is still in the proxy
        expect(settled()).toBe(background);
        proxy.forward();
        await within(released, 10_000, 'release once the answer came');
        await within(e.drain(), 10_000, 'the delete confirmed');
      }
    });
  });
});

describe("this process's next acquire after a background release", () => {
  // Broken if the next acquire waited on (watched) our old node, or listed because the shortcut
  // was not confirmed behind an unconfirmed delete: more requests than the default.
  for (const coalesce of [true, false]) {
    it(`holds at once and costs what the default costs: a create and a delete per cycle once warmed (coalesce: ${coalesce})`, async () => {
      const perCycles = async (options: MutexOptions) => {
        const path = await lastingPath('rib-cost');
        const e = await engine();
        const lock = new Mutex(e, 'cost', path, { ...options, coalesce });
        await cycles(lock, 3);
        await e.drain();
        expect(shortcutArmed(e, path)).toBeDefined();
        const counts = countRequests(e.connection.session!);
        const leases = await cycles(lock, 20);
        await e.drain();
        expectRising(leases.map((l) => l.fencingToken));
        return counts;
      };
      const background = await perCycles(BACKGROUND);
      const standard = await perCycles(DEFAULT);
      expect(standard).toEqual({ create: 20, delete: 20 });
      expect(background).toEqual(standard);
    });
  }

  // Broken if the release waited for the answer (not settled within 5 s), or if the next acquire
  // did not go out until the delete was confirmed, or listed / watched the old node.
  it('with the answer to our delete held, the next acquire goes out behind the delete and holds on one create (no listing, no watch)', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rib-behind');
      const observer = await connect();
      const e = await proxiedEngine(proxy);
      const lock = new Mutex(e, 'behind', path, BACKGROUND);
      await cycles(lock, 3);
      await e.drain();
      const lease = await lock.acquire();
      const counts = countRequests(e.connection.session!);
      proxy.slowReplies(0);
      await within(lease.release(), 5000, 'background release with its answer held');
      const next = quiet(lock.acquire({ waitMs: 20_000 }));
      // Both applied, in order: the old node gone, the new one alone.
      await eventually(async () => {
        const children = await childrenOf(observer, path);
        return children.length === 1 && children[0] !== nameOf(lease);
      }, 10_000, 20);
      proxy.forward();
      const held = await within(next, 10_000, 'the next acquire');
      expect(counts).toEqual({ delete: 1, create: 1 });
      expect(await childrenOf(observer, path)).toEqual([nameOf(held)]);
      expect(held.fencingToken > lease.fencingToken).toBe(true);
      await held.release();
      await e.drain();
      expect(await childrenOf(observer, path)).toEqual([]);
    });
  });
});

describe('other processes', () => {
  // Broken if another holder could start before our delete is applied (two holders), if a release
  // never deleted (the others starve: timeout), or if the option were silently ignored (no release
  // resolves with its delete still in flight).
  it('three engines taking turns, two with the option (coalescing and not), one without: never two holders, tokens rise in hold order, nothing left behind', async () => {
    const path = await lastingPath('rib-turns');
    const setups: MutexOptions[] = [BACKGROUND, { ...BACKGROUND, coalesce: false }, DEFAULT];
    const engines = await Promise.all(setups.map(() => engine()));
    const locks = setups.map((options, i) => new Mutex(engines[i]!, 'turns', path, options));
    const inFlight = engines.map((e) => deletesInFlight(e.connection.session!));
    const releasedEarly = setups.map(() => 0);
    const holders = holderCount();
    const worker = async (i: number) => {
      for (let n = 0; n < 12; n++) {
        const lease = holders.held(await locks[i]!.acquire({ waitMs: 30_000 }));
        const signal = lease.signal;
        await delay(Math.random() * 3);
        expect(signal.aborted).toBe(false);
        await holders.letGo(lease);
        if (inFlight[i]!() > 0) releasedEarly[i]!++;
      }
    };
    await Promise.all([0, 0, 1, 1, 2, 2].map(worker));
    expect(holders.count.max).toBe(1);
    expect(holders.count.tokens).toHaveLength(72);
    expectRising(holders.count.tokens);
    expect(releasedEarly[0]! + releasedEarly[1]!).toBeGreaterThan(0); // the option was in play
    await Promise.all(engines.map((e) => e.drain()));
    expect(await childrenOf(await connect(), path)).toEqual([]);
  }, 90_000);

  // Broken if the delete were not retried on the new connection (the contender waits for the
  // session's end: timeout, and the node stays), or if anyone held before it was applied.
  for (const fault of ['request', 'answer'] as const) {
    for (const coalesce of [true, false]) {
      const what = fault === 'request' ? 'never reached the server' : 'was applied, its answer lost';
      it(`the link drops right after a background release whose delete ${what} (coalesce: ${coalesce}): the delete is sent again after the reconnect, a waiting contender holds, then our next acquire; never two holders, no node left`, async () => {
        await withProxy(async (proxy) => {
          const path = await lastingPath('rib-drop');
          const observer = await connect();
          const e = await proxiedEngine(proxy);
          const other = await engine();
          const lock = new Mutex(e, 'drop', path, { ...BACKGROUND, coalesce });
          const holders = holderCount();
          const ours = holders.held(await lock.acquire());
          const theirs = quiet(new Mutex(other, 'drop', path).acquire({ waitMs: 30_000 }).then(holders.held));
          await untilChildCount(observer, path, 2);
          const counts = countRequests(e.connection.session!);
          if (fault === 'request') proxy.blackhole();
          else proxy.dropReplies();
          await within(holders.letGo(ours), 5000, 'background release');
          const again = quiet(lock.acquire({ waitMs: 30_000 }).then(holders.held)); // goes out behind the delete, lost too
          if (fault === 'request') expect(await exists(observer, ours.path)).toBe(true);
          else await gone(observer, ours.path);
          const reconnected = nextEvent(e.connection, 'reconnected');
          proxy.restore();
          await reconnected;
          const next = await within(theirs, 20_000, 'the contender');
          expect(await exists(observer, ours.path)).toBe(false);
          await within(e.drain(), 20_000, 'our delete');
          expect(counts.delete).toBeGreaterThanOrEqual(2); // the lost one, and again on the new connection
          await holders.letGo(next);
          const mine = await within(again, 20_000, 'our next acquire');
          expect(await childrenOf(observer, path)).toEqual([nameOf(mine)]);
          await holders.letGo(mine);
          await within(Promise.all([e.drain(), other.drain()]), 20_000, 'the last deletes');
          expect(await childrenOf(observer, path)).toEqual([]);
          expect(holders.count.max).toBe(1);
          expectRising(holders.count.tokens);
        });
      });
    }
  }

  // Whether the delete got through before the link went is up to timing: either way it goes, the
  // contender holds, and nothing stays. Broken as above.
  it('the link dropped as soon as a background release resolves, several times: the node goes, the contender holds, never two holders', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rib-cut');
      const observer = await connect();
      const e = await proxiedEngine(proxy);
      const other = await engine();
      const holders = holderCount();
      for (let round = 0; round < 4; round++) {
        const lock = new Mutex(e, 'cut', path, { ...BACKGROUND, coalesce: round % 2 === 0 });
        const ours = holders.held(await lock.acquire());
        const theirs = quiet(new Mutex(other, 'cut', path).acquire({ waitMs: 30_000 }).then(holders.held));
        await untilChildCount(observer, path, 2);
        const reconnected = nextEvent(e.connection, 'reconnected');
        await within(holders.letGo(ours), 5000, 'background release');
        proxy.restore(); // drops the connection
        await reconnected;
        const next = await within(theirs, 20_000, 'the contender');
        expect(await exists(observer, ours.path)).toBe(false);
        await holders.letGo(next);
        await within(Promise.all([e.drain(), other.drain()]), 20_000, 'the deletes');
        expect(await childrenOf(observer, path)).toEqual([]);
      }
      expect(holders.count.max).toBe(1);
    });
  });

  // Broken if a try-once of another process could hold while our node is still there (two
  // holders by ZooKeeper's order), or if the release waited for the delete (not settled in 5 s).
  it('a try-once of another process while our background delete has not reached the server is refused (timeout); once the delete is applied it holds', async () => {
    await withProxy(async (proxy) => {
      const path = await lastingPath('rib-try');
      const observer = await connect();
      const e = await proxiedEngine(proxy);
      const theirs = new Mutex(await engine(), 'try', path);
      const lease = await new Mutex(e, 'try', path, BACKGROUND).acquire();
      proxy.blackhole();
      await within(lease.release(), 5000, 'background release on a silent link');
      expect(await theirs.tryAcquire()).toBeNull();
      expect((await notAcquired(theirs.acquire({ waitMs: 0 }))).reason).toBe('timeout');
      expect(await untilChildCount(observer, path, 1)).toEqual([nameOf(lease)]); // their tries left nothing
      proxy.restore();
      await gone(observer, lease.path);
      const held = await theirs.tryAcquire();
      expect(held).not.toBeNull();
      expect(await childrenOf(observer, path)).toEqual([nameOf(held!)]);
      await held!.release();
      await e.drain();
    });
  });

  // Whatever the race between our delete, our own next try and theirs: at most one holds. Broken
  // if the delete's outcome were taken for granted (e.g. another process let in before it applied).
  for (const coalesce of [true, false]) {
    it(`try-onces of another process and of our own right after a background release (coalesce: ${coalesce}): refused or held, never both; once our delete is confirmed theirs holds`, async () => {
      const path = await lastingPath('rib-race');
      const [e, f] = await Promise.all([engine(), engine()]);
      const ours = new Mutex(e, 'race', path, { ...BACKGROUND, coalesce });
      const theirs = new Mutex(f, 'race', path, { coalesce });
      for (let round = 0; round < 15; round++) {
        await (await ours.acquire()).release();
        const [a, b] = await Promise.all([ours.tryAcquire(), theirs.tryAcquire()]);
        expect(a !== null && b !== null).toBe(false);
        await a?.release();
        await b?.release();
        await Promise.all([e.drain(), f.drain()]);
        const after = await theirs.tryAcquire();
        expect(after).not.toBeNull();
        await after!.release();
        await f.drain();
      }
      expect(await childrenOf(await connect(), path)).toEqual([]);
    });
  }
});

describe('shutdown', () => {
  // Broken if shutdown did not wait for the background delete: it would resolve with the link
  // still silent and the node still there.
  for (const coalesce of [true, false]) {
    it(`right after a background release (coalesce: ${coalesce}): shutdown resolves only once the node is deleted, as a separate session sees it before the connection closes`, async () => {
      await withProxy(async (proxy) => {
        const path = await lastingPath('rib-shutdown');
        const observer = await connect();
        const e = await proxiedEngine(proxy);
        const lease = await new Mutex(e, 'down', path, { ...BACKGROUND, coalesce }).acquire();
        proxy.blackhole();
        await within(lease.release(), 5000, 'background release on a silent link');
        const shutdown = quiet(e.shutdown());
        const done = settledFlag(shutdown);
        expect(await exists(observer, lease.path)).toBe(true);
        await delay(300);
        expect(done()).toBe(false); // waiting for our delete
        proxy.restore();
        await within(shutdown, 20_000, 'shutdown');
        expect(await exists(observer, lease.path)).toBe(false);
        expect(e.connection.state).toBe('connected'); // shutdown leaves the connection to its owner
      });
    });
  }
});

describe('option checks', () => {
  // Broken if the option were not among the checked booleans: any truthy value would turn it on.
  it('a releaseInBackground that is not a boolean is refused at construction with InvalidOptionError naming it', async () => {
    const e = await engine();
    const path = uniquePath('rib-bad');
    for (const bad of ['yes', 1, null, {}]) {
      let error: unknown;
      try {
        new Mutex(e, 'bad', path, { releaseInBackground: bad as never });
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ option: 'releaseInBackground' });
    }
    for (const good of [true, false, undefined]) expect(() => new Mutex(e, 'good', path, { releaseInBackground: good })).not.toThrow();
  });
});
