// Grants right after the same session reconnects. While our link was down (reset, or silent) a
// foreign client deleted a node of ours and another process took the lock; the server tells us of
// the deletion only in its answer to the watches the client sends again on the new link. A grant
// made on what we knew before that answer (a kept retainMs node, a local handoff, the "predecessor
// gone, so we hold" shortcut) would be a grant on a deleted node while the other process holds,
// with a lower fencing token. Checked from our own view: when our acquire resolves, the other
// holder must have let go (release called) or lost its lease; a token granted after theirs is higher.
import type { Lease } from '../../../lib/core/leases/lease.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { childrenOf, closeAll, connect, engine, eventually, nextEvent, uniquePath } from '../../support/helpers.js';
import { delay, nodesOf, untilChildCount, untilWatching, within, withProxy } from '../../support/lock-test-helpers.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';

afterEach(closeAll);

/** Long enough that a cut of a few seconds (a silent one is noticed after 2/3 of it) keeps the session. */
const SESSION_TIMEOUT_MS = 8_000;
/** How long a silent cut lasts (the restore then drops the link). */
const SILENT_CUT_MS = 2_500;
/**
 * Rounds of the shortcut case, each on fresh paths: which of the two deletions the server reports
 * first after the reconnect depends on the order in which the client sends its watches again
 * (its table of them, by path), about even odds per round.
 */
const SHORTCUT_ROUNDS = 6;

type Cut = 'reset' | 'silent';
type Moment = 'in the reconnected handler' | 'a few ms after the reconnect';

/** The other process's hold, as our side sees it: `releasing` once it let go. */
interface OtherHolder {
  lease: Lease;
  signal: AbortSignal;
  releasing: boolean;
}

/** What our acquire came to, seen at the moment it resolved. */
interface Grant {
  lease?: Lease;
  error?: unknown;
  /** Set when it resolved while the other process held with a live signal. */
  overlap?: string;
  /** How long after our grant our own signal aborted, if it did. */
  abortedAfterMs?: number;
}

/** Watches `acquiring` and records, at the moment it resolves, whether `other` still held. */
function watchGrant(acquiring: Promise<Lease>, other: () => OtherHolder | undefined): Grant {
  const grant: Grant = {};
  acquiring.then(
    (lease) => {
      grant.lease = lease;
      const held = other();
      if (held && !held.releasing && !held.signal.aborted) {
        grant.overlap =
          `our acquire resolved on ${lease.path} (token ${lease.fencingToken}, signal aborted: ${lease.signal.aborted}) ` +
          `while the other process held ${held.lease.path} (token ${held.lease.fencingToken}) with a live signal`;
      }
      const at = performance.now();
      lease.signal.addEventListener('abort', () => (grant.abortedAfterMs = performance.now() - at), { once: true });
    },
    (error: unknown) => (grant.error = error),
  );
  return grant;
}

/** An engine whose link goes through `proxy`, with a session that outlives the cut. */
function proxied(proxy: TcpProxy): Promise<LockEngine> {
  return engine({ connectString: proxy.connectString, sessionTimeoutMs: SESSION_TIMEOUT_MS });
}

/**
 * Cuts `e`'s link (`reset`: connections dropped and refused, `e` notices at once; `silent`:
 * nothing passes, nothing closes, `e` notices nothing) and runs `meanwhile` while it is down.
 * Then restores the link, runs `act` in `e`'s `reconnected` handler (or ~2 ms after it), and
 * resolves once that handler ran.
 */
async function partition(proxy: TcpProxy, e: LockEngine, cut: Cut, meanwhile: () => Promise<void>, act: () => void, moment: Moment): Promise<void> {
  if (cut === 'reset') {
    const suspended = nextEvent(e.connection, 'suspended', 30_000);
    proxy.cut();
    await suspended;
    await meanwhile();
  } else {
    // The server sends its notifications into the void (as far as it knows they were delivered).
    // The cut lasts SILENT_CUT_MS, less than the client's own timeout (2/3 of the session's, which
    // leaves little room before the session counts as lost); the restore then drops the link.
    const started = performance.now();
    proxy.blackhole();
    await meanwhile();
    await delay(Math.max(0, SILENT_CUT_MS - (performance.now() - started)));
  }
  const reconnected = nextEvent(e.connection, 'reconnected', 30_000);
  e.connection.once('reconnected', () => {
    if (moment === 'in the reconnected handler') act();
    else setTimeout(act, 2);
  });
  proxy.restore();
  await reconnected;
}

/** Resolves once every reply to what `e` sent so far has come (a session answers in order). */
async function roundTrip(e: LockEngine): Promise<void> {
  await e.connection.session!.exists('/');
}

/**
 * After the reconnect: waits until our acquire settled or queued a node of ours (the deleted one
 * was the only one), then lets the other process go, and waits until our acquire settled. Our
 * acquire may also still wait without a node (that is safe): the first wait is a bound, not a check.
 */
async function settle(observer: ZkConnection, path: string, ours: LockEngine, acquiring: Promise<Lease>, other: OtherHolder): Promise<void> {
  let settled = false;
  acquiring.then(
    () => (settled = true),
    () => (settled = true),
  );
  const sessionHex = ours.connection.sessionId!;
  await eventually(async () => settled || (await nodesOf(observer, path, sessionHex)).length > 0, 15_000, 20).catch(() => undefined);
  other.releasing = true;
  await other.lease.release();
  await within(
    acquiring.then(
      () => undefined,
      () => undefined,
    ),
    30_000,
    'our acquire after the other process released',
  );
}

/** The checks every case ends with: no grant while the other held, tokens only grow (both shown on failure). */
async function expectNoOverlap(grant: Grant, other: OtherHolder): Promise<void> {
  const aborted = grant.abortedAfterMs === undefined ? 'not by the end' : `${grant.abortedAfterMs.toFixed(1)} ms after the grant`;
  const ours = grant.lease?.fencingToken;
  const theirs = other.lease.fencingToken;
  const tokens = ours === undefined ? 'not granted' : ours > theirs ? 'ours above theirs' : `ours ${ours} not above theirs ${theirs}`;
  expect({ overlap: grant.overlap && `${grant.overlap}; our signal aborted ${aborted}`, tokens }).toEqual({
    overlap: undefined,
    tokens: ours === undefined ? 'not granted' : 'ours above theirs',
  });
  await grant.lease?.release();
}

async function holdOther(e: LockEngine, path: string): Promise<OtherHolder> {
  const lease = await within(new Mutex(e, 'contended', path, { coalesce: false }).acquire({ waitMs: 20_000 }), 20_000, 'the other process acquires');
  return { lease, signal: lease.signal, releasing: false };
}

const CUTS: Cut[] = ['reset', 'silent'];
const MOMENTS: Moment[] = ['in the reconnected handler', 'a few ms after the reconnect'];

describe('a node of ours deleted while our link was down is never granted after the same session reconnects', () => {
  describe.each(CUTS)('%s cut', (cut) => {
    it.each(MOMENTS)('a kept (retainMs) node: an acquire %s does not hold while another process does', async (moment) => {
      await withProxy(async (proxy) => {
        const path = uniquePath('rg-kept');
        const observer = await connect();
        const a = await proxied(proxy);
        const b = await engine();
        const mine = new Mutex(a, 'contended', path, { retainMs: 60_000 });
        const first = await mine.acquire();
        await first.release(); // kept
        const again = await mine.acquire({ waitMs: 0 }); // handed over: the node's watches are set
        expect(again.path).toBe(first.path);
        await again.release(); // kept again
        const sessionHex = a.connection.sessionId!;
        await untilWatching(first.path, sessionHex);
        await roundTrip(a); // the queue's watch (its listing) was asked for with it: answered too
        expect(await childrenOf(observer, path)).toHaveLength(1);

        let other: OtherHolder | undefined;
        let acquiring: Promise<Lease> | undefined;
        let grant: Grant | undefined;
        await partition(
          proxy,
          a,
          cut,
          async () => {
            await observer.session!.delete(first.path);
            other = await holdOther(b, path);
          },
          () => {
            acquiring = mine.acquire({ waitMs: 30_000 });
            grant = watchGrant(acquiring, () => other);
          },
          moment,
        );
        await eventually(() => acquiring !== undefined, 5_000, 1);
        await settle(observer, path, a, acquiring!, other!);
        await expectNoOverlap(grant!, other!);
      });
    });

    it.each(MOMENTS)('a local handoff: a release to the queued local caller %s does not grant while another process holds', async (moment) => {
      await withProxy(async (proxy) => {
        const path = uniquePath('rg-handoff');
        const observer = await connect();
        const a = await proxied(proxy);
        const b = await engine();
        const mine = new Mutex(a, 'contended', path, { coalesce: true });
        const holder = await mine.acquire();
        const waiting = mine.acquire({ waitMs: 30_000 }); // queued locally: the node's watches are set for the handoff
        waiting.catch(() => undefined);
        const sessionHex = a.connection.sessionId!;
        await untilWatching(holder.path, sessionHex);
        await roundTrip(a); // the queue's watch (its listing) was asked for with it: answered too
        expect(await childrenOf(observer, path)).toHaveLength(1);

        let other: OtherHolder | undefined;
        const grant = watchGrant(waiting, () => other);
        await partition(
          proxy,
          a,
          cut,
          async () => {
            await observer.session!.delete(holder.path);
            other = await holdOther(b, path);
          },
          () => void holder.release().catch(() => undefined),
          moment,
        );
        await settle(observer, path, a, waiting, other!);
        await expectNoOverlap(grant, other!);
      });
    });

    it('a waiter right behind the head, its own node and the head deleted: it does not hold on its deleted node after the reconnect', async () => {
      for (let round = 0; round < SHORTCUT_ROUNDS; round++) {
        await withProxy(async (proxy) => {
          const path = uniquePath('rg-shortcut');
          const observer = await connect();
          const [h, b] = await Promise.all([engine(), engine()]);
          const a = await proxied(proxy);
          const head = await new Mutex(h, 'contended', path, { coalesce: false }).acquire();
          const acquiring = new Mutex(a, 'contended', path, { coalesce: false }).acquire({ waitMs: 30_000 });
          acquiring.catch(() => undefined);
          const children = await untilChildCount(observer, path, 2);
          const ourNode = `${path}/${children.find((c) => `${path}/${c}` !== head.path)!}`;
          const sessionHex = a.connection.sessionId!;
          // On the shortcut: our own node's deletion watched, and the head's.
          await untilWatching(ourNode, sessionHex);
          await untilWatching(head.path, sessionHex);
          await roundTrip(a);

          let other: OtherHolder | undefined;
          const grant = watchGrant(acquiring, () => other);
          await partition(
            proxy,
            a,
            cut,
            async () => {
              await observer.session!.delete(ourNode);
              await head.release();
              other = await holdOther(b, path);
            },
            () => undefined,
            'in the reconnected handler',
          );
          await settle(observer, path, a, acquiring, other!);
          await expectNoOverlap(grant, other!);
        });
      }
    });
  });

  describe.each(CUTS)('%s cut', (cut) => {
    it("a leader whose node was deleted meanwhile has ended its term by the time 'reconnected' is emitted", async () => {
      await withProxy(async (proxy) => {
        const path = uniquePath('rg-leader');
        const observer = await connect();
        const a = await proxied(proxy);
        const b = await engine();
        const leader = new Leadership(a, path, path, { participantId: 'a' }).start();
        const term = await within(leader.whenLeader(), 20_000, 'a leads');
        const follower = new Leadership(b, path, path, { participantId: 'b' });
        await untilWatching(term.path, a.connection.sessionId!);
        await roundTrip(a);

        let inHandler: { isLeader: boolean; aborted: boolean; followerLeads: boolean } | undefined;
        await partition(
          proxy,
          a,
          cut,
          async () => {
            await observer.session!.delete(term.path);
            follower.start();
            await within(follower.whenLeader(), 20_000, 'b leads');
          },
          () => (inHandler = { isLeader: leader.isLeader, aborted: term.signal.aborted, followerLeads: follower.isLeader }),
          'in the reconnected handler',
        );
        expect(inHandler).toEqual({ isLeader: false, aborted: true, followerLeads: true });
        expect(term.signal.reason).toMatchObject({ reason: 'node-deleted' });
        await Promise.all([leader.close(), follower.close()]);
      });
    });
  });

  describe.each(CUTS)('%s cut', (cut) => {
    it("a holder whose node watch was being set when the link dropped has lost its lease by the time 'reconnected' is emitted", async () => {
      await withProxy(async (proxy) => {
        const path = uniquePath('rg-arming');
        const observer = await connect();
        const a = await proxied(proxy);
        const b = await engine();
        const lease = await new Mutex(a, 'contended', path, { coalesce: false }).acquire();
        const signal = lease.signal; // sets the deletion watch: its request is on the wire now
        let other: OtherHolder | undefined;
        let atReconnected: { aborted: boolean; otherHolds: boolean } | undefined;
        await partition(
          proxy,
          a,
          cut,
          async () => {
            await observer.session!.delete(lease.path);
            other = await holdOther(b, path);
          },
          () => (atReconnected = { aborted: signal.aborted, otherHolds: !other!.signal.aborted }),
          'in the reconnected handler',
        );
        expect(atReconnected).toEqual({ aborted: true, otherHolds: true });
        expect(signal.reason).toMatchObject({ reason: 'node-deleted' });
        await other!.lease.release();
      });
    });
  });
});
