/**
 * `nestjs-zk-lock/metrics`: OpenTelemetry metrics from the library's diagnostics channels
 * (`@opentelemetry/api` is an optional peer; the main entry never loads it).
 */
export { enableZkLockMetrics, type ZkLockMetricsOptions, type ZkLockMetricsHandle } from './zk-lock-metrics.js';
