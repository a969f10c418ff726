import { Controller, Get, Header } from '@nestjs/common';
import { PrometheusMetrics } from './prometheus-metrics.service.js';

/** GET /metrics for a Prometheus scraper (registered with METRICS=prometheus only). */
@Controller('metrics')
export class MetricsController {
  constructor(private readonly metrics: PrometheusMetrics) {}

  @Get()
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  scrape(): Promise<string> {
    return this.metrics.scrape();
  }
}
