import { Inject, Injectable, Optional, type OnApplicationShutdown } from '@nestjs/common';
import { LockEngine, validateEngineOptions, type LockEngineOptions } from '../core/lock-engine.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import { LockService } from '../nest/lock.service.js';
import { InMemoryLink, InMemoryZkSession, InMemoryZooKeeper } from './in-memory-zookeeper.js';
import { LEASE_NODE, MUTEX_NODE, READ_NODE, WRITE_NODE } from '../core/recipes/node-names.js';

/** Injection token of the testing service's options (`ZkLockTestingModule.forRoot(options)`). */
export const FAKE_LOCK_OPTIONS = Symbol.for('nestjs-zk-lock:fake-lock-options');

/** @publicApi */
export interface FakeLockServiceOptions extends LockEngineOptions {
  /**
   * The in-memory ZooKeeper the locks live in. Give several services the same store to play
   * several instances of an application contending for the same locks (each service is one
   * "process" with its own session). Default: its own.
   */
  store?: FakeLockStore;
  /** The session timeout asked of the in-memory server (1 to 60 s). Default 15000. */
  sessionTimeoutMs?: number;
  /** As for `ZkLockModule`, but default 0: on close, held leases end at once (reason `shutdown`). */
  shutdownGraceMs?: number;
}

/** Node names of lock contenders in Curator's layouts (mutex, read-write halves, semaphore leases). */
const CONTENDER = new RegExp(`(?:${MUTEX_NODE}|${READ_NODE}|${WRITE_NODE}|${LEASE_NODE})\\d{10}$`);

/**
 * An in-memory ZooKeeper for tests (`InMemoryZooKeeper`), shared by the services that play the
 * instances of an application.
 * @publicApi
 */
export class FakeLockStore extends InMemoryZooKeeper {
  /** True when some session holds (or queues for) the lock at `path`: a contender node is there. */
  isLocked(path: string): boolean {
    const contenders = (parent: string) => (this.children(parent) ?? []).some((name) => CONTENDER.test(name));
    return contenders(path) || contenders(`${path}/leases`);
  }
}

/**
 * The real `LockService` — the same recipes, `@WithLock` and inspection as in production — over an
 * in-memory ZooKeeper instead of a server: no ZooKeeper and no native addon needed. Each service
 * has its own session; services on one `store` contend like application instances, and a test
 * can expire a service's session or cut it off and watch the others take over.
 * @publicApi
 */
@Injectable()
export class FakeLockService extends LockService implements OnApplicationShutdown {
  readonly store: FakeLockStore;
  private readonly lockEngine: LockEngine;
  /** This "instance"'s network path to the store, which `disconnect()` cuts. */
  private readonly link: InMemoryLink;

  constructor(@Optional() @Inject(FAKE_LOCK_OPTIONS) options?: FakeLockServiceOptions) {
    // No grace time by default: a test that closes its app while holding a lock is not kept waiting.
    const { store = new FakeLockStore(), sessionTimeoutMs, shutdownGraceMs = 0, ...rest } = options ?? {};
    const engineOptions = { ...rest, shutdownGraceMs };
    validateEngineOptions(engineOptions); // before a session is opened for nothing
    const link = new InMemoryLink();
    const connection = new ZkConnection({ connectString: 'in-memory:2181', sessionTimeoutMs }, store.sessionFactory(link));
    connection.connectInBackground();
    // Connected before the constructor returns: a test may take a lock at once.
    (connection.session as InMemoryZkSession).connectNow();
    const engine = new LockEngine(connection, engineOptions);
    super(engine, connection);
    this.store = store;
    this.lockEngine = engine;
    this.link = link;
  }

  /** This service's session id (hex), as on its leases. */
  get sessionId(): string {
    return this.connection.sessionId ?? '0';
  }

  /** True when the lock `name` is held (or queued for) by anyone on this service's store. */
  isLocked(name: string): boolean {
    return this.store.isLocked(this.pathOf(name));
  }

  /**
   * Expires this service's session on the in-memory server, as ZooKeeper does to a dead instance:
   * its leases are lost (their signals abort with reason `session-expired`), its nodes go so the
   * other services' waiters move on, and it opens a new session for later calls. Resolves once
   * this service has been told.
   */
  expireSession(): Promise<void> {
    const id = this.connection.sessionId;
    if (!id) return Promise.resolve();
    // As with a real server, the client hears of it a moment later: resolves once it has.
    const told = new Promise<void>((resolve) => this.connection.once('lost', () => resolve()));
    this.store.expire(id);
    return told;
  }

  /**
   * Cuts this service off from the in-memory server (a partition): calls fail or wait with reason
   * `connection`, its leases are lost before the server may expire its session (one timeout
   * later), and it cannot open a new session until `reconnect()`.
   */
  disconnect(): void {
    this.store.cut(this.link);
  }

  /** Ends a `disconnect()`: the same session again, or the news that it expired meanwhile and a new one. */
  reconnect(): void {
    this.store.restore(this.link);
  }

  /** What `app.close()` does with the real module: the same shutdown, then the session closes. */
  async onApplicationShutdown(): Promise<void> {
    this.releaseHeldForMinimum();
    await this.lockEngine.shutdown();
    await this.connection.close();
  }
}
