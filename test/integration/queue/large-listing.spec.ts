// A lock whose queue listing is larger than ZooKeeper's default jute.maxbuffer (1 MiB): the server
// sends it, and the client reads it with its default limit; with a smaller `maxReplyBytes` only the
// request it answers fails (ReplyTooLargeError), never the link, the session or a held lease.
import { LockNotAcquiredError, ReplyTooLargeError } from '../../../lib/core/errors.js';
import { inspectLock } from '../../../lib/core/inspect.js';
import type { ConnectionState, ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import type { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { closeAll, engine, uniquePath } from '../../support/helpers.js';
import { crowdQueue } from '../../support/crowd.js';

afterEach(closeAll);

/** 4 500 waiters with 250-byte names (`_c_<uuid>-` + 190 bytes + `-lock-<10 digits>`): a listing of about 1.12 MB. */
const WAITERS = 4_500;
const PADDING = 190;
const OLD_LIMIT = 0xfffff;

let crowd: Awaited<ReturnType<typeof crowdQueue>> | undefined;
afterEach(async () => {
  await crowd?.close();
  crowd = undefined;
});

/** Every state the connection goes through from now on. */
function states(connection: ZkConnection): ConnectionState[] {
  const seen: ConnectionState[] = [];
  connection.on('state', (state) => seen.push(state));
  return seen;
}

/** An unrelated lock, held on `e`'s session for the whole test. */
async function heldElsewhere(e: LockEngine) {
  return new Mutex(e, 'unrelated', uniquePath('unrelated'), { coalesce: false }).acquire();
}

async function rejection(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    (value) => Promise.reject(new Error(`expected a rejection, got ${String(value)}`)),
    (error: unknown) => error,
  );
}

describe('A queue listing over 1 MiB (real ZooKeeper)', () => {
  it('is read with the default limit, the link stable and an unrelated lease held', async () => {
    const path = uniquePath('large-listing');
    crowd = await crowdQueue(path, WAITERS, { padding: PADDING });
    const e = await engine();
    const held = await heldElsewhere(e);
    const seen = states(e.connection);
    const sessionId = e.connection.sessionId;

    const { children } = await e.connection.session!.getChildren(path);
    expect(children).toHaveLength(WAITERS);
    expect(children.reduce((bytes, name) => bytes + 4 + name.length, 0)).toBeGreaterThan(OLD_LIMIT);
    // A try-once acquire lists the queue, finds 4 500 waiters ahead and gives up with a timeout (not a connection failure).
    const error = await rejection(new Mutex(e, 'crowded', path, { coalesce: false }).acquire({ waitMs: 0 }));
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect((error as LockNotAcquiredError).reason).toBe('timeout');

    expect(seen).toEqual([]);
    expect(e.connection.state).toBe('connected');
    expect(e.connection.sessionId).toBe(sessionId);
    expect(held.signal.aborted).toBe(false);
    expect(held.isHeld).toBe(true);
    expect((await crowd.session.getChildren(path)).children).toHaveLength(WAITERS); // the try-once node is gone
    await held.release();
  });

  it('with a smaller maxReplyBytes fails only the listing (ReplyTooLargeError): the session goes on, acquire and inspect reject, no node is left', async () => {
    const path = uniquePath('listing-over-limit');
    crowd = await crowdQueue(path, WAITERS, { padding: PADDING });
    const e = await engine({ maxReplyBytes: OLD_LIMIT });
    const held = await heldElsewhere(e);
    const seen = states(e.connection);
    const session = e.connection.session!;

    const error = await rejection(session.getChildren(path));
    expect(error).toBeInstanceOf(ReplyTooLargeError);
    expect(error).toMatchObject({ operation: 'getChildren', path, maxReplyBytes: OLD_LIMIT });
    expect((error as ReplyTooLargeError).replyBytes).toBeGreaterThan(OLD_LIMIT);
    expect((error as Error).message).toMatch(/over the client's limit of 1048575 bytes: raise the connection option maxReplyBytes/);
    expect(e.connection.state).toBe('connected');
    // The next request on the same session is answered.
    expect(await session.exists(path)).toMatchObject({ numChildren: WAITERS });

    const acquiring = new Mutex(e, 'crowded', path, { coalesce: false }).acquire({ waitMs: 20_000 });
    expect(await rejection(acquiring)).toBeInstanceOf(ReplyTooLargeError);
    // The node the acquire made is deleted before it rejects: the queue is the crowd's alone.
    expect((await crowd.session.getChildren(path)).children).toHaveLength(WAITERS);
    expect(await rejection(inspectLock(e.connection, path))).toBeInstanceOf(ReplyTooLargeError);

    expect(seen).toEqual([]);
    expect(e.connection.session).toBe(session);
    expect(held.signal.aborted).toBe(false);
    expect(held.isHeld).toBe(true);
    await held.release();
  });
});
