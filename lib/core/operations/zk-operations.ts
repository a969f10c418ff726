import { ancestorsOf, joinPath } from '../paths.js';
import type { ZkConnection } from '../connection/zk-connection.js';
import { isZkCode, ZkCode, ZkError } from '../client/zk-error.js';
import { CreateMode, type WatchListener, type ZkAcl, type ZkSession, type ZkStat } from '../client/session.js';
import { LockPaths } from './container-paths.js';
import { isLockRootOrAbove } from './lock-root.js';
import { SequenceShortcut } from './sequence-shortcut.js';

const EMPTY = Buffer.alloc(0);
/** Our lock nodes' creates and deletes may share a multi request (see WriteBatcher). */
const BATCHABLE = { batchable: true };

/** A queue's children as one listing saw them, with the parent's czxid (for fencing tokens). */
export interface Listing {
  children: string[];
  parentCzxid: number;
}

/** A node made by `createProtected`, with the listing pipelined behind its create (if it came). */
export interface Created {
  path: string;
  listing: Listing | undefined;
}

/**
 * The ZooKeeper operations the recipes ask for, in one place (Curator's framework/recipe split):
 * create protected (with its lost-reply recovery and a pipelined listing), list, delete guaranteed,
 * delete by prefix, container parents, and waiting until a session is usable again. Recipes
 * decide what to do with nodes; this decides how ZooKeeper is asked, and asked again.
 * Every retry stays on the session it started on: another session cannot own our ephemeral nodes.
 */
export class ZkOperations {
  constructor(
    private readonly connection: ZkConnection,
    options: {
      /**
       * ACL of every node we create, parents and lock nodes alike (given with the create, so no
       * node of ours is ever open; never applied to an existing node). Default: open.
       */
      acl?: readonly ZkAcl[];
      /** The lock root: with an ACL, it and its ancestors are made PERSISTENT (see lock-root.ts). */
      basePath?: string;
      maxIdleLockPaths?: number;
    } = {},
  ) {
    this.acl = options.acl?.length ? options.acl : undefined;
    this.basePath = options.basePath;
    this.paths = new LockPaths(connection, options.maxIdleLockPaths);
    this.shortcut = new SequenceShortcut((path) => this.paths.gone(path));
    // The shortcut's records prove nothing past a disconnection (see SequenceShortcut): dropped at
    // once, before anyone hears of it (this listener comes before the engine's).
    this.detach = connection.listen({
      state: (state) => {
        if (state !== 'connected') this.shortcut.forgetAll(connection.session);
      },
    });
  }

  private readonly detach: () => void;

  /**
   * The engine shut down (its connection may live on): no timer, record or listener of it stays
   * behind. The session keeps the shortcut's path watches until they fire (the C client cannot
   * drop one; they are counted in the session's budget, see SequenceShortcut).
   */
  stop(): void {
    this.detach();
    this.paths.stop();
    this.shortcut.stop();
  }

  private readonly acl: readonly ZkAcl[] | undefined;
  private readonly basePath: string | undefined;
  /** The lock paths we used: which exist (a hint), and which to delete once idle. */
  readonly paths: LockPaths;
  /** Holding without a listing where we were last alone (see SequenceShortcut). */
  readonly shortcut: SequenceShortcut;

  /**
   * Resolves true once `session` is connected again, false when it is gone (lost or closed). Used
   * to retry an operation whose reply was lost, on the same session only.
   */
  sessionUsable(session: ZkSession): Promise<boolean> {
    const connection = this.connection;
    const check = (): boolean | undefined => {
      if (connection.session !== session || session.isClosed || connection.state === 'closed') return false;
      // Connected as far as the connection knows while the link under it is down (its watchdog
      // will say so): a request now fails at once, so a retry waits for the state to move.
      if (connection.state === 'connected' && session.isConnectedNatively) return true;
      return undefined;
    };
    const now = check();
    if (now !== undefined) return Promise.resolve(now);
    return new Promise((resolve) => {
      const onState = () => {
        const result = check();
        if (result === undefined) return;
        connection.off('state', onState);
        resolve(result);
      };
      connection.on('state', onState);
    });
  }

  /**
   * Creates every missing ancestor of `path` and `path` itself, in one round trip: as CONTAINER
   * nodes, except the lock root and its ancestors when an ACL guards them (PERSISTENT).
   */
  async ensureContainers(session: ZkSession, path: string): Promise<void> {
    // ZooKeeper answers a session's requests in order, so all creates go out at once; an ancestor
    // being made for another lock (a burst of new keys under a new parent) is not asked for again.
    const ancestors = ancestorsOf(path).map((a) => this.ancestorMade(session, a));
    const results = await Promise.allSettled([...ancestors, this.makeLockPath(session, path)]);
    for (const result of results) {
      if (result.status === 'rejected' && !isZkCode(result.reason, ZkCode.NODEEXISTS)) throw result.reason;
    }
  }

  /** Creates the lock path `path` as a container; when this create made it, it is ours to delete once idle. */
  private makeLockPath(session: ZkSession, path: string): Promise<unknown> {
    if (this.isGuardedRoot(path)) return this.ancestorMade(session, path); // a lock named as the root itself: never ours to delete
    return session.create(path, EMPTY, CreateMode.CONTAINER, this.acl).then(() => this.paths.made(path));
  }

  /** The lock root or above it, under an ACL: made PERSISTENT, so that no reaper hands it to other credentials. */
  private isGuardedRoot(path: string): boolean {
    return this.acl !== undefined && this.basePath !== undefined && isLockRootOrAbove(path, this.basePath);
  }

  /** Ancestor creates in flight, per session and path. */
  private readonly ancestorsInFlight = new Map<string, Promise<unknown>>();

  private ancestorMade(session: ZkSession, path: string): Promise<unknown> {
    const key = `${session.id}\u0000${path}`;
    let made = this.ancestorsInFlight.get(key);
    if (!made) {
      made = session
        .create(path, EMPTY, this.isGuardedRoot(path) ? CreateMode.PERSISTENT : CreateMode.CONTAINER, this.acl)
        .then(
          () => this.paths.exists(path),
          (error: unknown) => (isZkCode(error, ZkCode.NODEEXISTS) ? this.paths.exists(path) : Promise.reject(error)),
        )
        .finally(() => this.ancestorsInFlight.delete(key));
      made.catch(() => undefined);
      this.ancestorsInFlight.set(key, made);
    }
    return made;
  }

  /**
   * Creates `parentPath/prefix+name` (ephemeral; sequential unless `sequential` is false) and, in
   * the same round trip, lists the parent (unless `list` is false: the caller expects not to need
   * it; a create that had to be tried again lists anyway). Missing parents are made as containers
   * (the lock root under an ACL: persistent). A lost reply is recovered by finding the prefix after
   * reconnecting to the same session. Resolves undefined when the session is gone (nothing of ours
   * can survive then).
   */
  async createProtected(
    session: ZkSession,
    node: { parentPath: string; prefix: string; name: string; data: Buffer; sequential: boolean; list?: boolean },
  ): Promise<Created | undefined> {
    const { parentPath, prefix } = node;
    const target = joinPath(parentPath, prefix + node.name);
    const mode = node.sequential ? CreateMode.EPHEMERAL_SEQUENTIAL : CreateMode.EPHEMERAL;
    let madeParents = false;
    let maybeCreated = false;
    let list = node.list !== false;
    for (;;) {
      try {
        if (maybeCreated) {
          // The previous create's reply was lost: it may have happened.
          const { children, stat } = await session.getChildren(parentPath);
          const ours = children.find((c) => c.startsWith(prefix));
          if (ours) {
            // A create that restricts after the fact (unpatched addon) may have lost that step.
            if (this.acl) await session.setAcl(joinPath(parentPath, ours), this.acl);
            return { path: joinPath(parentPath, ours), listing: { children, parentCzxid: stat.czxid } };
          }
        }
        if (!madeParents && !this.paths.has(parentPath)) {
          // A path we do not know may not exist (a new key, or reaped): make it in the same round
          // trip, with the ancestors we do not know either. Their outcome does not matter: the
          // node's create says whether the path is there.
          for (const ancestor of ancestorsOf(parentPath)) if (!this.paths.has(ancestor)) void this.ancestorMade(session, ancestor);
          this.makeLockPath(session, parentPath).catch(() => undefined);
        }
        const create = session.create(target, node.data, mode, this.acl, BATCHABLE);
        const listing = list ? session.getChildren(parentPath) : undefined;
        listing?.catch(() => undefined);
        const path = await create;
        this.paths.exists(parentPath);
        if (!listing) return { path, listing: undefined }; // no `await undefined`: a turn of the microtask queue less
        const listed = await listing.then(
          ({ children, stat }) => ({ children, parentCzxid: stat.czxid }),
          () => undefined,
        );
        return { path, listing: listed };
      } catch (error) {
        list = true;
        if (isZkCode(error, ZkCode.NOT_APPLIED)) continue; // not made: its batch failed on another write
        if (isZkCode(error, ZkCode.NONODE) && !madeParents && this.paths.has(parentPath)) {
          // A path we knew is gone: ZooKeeper's reaper removes every empty container at its check
          // (a hot key's too, between two uses). The next round trip makes it again with the node,
          // as for a new key, without asking for its ancestors (known, so most likely there).
          this.paths.gone(parentPath);
          continue;
        }
        if (isZkCode(error, ZkCode.NONODE)) this.paths.gone(parentPath);
        if (isZkCode(error, ZkCode.NONODE) && !madeParents) {
          // The parent is missing (never made, or reaped as an empty container): make it, once per
          // failure; a reap between here and the create just loops again.
          const made = await this.ensureContainers(session, parentPath).then(
            () => true,
            (failure: unknown) => failure,
          );
          if (made !== true) {
            // Our node was not made (its create failed): a lost link is waited out like any other.
            if (made instanceof ZkError && made.isConnectionError) {
              if (await this.sessionUsable(session)) continue;
              return undefined;
            }
            if (made instanceof ZkError && made.isSessionGone) return undefined;
            throw made;
          }
          madeParents = true;
          continue;
        }
        if (isZkCode(error, ZkCode.NONODE)) {
          madeParents = false;
          continue;
        }
        if (error instanceof ZkError && error.isConnectionError) {
          maybeCreated = true;
          if (await this.sessionUsable(session)) continue;
          return undefined;
        }
        if (error instanceof ZkError && error.isSessionGone) return undefined;
        throw error;
      }
    }
  }

  /**
   * Sets a watch on `path` (its data changing, its deletion): the node a waiter waits behind.
   * Rejects with NONODE when it is gone already (no watch is left then), and with a connection or
   * session error as the request does; the caller decides (once, no retry here). The session's
   * promise itself, so that waiting on it costs no extra turn.
   */
  watchNode(session: ZkSession, path: string, listener: WatchListener): Promise<{ data: Buffer; stat: ZkStat }> {
    return session.getData(path, listener);
  }

  /** Lists `parentPath` with a watch on its children (a semaphore's leases); errors as watchNode. */
  watchChildren(session: ZkSession, parentPath: string, listener: WatchListener): Promise<{ children: string[]; stat: ZkStat }> {
    return session.getChildren(parentPath, listener);
  }

  /** Forgets a waiter's watch listener (it stopped waiting); the watch left on the server fires to nobody. */
  unwatch(session: ZkSession, path: string, listener: WatchListener): void {
    session.unwatch(path, listener);
  }

  /** The children of `parentPath` (none if it is missing); undefined when the session is gone. */
  async list(session: ZkSession, parentPath: string): Promise<Listing | undefined> {
    for (;;) {
      try {
        const { children, stat } = await session.getChildren(parentPath);
        return { children, parentCzxid: stat.czxid };
      } catch (error) {
        if (!(error instanceof ZkError)) throw error;
        if (error.code === ZkCode.NONODE) return { children: [], parentCzxid: 0 };
        if (error.isConnectionError && (await this.sessionUsable(session))) continue;
        if (error.isConnectionError || error.isSessionGone) return undefined;
        throw error;
      }
    }
  }

  /**
   * Deletes a node of ours, retrying through disconnections until it is gone or its session is
   * (an ephemeral node dies with its session). NONODE counts as done.
   */
  async deleteGuaranteed(session: ZkSession, path: string): Promise<void> {
    for (;;) {
      if (session.isClosed || this.connection.session !== session) return;
      try {
        await session.delete(path, -1, BATCHABLE);
        return;
      } catch (error) {
        if (isZkCode(error, ZkCode.NONODE)) return;
        if (isZkCode(error, ZkCode.NOT_APPLIED)) continue; // not applied: its batch failed on another write
        if (!(error instanceof ZkError) || !error.isConnectionError) {
          if (error instanceof ZkError && error.isSessionGone) return;
          throw error;
        }
      }
      await this.sessionUsable(session);
    }
  }

  /** Deletes the node whose name starts with `prefix` under `parent`, if it exists (lost create reply). */
  async deleteByPrefix(session: ZkSession, parent: string, prefix: string): Promise<void> {
    for (;;) {
      if (session.isClosed || this.connection.session !== session) return;
      try {
        const { children } = await session.getChildren(parent);
        const ours = children.find((c) => c.startsWith(prefix));
        if (ours) await this.deleteGuaranteed(session, `${parent}/${ours}`);
        return;
      } catch (error) {
        if (isZkCode(error, ZkCode.NONODE)) return;
        if (!(error instanceof ZkError) || !error.isConnectionError) return;
      }
      await this.sessionUsable(session);
    }
  }
}
