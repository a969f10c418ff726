import { Injectable, Optional, type Type } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { LockEngine } from '../core/lock-engine.js';
import { ZkConnection } from '../core/zk-connection.js';

/** @publicApi */
export interface ZkLockHealthOptions {
  /**
   * While connected, also time a round trip to the server (`exists /`) and report down if it takes
   * longer than this. 0 skips it (the connection state alone). Default 2000.
   */
  pingTimeoutMs?: number;
  /**
   * What a suspended connection reports (disconnected, the session and its locks may still live
   * on the server; new acquires wait). Default `'degraded'` (Terminus 12+; `'down'` on Terminus 11,
   * which has no degraded status).
   */
  suspended?: 'up' | 'degraded' | 'down';
  /** The connection to check, instead of the one of `ZkLockModule`. */
  connection?: ZkConnection;
}

type Status = 'up' | 'degraded' | 'down';

/**
 * Terminus health indicator for the lock module's ZooKeeper connection: up while connected (and,
 * by default, answering a ping in time), degraded while suspended, down while lost, connecting or
 * closed. The result carries `state`, `sessionId`, `server` (connect string and chroot, never
 * credentials), `sessionTimeoutMs`, `heldLocks` and the ping's `latencyMs`.
 *
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.zk.isHealthy('zookeeper')]); }
 * ```
 * @publicApi
 */
@Injectable()
export class ZkLockHealthIndicator {
  constructor(
    private readonly health: HealthIndicatorService,
    @Optional() private readonly moduleRef?: ModuleRef,
  ) {}

  async isHealthy<const Key extends string = 'zookeeper'>(
    key: Key = 'zookeeper' as Key,
    options: ZkLockHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const session = this.health.check(key);
    const connection = options.connection ?? this.find(ZkConnection);
    if (!connection) {
      return session.down({ message: 'no ZkConnection: import ZkLockModule in the application, or pass { connection }' });
    }
    const engine = options.connection ? undefined : this.find(LockEngine);
    const state = connection.state;
    const data: Record<string, unknown> = {
      state,
      sessionId: connection.sessionId === undefined ? undefined : `0x${connection.sessionId}`,
      server: connection.description,
      sessionTimeoutMs: connection.sessionTimeoutMs,
    };
    if (engine && engine.connection === connection) data.heldLocks = engine.liveCount;

    let status: Status;
    if (state === 'connected') {
      status = 'up';
      const pingTimeoutMs = options.pingTimeoutMs ?? 2000;
      if (pingTimeoutMs > 0) {
        const ping = await this.ping(connection, pingTimeoutMs);
        if (typeof ping === 'number') data.latencyMs = ping;
        else {
          status = 'down';
          data.message = ping;
        }
      }
    } else if (state === 'suspended') {
      status = options.suspended ?? 'degraded';
      data.message = 'disconnected from ZooKeeper; the session may still be alive';
    } else {
      status = 'down';
      data.message =
        state === 'lost'
          ? 'the ZooKeeper session was lost; a new one is being opened'
          : state === 'closed'
            ? 'the ZooKeeper connection is closed'
            : 'not connected to ZooKeeper yet';
    }
    const payload = Object.fromEntries(Object.entries(data).filter(([, v]) => v !== undefined));
    if (status === 'degraded') {
      // Terminus 11 has no degraded status.
      const degraded = (session as { degraded?: (data: object) => HealthIndicatorResult<Key> }).degraded;
      return typeof degraded === 'function' ? degraded.call(session, payload) : session.down(payload);
    }
    return status === 'up' ? session.up(payload) : session.down(payload);
  }

  /** The round trip in ms, or why it failed. */
  private async ping(connection: ZkConnection, timeoutMs: number): Promise<number | string> {
    const zk = connection.session;
    if (!zk) return 'no session';
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        zk.exists('/').then(() => Math.round((performance.now() - started) * 100) / 100),
        new Promise<string>((resolve) => {
          timer = setTimeout(() => resolve(`ZooKeeper did not answer within ${timeoutMs} ms`), timeoutMs);
        }),
      ]);
    } catch (error) {
      return `ZooKeeper ping failed: ${(error as Error).message}`;
    } finally {
      clearTimeout(timer);
    }
  }

  private find<T>(token: Type<T>): T | undefined {
    try {
      return this.moduleRef?.get(token, { strict: false });
    } catch {
      return undefined;
    }
  }
}
