import { Logger, type Provider } from '@nestjs/common';
import { InvalidOptionError, ZkConnectError } from '../core/errors.js';
import { validateParticipantId } from '../core/recipes/leadership.js';
import { LockEngine, SECURE_PARENT_ACL, validateEngineOptions } from '../core/lock-engine.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import { checkCreateAccess, formatAcl, readableAcl, StaleHolderWatch } from '../core/inspect.js';
import { ensureLockRoot, letsAnyoneCreate } from '../core/operations/lock-root.js';
import type { ZkAcl, ZkSession } from '../core/client/session.js';
import { ANSWER_EXTRAS, ZK_LOCK_MODULE_OPTIONS } from './zk-lock.module-definition.js';
import { joinBootstrap, logAbandoned, type BootstrapSession } from './bootstrap-guard.js';
import type { ZkLockModuleOptions } from './zk-lock-module-options.interface.js';

/** Whether the module opened the connection (and so closes it on shutdown). */
export const OWNS_CONNECTION = Symbol.for('nestjs-zk-lock:owns-connection');

const logger = new Logger('ZkLockModule');

function isExternal(options: ZkLockModuleOptions): options is ZkLockModuleOptions & { connection: ZkConnection } {
  return 'connection' in options && options.connection !== undefined;
}

/** The ACL of the nodes the module makes: `parentAcl`, else with credentials locked down to them. */
function moduleParentAcl(options: ZkLockModuleOptions): readonly ZkAcl[] | undefined {
  const hasAuth = 'auth' in options && options.auth !== undefined;
  return options.parentAcl ?? (hasAuth ? SECURE_PARENT_ACL : undefined);
}

/**
 * Opens (or adopts) the module's connection during bootstrap, saying what it does, and logs the
 * connection's changes through Nest's Logger while the module lives (`close()` stops that).
 * Bootstrap waits for the first session and fails without it, unless `waitForConnection: false`.
 */
export class ModuleConnection implements BootstrapSession {
  private stopLog: () => void = () => undefined;
  /** Holders left from before a session loss (health reports them). */
  readonly staleHolders: StaleHolderWatch;
  private accessDenied: ZkConnectError | undefined;
  /** Whether the last access check got an answer (a dropped link leaves it open until the next connect). */
  private accessChecked = false;
  private openRootWarned = false;

  private constructor(
    readonly connection: ZkConnection,
    /** Whether the module opened the connection (and so closes it). */
    private readonly owned: boolean,
    readonly basePath: string,
    /** The ACL guarding what the module makes (none: open); with one, the root is made at bootstrap. */
    private readonly rootAcl: readonly ZkAcl[] | undefined,
  ) {
    this.staleHolders = new StaleHolderWatch(connection, basePath);
  }

  /**
   * Set while the configured credentials may not create under `basePath` (reason `auth-failed`):
   * ZooKeeper accepts any digest credentials at connect, so the module checks the ACL itself.
   */
  get accessFailure(): ZkConnectError | undefined {
    return this.accessDenied;
  }

  static async open(options: ZkLockModuleOptions): Promise<ModuleConnection> {
    if (options === null || typeof options !== 'object') throw new InvalidOptionError('options', 'expected an object');
    const misplaced = ANSWER_EXTRAS.find((option) => option in options);
    if (misplaced) throw new InvalidOptionError(misplaced, 'decides which providers the module has: pass it to forRootAsync beside useFactory, not in the options the factory returns');
    const basePath = validateEngineOptions(options); // every option is checked before we try to connect
    const { waitForConnection = true, participantId } = options;
    if (typeof waitForConnection !== 'boolean') throw new InvalidOptionError('waitForConnection', 'expected true or false');
    if (participantId !== undefined) validateParticipantId(participantId);
    const connection = isExternal(options) ? options.connection : new ZkConnection(options);
    if (!(connection instanceof ZkConnection)) throw new InvalidOptionError('connection', 'expected a ZkConnection');
    if (connection.state === 'closed') throw new InvalidOptionError('connection', 'is closed');
    const acl = moduleParentAcl(options);
    const opened = new ModuleConnection(connection, !isExternal(options), basePath, acl?.length ? acl : undefined);
    opened.startLog(!waitForConnection);
    if (connection.state !== 'connecting') {
      // A connection passed in, already open.
      if (waitForConnection && connection.state === 'connected') await opened.failIfDenied();
      else void opened.checkAccessInBackground();
      return opened;
    }
    const { description } = connection;
    const { connectTimeoutMs } = connection.options;
    if (!waitForConnection) {
      logger.log(
        `Connecting to ZooKeeper at ${description} in the background (waitForConnection: false); until connected, ` +
          `each lock call waits up to its waitMs for the session, then fails with reason 'connection'`,
      );
      connection.connectInBackground();
      return opened;
    }
    logger.log(`Connecting to ZooKeeper at ${description} (up to connectTimeoutMs, ${connectTimeoutMs} ms)`);
    try {
      // Ours fails after connectTimeoutMs; one passed in may already be connecting with no deadline.
      await Promise.race([connection.connect(), rejectAfter(connectTimeoutMs, () => new ZkConnectError(description, 'unreachable', `no session within connectTimeoutMs (${connectTimeoutMs} ms)`))]);
    } catch (error) {
      opened.close();
      throw error;
    }
    await opened.failIfDenied();
    return opened;
  }

  /** Bootstrap: fails with ZkConnectError (auth-failed) if the credentials may not create under basePath. */
  private async failIfDenied(): Promise<void> {
    // Not logged: the bootstrap fails with it, and Nest prints that (once).
    const denied = await this.checkAccess({ log: false }).catch(() => undefined); // no answer: checked again at the next connect
    if (!denied) return;
    this.close();
    if (this.owned) await this.connection.close().catch(() => undefined);
    throw denied;
  }

  /**
   * Checks that the session may create under basePath (creates and deletes an ephemeral probe node
   * in basePath or its nearest existing ancestor); resolves with the failure, if any. Rejects when
   * ZooKeeper does not answer (the previous result stays). Under an ACL, a missing basePath is
   * made first (persistent, with the ACL): the first application with credentials to boot owns it,
   * and one with other credentials is refused here, whichever starts later. A new failure is
   * logged as an error unless `log` is false.
   */
  async checkAccess({ log = true } = {}): Promise<ZkConnectError | undefined> {
    const { connection, basePath } = this;
    const session = connection.session;
    if (connection.state !== 'connected' || !session) return this.accessDenied;
    const { auth } = connection.options;
    if (this.rootAcl) await ensureLockRoot(session, basePath, this.rootAcl);
    const denied = await checkCreateAccess(session, basePath);
    this.accessChecked = true;
    if (!denied) {
      if (this.accessDenied) logger.log(`The credentials may now create under basePath ${basePath}`);
      this.accessDenied = undefined;
      await this.warnIfRootOpen(session);
      return undefined;
    }
    const users = auth.map((a) => (a.scheme === 'digest' ? `digest user ${JSON.stringify(a.credentials.split(':')[0])}` : `scheme ${a.scheme}`));
    const who = users.length === 0 ? 'this session has no credentials (auth) and' : `the configured credentials (${users.join(', ')})`;
    const where = denied.path === basePath ? basePath : `${denied.path} (the nearest existing parent of basePath ${basePath})`;
    const error = new ZkConnectError(
      connection.description,
      'auth-failed',
      `${who} may not create under basePath ${basePath}: ZooKeeper refused to create a node in ${where}, whose ACL is ${formatAcl(denied.acl)}; ` +
        `every lock would fail with NOAUTH. Fix the credentials, or the ACL (e.g. zkCli.sh setAcl ${denied.path} ...)`,
    );
    const changed = this.accessDenied?.message !== error.message;
    this.accessDenied = error;
    if (changed && log) logger.error(`${error.message}; lock calls fail until it is fixed`);
    return error;
  }

  /**
   * Warns once when basePath lets anyone create in it while this module locks its nodes down: a
   * lock's path, a container, goes when empty, and a client with other credentials may then make
   * it again under its own ACL and lock this application out of that lock.
   */
  private async warnIfRootOpen(session: ZkSession): Promise<void> {
    const { basePath, rootAcl } = this;
    if (!rootAcl || this.openRootWarned || letsAnyoneCreate(rootAcl)) return;
    const acl = await readableAcl(session, basePath);
    if (!acl || !letsAnyoneCreate(acl)) return;
    this.openRootWarned = true;
    logger.warn(
      `basePath ${basePath} lets anyone create in it (its ACL is ${formatAcl(acl)}) although this module's nodes are locked down: ` +
        'a client with other credentials can make a missing lock path there under its own ACL and lock this application out of that lock. ' +
        `Restrict it (zkCli.sh setAcl ${basePath} with your credentials' digest and world:anyone:r), or use a basePath that does not exist yet: the module makes it, persistent, with its ACL`,
    );
  }

  /** Runs the check, logging a failure (waitForConnection: false, and every new session). */
  private async checkAccessInBackground(): Promise<void> {
    await this.checkAccess().catch(() => undefined);
  }

  /** `inBackground`: nobody awaits the first connect, so a failure that closes it is logged here. */
  private startLog(inBackground: boolean): void {
    const { connection } = this;
    // The server the session is (or was last) linked to; the whole connect string where the client cannot tell.
    const server = () => connection.session?.server ?? connection.description;
    const connected = (id: string) => logger.log(`Connected to ZooKeeper at ${server()} (session 0x${id})`);
    const suspended = () => logger.warn(`Disconnected from ZooKeeper at ${server()}; the session may still be alive`);
    const reconnected = (id: string) => logger.log(`Reconnected to ZooKeeper at ${server()} (session 0x${id})`);
    const lost = (reason: string, id: string) => logger.error(`ZooKeeper session 0x${id} lost (${reason}); opening a new one`);
    const unreachable = (problems: string[], elapsedMs: number) =>
      logger.warn(`Still connecting to ZooKeeper after ${(elapsedMs / 1000).toFixed(0)} s, retrying: ${problems.join('; ')}`);
    // Closed by itself before its first session (auth, chroot): in the background nobody else says so.
    const closed = () => inBackground && connection.failure && logger.error(`${connection.failure.message}; lock calls fail until the application restarts`);
    if (connection.state === 'connected' && connection.sessionId) connected(connection.sessionId);
    // Each new session checks the credentials again (the first one also at bootstrap, unless in the background).
    let first = !inBackground && connection.state === 'connecting';
    const check = () => {
      if (first) first = false;
      else void this.checkAccessInBackground();
    };
    const recheck = () => !this.accessChecked && void this.checkAccessInBackground();
    this.stopLog = connection.listen({
      connected: (id) => {
        connected(id);
        this.accessChecked = false;
        check();
      },
      suspended,
      reconnected: (id) => {
        reconnected(id);
        recheck();
      },
      lost,
      unreachable,
      closed,
    });
  }

  close(): void {
    this.stopLog();
    this.staleHolders.close();
  }

  /** The application failed to start (Nest calls no shutdown hook then): let the session go. */
  async abandon(reason: string): Promise<void> {
    this.close();
    if (!this.owned || this.connection.state === 'closed') return;
    logAbandoned(this.connection.description, reason);
    await this.connection.close().catch(() => undefined);
  }
}

function rejectAfter(ms: number, error: () => Error): Promise<never> {
  return new Promise((_, reject) => setTimeout(() => reject(error()), ms).unref());
}

export const moduleConnectionProvider: Provider = {
  provide: ModuleConnection,
  inject: [ZK_LOCK_MODULE_OPTIONS],
  useFactory: async (options: ZkLockModuleOptions) => {
    const opened = await ModuleConnection.open(options);
    // Closed if the application this module belongs to fails to start.
    joinBootstrap(opened);
    return opened;
  },
};

export const connectionProvider: Provider = {
  provide: ZkConnection,
  inject: [ModuleConnection],
  useFactory: (opened: ModuleConnection) => opened.connection,
};

export const ownsConnectionProvider: Provider = {
  provide: OWNS_CONNECTION,
  inject: [ZK_LOCK_MODULE_OPTIONS],
  useFactory: (options: ZkLockModuleOptions) => !isExternal(options),
};

export const engineProvider: Provider = {
  provide: LockEngine,
  inject: [ZkConnection, ZK_LOCK_MODULE_OPTIONS],
  useFactory: (connection: ZkConnection, options: ZkLockModuleOptions) => {
    // With credentials, parents are locked down unless the caller chose an ACL.
    const parentAcl = moduleParentAcl(options);
    const { basePath, app, instance, defaultWaitMs, coalesce, maxLocalHandoffs, shutdownGraceMs, maxIdleLockPaths, deadlockDetection } = options;
    const engine = new LockEngine(connection, { basePath, app, instance, parentAcl, defaultWaitMs, coalesce, maxLocalHandoffs, shutdownGraceMs, maxIdleLockPaths, deadlockDetection });
    engine.onWarning((message) => logger.warn(message));
    return engine;
  },
};

/**
 * Runs a bootstrap step; if it throws, closes the session the module opened first: Nest runs no
 * shutdown hook after a failed bootstrap, and an open session would keep the process (a test
 * runner, say) alive.
 */
export async function closeOwnedConnectionOnError<T>(connection: ZkConnection | undefined, owned: boolean | undefined, step: () => T | Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (owned) await connection?.close();
    throw error;
  }
}
