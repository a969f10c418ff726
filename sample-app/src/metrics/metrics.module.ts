import { Module } from '@nestjs/common';
import { MetricsController } from './metrics.controller.js';
import { PrometheusMetrics } from './prometheus-metrics.service.js';

/** The Prometheus endpoint; app.module registers it only with METRICS=prometheus. */
@Module({ controllers: [MetricsController], providers: [PrometheusMetrics] })
export class MetricsModule {}
