import { Logger, type Provider } from '@nestjs/common';
import { InvalidOptionError } from '../core/errors.js';
import { LockEngine, SECURE_PARENT_ACL, validateEngineOptions } from '../core/lock-engine.js';
import { ZkConnection } from '../core/zk-connection.js';
import { ZK_LOCK_MODULE_OPTIONS } from './zk-lock.module-definition.js';
import type { ZkLockModuleOptions } from './zk-lock-module-options.interface.js';

/** Whether the module opened the connection (and so closes it on shutdown). */
export const OWNS_CONNECTION = Symbol.for('nestjs-zk-lock:owns-connection');

const logger = new Logger('ZkLockModule');

function isExternal(options: ZkLockModuleOptions): options is ZkLockModuleOptions & { connection: ZkConnection } {
  return 'connection' in options && options.connection !== undefined;
}

/** Opens (or adopts) the connection during bootstrap; bootstrap fails if it cannot connect. */
export const connectionProvider: Provider = {
  provide: ZkConnection,
  inject: [ZK_LOCK_MODULE_OPTIONS],
  useFactory: async (options: ZkLockModuleOptions): Promise<ZkConnection> => {
    if (options === null || typeof options !== 'object') throw new InvalidOptionError('options', 'expected an object');
    validateEngineOptions(options); // every option is checked before we try to connect
    const connection = isExternal(options) ? options.connection : new ZkConnection(options);
    if (!(connection instanceof ZkConnection)) throw new InvalidOptionError('connection', 'expected a ZkConnection');
    await connection.connect();
    return connection;
  },
};

/** Logs the connection's changes through Nest's Logger while the module lives (see ZkLockModule). */
export class ConnectionLog {
  readonly close: () => void;
  constructor(connection: ZkConnection) {
    const connected = (id: string) => logger.log(`Connected to ZooKeeper ${connection.description} (session 0x${id})`);
    const suspended = () => logger.warn(`Disconnected from ZooKeeper ${connection.description}; session may still be alive`);
    const reconnected = (id: string) => logger.log(`Reconnected to ZooKeeper (session 0x${id})`);
    const lost = (reason: string, id: string) => logger.error(`ZooKeeper session 0x${id} lost (${reason}); opening a new one`);
    if (connection.state === 'connected' && connection.sessionId) connected(connection.sessionId);
    this.close = connection.listen({ connected, suspended, reconnected, lost });
  }
}

export const connectionLogProvider: Provider = {
  provide: ConnectionLog,
  inject: [ZkConnection],
  useFactory: (connection: ZkConnection) => new ConnectionLog(connection),
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
    const hasAuth = 'auth' in options && options.auth !== undefined;
    const parentAcl = options.parentAcl ?? (hasAuth ? SECURE_PARENT_ACL : undefined);
    const { basePath, app, instance, defaultWaitMs, coalesce, maxLocalHandoffs, shutdownGraceMs } = options;
    const engine = new LockEngine(connection, { basePath, app, instance, parentAcl, defaultWaitMs, coalesce, maxLocalHandoffs, shutdownGraceMs });
    engine.onWarning((message) => logger.warn(message));
    return engine;
  },
};
