import { BadRequestException, Injectable, type PipeTransform } from '@nestjs/common';

export interface PurchaseDto {
  /** Seats to buy, 1 to 10. */
  quantity: number;
  /** Who buys (free text, optional). */
  buyer?: string;
}

export interface CreateEventDto {
  name: string;
  seats: number;
}

export const MAX_SEATS_PER_PURCHASE = 10;

function object(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new BadRequestException('The body must be a JSON object');
  }
  const unknown = Object.keys(body).filter((key) => !allowed.includes(key));
  if (unknown.length) throw new BadRequestException(`Unknown field(s): ${unknown.join(', ')} (allowed: ${allowed.join(', ')})`);
  return body as Record<string, unknown>;
}

function int(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new BadRequestException(`${field} must be an integer from ${min} to ${max}`);
  }
  return value;
}

function text(value: unknown, field: string, maxLength: number): string {
  if (typeof value !== 'string' || value.trim() === '' || value.length > maxLength) {
    throw new BadRequestException(`${field} must be a non-empty string of at most ${maxLength} characters`);
  }
  return value.trim();
}

/** `:id`: a positive integer (400 otherwise), before any lock is taken. */
@Injectable()
export class EventIdPipe implements PipeTransform<string, number> {
  transform(value: string): number {
    if (!/^[1-9]\d{0,14}$/.test(value)) throw new BadRequestException(`The event id must be a positive integer, got ${JSON.stringify(value)}`);
    return Number(value);
  }
}

@Injectable()
export class PurchasePipe implements PipeTransform<unknown, PurchaseDto> {
  transform(body: unknown): PurchaseDto {
    const fields = object(body, ['quantity', 'buyer']);
    const quantity = int(fields.quantity, 'quantity', 1, MAX_SEATS_PER_PURCHASE);
    const buyer = fields.buyer === undefined ? undefined : text(fields.buyer, 'buyer', 100);
    return { quantity, buyer };
  }
}

@Injectable()
export class CreateEventPipe implements PipeTransform<unknown, CreateEventDto> {
  transform(body: unknown): CreateEventDto {
    const fields = object(body, ['name', 'seats']);
    return { name: text(fields.name, 'name', 200), seats: int(fields.seats, 'seats', 1, 1_000_000) };
  }
}
