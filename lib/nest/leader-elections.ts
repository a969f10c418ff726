import { AsyncLocalStorage } from 'node:async_hooks';
import { Inject, Injectable, Optional } from '@nestjs/common';
import type { Leadership, LeadershipTerm } from '../core/recipes/leadership.js';
import { LockService } from './lock.service.js';
import { ZK_LOCK_MODULE_OPTIONS } from './zk-lock.module-definition.js';
import type { ZkLockLeadershipOptions } from './zk-lock-module-options.interface.js';

/** What leader-only code sees of the term it runs in. @publicApi */
export interface LeaderContextValue extends LeadershipTerm {
  readonly election: string;
}

const storage = new AsyncLocalStorage<LeaderContextValue>();

/**
 * The leadership term around the current call chain (set by `@OnlyLeader`).
 * @publicApi
 */
export const LeaderContext = {
  /** The term this call runs in (its `signal` aborts when leadership ends), or undefined outside leader-only code. */
  current(): LeaderContextValue | undefined {
    return storage.getStore();
  },
};

/** @internal Runs `fn` in `term` of `election` (what `LeaderContext.current()` then answers). */
export function runInLeaderContext<T>(election: string, term: LeadershipTerm, fn: () => T): T {
  return storage.run({ ...term, election }, fn);
}

/**
 * The elections this application takes part in, one `Leadership` per name over the module's
 * session, all under the module's `participantId`. Joined at bootstrap for every name a
 * decorator uses (see LeadershipExplorer), on first use otherwise; left at shutdown, before the
 * session closes, so a successor takes over in about a round trip.
 * @publicApi
 */
@Injectable()
export class LeaderElections {
  private readonly elections = new Map<string, Leadership>();
  private readonly participantId: string | undefined;

  constructor(
    private readonly locks: LockService,
    // Absent under ZkLockTestingModule; validated by the module before it connects.
    @Optional() @Inject(ZK_LOCK_MODULE_OPTIONS) options?: ZkLockLeadershipOptions,
  ) {
    this.participantId = options?.participantId;
  }

  /** The election `name` (joined if it was not yet). */
  get(name: string): Leadership {
    let election = this.elections.get(name);
    if (!election) {
      election = this.locks.leadership(name, { participantId: this.participantId }).start();
      this.elections.set(name, election);
    }
    return election;
  }

  /** The elections joined so far, by name. */
  get joined(): ReadonlyMap<string, Leadership> {
    return this.elections;
  }
}
