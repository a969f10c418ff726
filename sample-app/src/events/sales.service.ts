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

interface SaleWrite {
  eventId: number;
  quantity: number;
  buyer: string | undefined;
  fence: string | null;
}

@Injectable()
export class SalesService {
  private readonly logger = new Logger(SalesService.name);
  private readonly instance: string;
  // Prepared once: SQLite compiles a statement on every prepare(). Preparing them per purchase
  // (and a new transaction function each time) took about 85 of its 100 µs of SQL work.
  private readonly sql;
  /** Statement 3 (see purchase): the sale, in one IMMEDIATE transaction; undefined when the fence is no longer ours. */
  private readonly writeSale;

  constructor(
    private readonly database: DatabaseService,
    private readonly payments: PaymentService,
    config: ConfigService<AppConfig, true>,
  ) {
    this.instance = config.get('INSTANCE', { infer: true });
    const db = database.db;
    this.sql = {
      list: db.prepare<[], EventRow>('SELECT id, name, seats, sold FROM events ORDER BY id'),
      row: db.prepare<[number], EventRow>('SELECT id, name, seats, sold FROM events WHERE id = ?'),
      create: db.prepare<[string, number]>('INSERT INTO events (name, seats) VALUES (?, ?)'),
      claim: db.prepare<[{ fence: string; eventId: number }]>('UPDATE events SET fence = @fence WHERE id = @eventId AND (fence IS NULL OR fence <= @fence)'),
      // the write, only while the row's fence is still ours (the count read before may be stale without a lock)
      sell: db.prepare<[{ quantity: number; fence: string | null; eventId: number }]>(
        'UPDATE events SET sold = sold + @quantity WHERE id = @eventId AND (@fence IS NULL OR fence = @fence)',
      ),
      insertSale: db.prepare<[number, number, string | null, string, string | null, string]>(
        'INSERT INTO sales (event_id, quantity, buyer, instance, fence, created_at) VALUES (?, ?, ?, ?, ?, ?)',
      ),
    };
    this.writeSale = db.transaction(({ eventId, quantity, buyer, fence }: SaleWrite): number | undefined => {
      const updated = this.sql.sell.run({ quantity, fence, eventId });
      if (updated.changes === 0) return undefined; // a later lock holder claimed the row: we lost ours
      return Number(this.sql.insertSale.run(eventId, quantity, buyer ?? null, this.instance, fence, new Date().toISOString()).lastInsertRowid);
    });
  }

  list(): EventView[] {
    return this.sql.list.all().map(view);
  }

  get(id: number): EventView {
    return view(this.row(id));
  }

  create(dto: CreateEventDto): EventView {
    const { lastInsertRowid } = this.sql.create.run(dto.name, dto.seats);
    return this.get(Number(lastInsertRowid));
  }

  /**
   * Sells `quantity` seats: reads what is left, charges the buyer (a slow remote call), then writes
   * the sale. Between the read and the write another request, here or on another instance, can
   * sell the same seats: the caller must hold the event's lock (PurchaseController's @WithLock).
   *
   * Fencing for a read-modify-write: claim the row with our token first, then read, then write
   * only where the row's fence is still ours. A holder that lost its lock (and was overtaken by
   * the next one) then cannot write late, and the next holder never reads a count that a late
   * write is about to change: checking the fence only at the write would let the old holder write
   * first (its token still the highest the row had seen) after the new one had read.
   */
  async purchase(eventId: number, { quantity, buyer }: PurchaseDto): Promise<SaleView> {
    const lock = LockContext.current(); // undefined when no lock is held (LOCKS=off)
    const fence = lock ? fenceText(lock.fencingToken) : null;
    if (fence !== null) this.claim(eventId, fence); // statement 1: the claim

    const event = this.row(eventId); // statement 2: the read
    const remaining = event.seats - event.sold;
    if (remaining <= 0) throw new GoneException(`Event ${eventId} is sold out`);
    if (quantity > remaining) throw new UnprocessableEntityException(`Only ${remaining} seat(s) left for event ${eventId}`);

    try {
      await this.payments.charge(buyer, quantity, lock?.signal);
    } catch (error) {
      if (lock?.signal.aborted) throw new ServiceUnavailableException('Lost the seat lock during payment; nothing was sold, retry');
      throw error;
    }

    // statement 3: the write, only while the row's fence is still ours
    const saleId = this.writeSale.immediate({ eventId, quantity, buyer, fence });
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

  /** Marks the row as ours unless a later holder already did (then we lost the lock: 409). */
  private claim(eventId: number, fence: string): void {
    const { changes } = this.sql.claim.run({ fence, eventId });
    if (changes > 0) return;
    this.row(eventId); // 404 when there is no such event
    throw new ConflictException('The seat lock was taken over by another request; nothing was sold, retry');
  }

  private row(id: number): EventRow {
    const row = this.sql.row.get(id);
    if (!row) throw new NotFoundException(`No event ${id}`);
    return row;
  }
}
