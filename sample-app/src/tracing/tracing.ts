import { appendFileSync } from 'node:fs';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { TracesMode } from '../config.js';

/** One span as a JSON line of the `file:` exporter. */
export interface SpanLine {
  /** The instance that exported it (INSTANCE). */
  instance: string;
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  startMs: number;
  endMs: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string; attributes?: Record<string, unknown> }[];
  status: { code: number; message?: string };
}

const toMs = ([seconds, nanos]: [number, number]) => seconds * 1000 + nanos / 1e6;

/**
 * Appends each span as a JSON line to `file` as it ends (a synchronous write: nothing is lost at
 * shutdown). Instances may share the file: each line is one write.
 */
class JsonLinesExporter implements SpanExporter {
  constructor(
    private readonly file: string,
    private readonly instance: string,
  ) {}

  export(spans: ReadableSpan[], done: (result: { code: number; error?: Error }) => void): void {
    try {
      const lines = spans.map((span) => {
        const { traceId, spanId } = span.spanContext();
        const line: SpanLine = {
          instance: this.instance,
          name: span.name,
          traceId,
          spanId,
          parentSpanId: span.parentSpanContext?.spanId,
          startMs: toMs(span.startTime),
          endMs: toMs(span.endTime),
          attributes: span.attributes,
          links: span.links.map((link) => ({ traceId: link.context.traceId, spanId: link.context.spanId, attributes: link.attributes })),
          status: span.status,
        };
        return `${JSON.stringify(line)}\n`;
      });
      appendFileSync(this.file, lines.join(''));
      done({ code: 0 });
    } catch (error) {
      done({ code: 1, error: error as Error });
    }
  }

  async shutdown(): Promise<void> {}
}

/**
 * TRACES=console | file:<path>: registers the OpenTelemetry SDK (a NodeTracerProvider: the global
 * tracer provider, the AsyncLocalStorage context manager, W3C propagation) before the application
 * starts. From then on nestjs-zk-lock makes its spans (it finds the provider by itself); the SDK is
 * imported here only with TRACES set. An application would export with OTLP to a collector,
 * Jaeger or Tempo instead (docs/tracing.md).
 */
export async function startTracing(mode: Exclude<TracesMode, 'off'>, instance: string): Promise<void> {
  const [{ NodeTracerProvider }, { ConsoleSpanExporter, SimpleSpanProcessor }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/sdk-trace-base'),
  ]);
  const exporter = mode === 'console' ? new ConsoleSpanExporter() : new JsonLinesExporter(mode.slice('file:'.length), instance);
  // Spans are written as they end (SimpleSpanProcessor): nothing waits in a batch at shutdown.
  new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).register();
}
