import { Injectable, Optional, type Type } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { LockEngine } from '../core/lock-engine.js';
import { ZkConnection } from '../core/connection/zk-connection.js';
import type { StaleHolder } from '../core/inspect.js';
import { deadlocksOf } from '../core/deadlocks.js';
import type { Deadlock } from '../core/errors.js';
import { ModuleConnection } from '../nest/zk-lock.providers.js';
import { LeaderElections } from '../nest/leader-elections.js';

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
  /**
   * What a connected session reports while locks this application used recently are held by
   * sessions from before its own session was lost (`staleHolders` in the details): after an outage
   * longer than the session timeout, a restarted ZooKeeper keeps the nodes of sessions that died
   * during it for one more session timeout, and those locks look taken. Such a holder may also be
   * a live instance that kept its session; ZooKeeper cannot tell from here. Reported for up to
   * twice the session timeout after the new session connected. Default `'degraded'` (`'down'` on
   * Terminus 11).
   */
  staleHolders?: 'up' | 'degraded' | 'down';
  /**
   * What it reports while a wait of this application is in a deadlock (`deadlocks` in the
   * details: every member's lock, holder and what it waits for): a cycle of waits across processes
   * that nobody breaks (with `deadlockDetection: 'report'`, or a member that does not detect).
   * Read only while a call chain of this application that holds locks waits for another. Default
   * `'degraded'` (`'down'` on Terminus 11).
   */
  deadlocks?: 'up' | 'degraded' | 'down';
  /** The connection to check, instead of the one of `ZkLockModule`. */
  connection?: ZkConnection;
}

type Status = 'up' | 'degraded' | 'down';

/**
 * Terminus health indicator for the lock module's ZooKeeper connection: up while connected (and,
 * by default, answering a ping in time), degraded while suspended, down while lost, connecting or
 * closed, down with `reason: 'auth-failed'` while the configured credentials may not create under
 * `basePath`, degraded while recently used locks are held by sessions from before a loss of ours
 * (`staleHolders`, see the option), degraded while waits of this application are in a deadlock
 * (`deadlocks`, see the option). The result carries `state`, `sessionId`, `server` (connect
 * string and chroot, never credentials), `sessionTimeoutMs`, `heldLocks` and the ping's `latencyMs`.
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
    const found = this.find(ModuleConnection as unknown as Type<ModuleConnection>);
    const module = found?.connection === connection ? found : undefined;
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
      if (connection.failure) data.reason = connection.failure.reason;
      data.message =
        state === 'closed' && connection.failure
          ? connection.failure.message
          : state === 'lost'
          ? 'the ZooKeeper session was lost; a new one is being opened'
          : state === 'closed'
            ? 'the ZooKeeper connection is closed'
            : 'not connected to ZooKeeper yet';
    }
    if (module && status !== 'down') {
      // Checked again while it fails, so that a fixed ACL shows at once.
      const denied = module.accessFailure && state === 'connected' ? ((await this.within(module.checkAccess(), options.pingTimeoutMs ?? 2000)) ?? module.accessFailure) : module.accessFailure;
      if (denied) {
        status = 'down';
        data.reason = denied.reason;
        data.message = denied.message;
      }
    }
    if (module && status === 'up' && module.staleHolders.since) {
      const elections = this.find(LeaderElections);
      const extra = elections ? [...elections.joined.values()].map((l) => l.path) : [];
      const stale = await this.within(module.staleHolders.staleHolders(extra), options.pingTimeoutMs || 2000);
      if (stale && stale.length > 0) {
        status = options.staleHolders ?? 'degraded';
        data.staleHolders = stale.map(describeStale);
        data.message =
          `${stale.length} lock(s) this application used are held by sessions from before its own session was lost ` +
          `(${module.staleHolders.since.toISOString()}): they may have died during the outage, and a restarted ZooKeeper frees ` +
          `their nodes only one session timeout after it restarted; until then these locks look taken`;
      }
    }
    if (engine && engine.connection === connection && status !== 'down' && engine.holdingWaits.size > 0) {
      const deadlocks = await this.within(deadlocksOf(engine), options.pingTimeoutMs || 2000);
      if (deadlocks && deadlocks.length > 0) {
        status = worse(status, options.deadlocks ?? 'degraded');
        data.deadlocks = deadlocks.map(describeDeadlock);
        data.message =
          `${deadlocks.length} deadlock(s): waits of this application are in a cycle of waits across processes ` +
          '(each member holds a lock the one before it waits for); they end when a member gives up (its waitMs)';
      }
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

  /** `work`'s result, or undefined if it fails or takes longer than `ms`. */
  private async within<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([work.catch(() => undefined), new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms > 0 ? ms : 2000)))]);
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

const SEVERITY: Record<Status, number> = { up: 0, degraded: 1, down: 2 };

function worse(a: Status, b: Status): Status {
  return SEVERITY[a] >= SEVERITY[b] ? a : b;
}

function describeDeadlock(deadlock: Deadlock): Record<string, unknown> {
  return {
    members: deadlock.members.map((m) => {
      const { host, pid, app, instance } = m.holder;
      return { lock: m.lock, waitsFor: m.waitsFor, sessionId: `0x${m.sessionId}`, host, pid, app, instance, waitingSince: m.waitingSince.toISOString() };
    }),
  };
}

function describeStale(h: StaleHolder): Record<string, unknown> {
  const { host, pid, app, instance } = h.holder;
  return { lock: h.lockPath, node: h.node, sessionId: `0x${h.sessionId}`, createdAt: h.createdAt.toISOString(), host, pid, app, instance };
}
