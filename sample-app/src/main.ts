import 'reflect-metadata';
import type { AddressInfo } from 'node:net';
import { Logger } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { AppModule } from './app.module.js';
import { tracesMode, type AppConfig } from './config.js';

// TRACES=console | file:<path>: the OpenTelemetry SDK is registered before anything takes a lock.
const traces = tracesMode(process.env);
if (traces !== 'off') await (await import('./tracing/tracing.js')).startTracing(traces, process.env.INSTANCE || `pid-${process.pid}`);

// LOG_LEVEL=debug also lists the @WithLock methods at startup (a tick skipped elsewhere is never logged).
const app = await NestFactory.create<NestExpressApplication>(AppModule, {
  logger: process.env.LOG_LEVEL === 'debug' ? ['fatal', 'error', 'warn', 'log', 'debug'] : ['fatal', 'error', 'warn', 'log'],
});
app.enableShutdownHooks(); // SIGTERM/SIGINT: stop taking locks, release held ones, close the session
if (traces !== 'off') app.useGlobalInterceptors(new (await import('./tracing/request-spans.interceptor.js')).RequestSpans());
const config = app.get<ConfigService<AppConfig, true>>(ConfigService);
await app.listen(config.get('PORT', { infer: true }), '127.0.0.1');

const { port } = app.getHttpServer().address() as AddressInfo;
const instance = config.get('INSTANCE', { infer: true });
const locks = config.get('LOCKS', { infer: true });
const metrics = config.get('METRICS', { infer: true }) === 'prometheus' ? `, metrics at http://127.0.0.1:${port}/metrics` : '';
new Logger('TicketSale').log(`Instance ${instance} listening on http://127.0.0.1:${port} (locks ${locks ? 'on' : 'OFF'}${metrics})`);
// One machine-readable line for whoever started us (the demo, the e2e test).
console.log(JSON.stringify({ ready: true, instance, port, pid: process.pid, locks }));
