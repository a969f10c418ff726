import { Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import type { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import type { MeterProvider } from '@opentelemetry/sdk-metrics';
import { LockService } from 'nestjs-zk-lock';
import type { ZkLockMetricsHandle } from 'nestjs-zk-lock/metrics';

/**
 * METRICS=prometheus only: an OpenTelemetry MeterProvider whose one reader is a PrometheusExporter
 * without its own HTTP server (MetricsController serves it on the app's port), fed by
 * `enableZkLockMetrics`. The SDK and the library's metrics entry are imported here, at start-up,
 * so that without the flag none of it is even loaded.
 */
@Injectable()
export class PrometheusMetrics implements OnModuleInit, OnApplicationShutdown {
  private provider?: MeterProvider;
  private exporter?: PrometheusExporter;
  private serializer?: PrometheusSerializer;
  private stopRecording?: ZkLockMetricsHandle;

  constructor(private readonly locks: LockService) {}

  // onModuleInit: before the cron jobs start (onApplicationBootstrap) and before the first request.
  async onModuleInit(): Promise<void> {
    const [{ MeterProvider }, { PrometheusExporter, PrometheusSerializer }, { enableZkLockMetrics }] = await Promise.all([
      import('@opentelemetry/sdk-metrics'),
      import('@opentelemetry/exporter-prometheus'),
      import('nestjs-zk-lock/metrics'),
    ]);
    this.exporter = new PrometheusExporter({ preventServerStart: true });
    this.serializer = new PrometheusSerializer();
    this.provider = new MeterProvider({ readers: [this.exporter] });
    // An app with a global OpenTelemetry SDK would call enableZkLockMetrics() with no meter.
    // `connections`: the state gauge reads this one directly (it connected before we subscribed).
    this.stopRecording = enableZkLockMetrics(this.provider.getMeter('nestjs-zk-lock'), { connections: [this.locks.connection] });
  }

  /** The current values in Prometheus' text exposition format. */
  async scrape(): Promise<string> {
    if (!this.exporter || !this.serializer) throw new Error('metrics are not started');
    const { resourceMetrics, errors } = await this.exporter.collect();
    if (errors.length > 0) throw new AggregateError(errors, 'collecting the metrics failed');
    return this.serializer.serialize(resourceMetrics);
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopRecording?.();
    await this.provider?.shutdown();
  }
}
