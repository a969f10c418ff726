import {
  ConflictException,
  GoneException,
  Injectable,
  Logger,
  NotFoundException,
  ServiceUnavailableException,
  UnprocessableEntityException,
} from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { LockContext } from 'nestjs-zk-lock';
import type { AppConfig } from '../config.js';
import { DatabaseService, fenceText, type EventRow } from '../database/database.service.js';
import { PaymentService } from './payment.service.js';
import type { CreateEventDto, PurchaseDto } from './validation.pipes.js';

export interface EventView {
  id: number;
  name: string;
  seats: number;
  sold: number;
  remaining: number;
  /** Seats sold beyond capacity: what the lock prevents. */
  oversold: number;
}

export interface SaleView {
  saleId: number;
  eventId: number;
  quantity: number;
  remaining: number;
  instance: string;
  /** The fencing token of the lock the sale was written under (null without a lock). */
  fencingToken: string | null;
}

function view(row: EventRow): EventView {
  return { ...row, remaining: Math.max(0, row.seats - row.sold), oversold: Math.max(0, row.sold - row.seats) };
}

@Injectable()
export class SalesService {
  private readonly logger = new Logger(SalesService.name);
  private readonly instance: string;

  constructor(
    private readonly database: DatabaseService,
    private readonly payments: PaymentService,
    config: ConfigService<AppConfig, true>,
  ) {
    this.instance = config.get('INSTANCE', { infer: true });
  }

  list(): EventView[] {
    return this.database.db.prepare<[], EventRow>('SELECT id, name, seats, sold FROM events ORDER BY id').all().map(view);
  }

  get(id: number): EventView {
    return view(this.row(id));
  }

  create(dto: CreateEventDto): EventView {
    const { lastInsertRowid } = this.database.db.prepare('INSERT INTO events (name, seats) VALUES (?, ?)').run(dto.name, dto.seats);
    return this.get(Number(lastInsertRowid));
  }

  /**
   * Sells `quantity` seats: reads what is left, charges the buyer (a slow remote call), then writes
   * the sale. Between the read and the write another request, here or on another instance, can
   * sell the same seats: the caller must hold the event's lock (PurchaseController's @WithLock).
   * The write also carries the lock's fencing token, so a holder that lost its lock meanwhile (and
   * was overtaken by the next one) cannot write late.
   */
  async purchase(eventId: number, { quantity, buyer }: PurchaseDto): Promise<SaleView> {
    const event = this.row(eventId); // statement 1: the read
    const remaining = event.seats - event.sold;
    if (remaining <= 0) throw new GoneException(`Event ${eventId} is sold out`);
    if (quantity > remaining) throw new UnprocessableEntityException(`Only ${remaining} seat(s) left for event ${eventId}`);

    const lock = LockContext.current(); // undefined when no lock is held (LOCKS=off)
    try {
      await this.payments.charge(buyer, quantity, lock?.signal);
    } catch (error) {
      if (lock?.signal.aborted) throw new ServiceUnavailableException('Lost the seat lock during payment; nothing was sold, retry');
      throw error;
    }

    const fence = lock ? fenceText(lock.fencingToken) : null;
    const saleId = this.database.db
      .transaction(() => {
        // statement 2: the write (the seat count read above may be stale without a lock)
        const updated = this.database.db
          .prepare(
            `UPDATE events SET sold = sold + @quantity, fence = coalesce(@fence, fence)
             WHERE id = @eventId AND (@fence IS NULL OR fence IS NULL OR fence <= @fence)`,
          )
          .run({ quantity, fence, eventId });
        if (updated.changes === 0) return undefined; // a later lock holder already wrote: we lost ours
        return Number(
          this.database.db
            .prepare('INSERT INTO sales (event_id, quantity, buyer, instance, fence, created_at) VALUES (?, ?, ?, ?, ?, ?)')
            .run(eventId, quantity, buyer ?? null, this.instance, fence, new Date().toISOString()).lastInsertRowid,
        );
      })
      .immediate();
    if (saleId === undefined) {
      this.logger.warn(`Rejected a stale write to event ${eventId} (fencing token ${lock?.fencingToken}); refunding`);
      throw new ConflictException('The seat lock was taken over by another request; nothing was sold, retry');
    }
    return {
      saleId,
      eventId,
      quantity,
      remaining: Math.max(0, this.get(eventId).remaining),
      instance: this.instance,
      fencingToken: lock ? lock.fencingToken.toString() : null,
    };
  }

  private row(id: number): EventRow {
    const row = this.database.db.prepare<[number], EventRow>('SELECT id, name, seats, sold FROM events WHERE id = ?').get(id);
    if (!row) throw new NotFoundException(`No event ${id}`);
    return row;
  }
}
