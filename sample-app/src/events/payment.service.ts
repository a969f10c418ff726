import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { trace } from '@opentelemetry/api';
import type { AppConfig } from '../config.js';

/** Stands in for a payment provider: a call that takes a few tens of milliseconds. */
@Injectable()
export class PaymentService {
  private readonly minMs: number;
  private readonly maxMs: number;
  /** A span per charge with TRACES (a no-op without a tracer provider): under the lock's hold span. */
  private readonly tracer = trace.getTracer('ticket-sale');

  constructor(config: ConfigService<AppConfig, true>) {
    this.minMs = config.get('PAYMENT_MIN_MS', { infer: true });
    this.maxMs = config.get('PAYMENT_MAX_MS', { infer: true });
  }

  /** Charges the buyer; rejects if `signal` aborts first (e.g. the lock was lost meanwhile). */
  charge(buyer: string | undefined, quantity: number, signal?: AbortSignal): Promise<{ reference: string }> {
    return this.tracer.startActiveSpan('payment', async (span) => {
      try {
        await sleep(this.minMs + Math.random() * (this.maxMs - this.minMs), undefined, { signal });
        return { reference: `pay-${Date.now().toString(36)}-${quantity}-${buyer ?? 'anonymous'}` };
      } finally {
        span.end();
      }
    });
  }
}
