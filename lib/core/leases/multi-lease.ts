import type { Lease } from './lease.js';

/**
 * Several leases held and released as one (a semaphore's n permits, a multi-lock's members).
 * `path` and `fencingToken` are those of the first lease; `signal` aborts when any lease is lost.
 * Releasing goes in reverse order and does not stop at a failing member; the failures are thrown
 * together afterwards.
 */
export class LeaseGroup implements Lease {
  private combined: AbortSignal | undefined;

  constructor(
    readonly name: string,
    readonly leases: readonly Lease[],
  ) {}

  /** Built on first use: each lease's signal arms a watch on its node. */
  get signal(): AbortSignal {
    this.combined ??= this.leases.length === 1 ? this.leases[0]!.signal : AbortSignal.any(this.leases.map((l) => l.signal));
    return this.combined;
  }

  get path(): string {
    return this.leases[0]!.path;
  }
  get fencingToken(): bigint {
    return this.leases[0]!.fencingToken;
  }
  get sessionId(): string {
    return this.leases[0]!.sessionId;
  }
  /** True while every lease is held: one lost member means the group no longer holds what it asked for. */
  get isHeld(): boolean {
    return this.leases.every((l) => l.isHeld);
  }

  async release(): Promise<void> {
    await releaseAll(this.leases);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** Releases in reverse order; every lease is released even if one fails; failures thrown at the end. */
export async function releaseAll(leases: readonly Lease[]): Promise<void> {
  const errors: unknown[] = [];
  for (const lease of [...leases].reverse()) {
    try {
      await lease.release();
    } catch (error) {
      errors.push(error);
    }
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new AggregateError(errors, `${errors.length} leases failed to release`);
}
