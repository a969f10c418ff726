import { Injectable } from '@nestjs/common';
import { LockContext, WithLock } from 'nestjs-zk-lock';

@Injectable()
export class TicketsService {
  private readonly sold = new Map<string, number>();

  /** One seat per call; the lock makes read-then-write safe across instances. */
  @WithLock('ticket:{0}', { waitMs: 5_000 })
  async sell(eventId: string): Promise<{ sold: number; fencingToken: string }> {
    const before = this.sold.get(eventId) ?? 0;
    await new Promise((resolve) => setTimeout(resolve, 20));
    this.sold.set(eventId, before + 1);
    return { sold: before + 1, fencingToken: String(LockContext.current()!.fencingToken) };
  }

  /** Tries once: a second caller meets a held lock. */
  @WithLock('report', { waitMs: 0 })
  async report(holdMs: number): Promise<string> {
    await new Promise((resolve) => setTimeout(resolve, holdMs));
    return 'done';
  }

  /** Tries once and holds a while: of two buyers of one seat at once, one gets it. */
  @WithLock('seat:{0}')
  async holdSeat(seat: string): Promise<{ seat: string }> {
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    return { seat };
  }
}
