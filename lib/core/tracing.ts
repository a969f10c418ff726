import { createRequire } from 'node:module';
import { join } from 'node:path';
import { parseHolderData } from './operations/holder-data.js';

/*
 * Contention traces with OpenTelemetry (docs/tracing.md). `@opentelemetry/api` is an optional
 * peer: it is looked for at the first acquire, and with it absent, or present with no tracer
 * provider registered, an acquire costs one global read here and nothing else (no span, no
 * context lookup, no allocation). The types below are the few parts of the API used, written out
 * so that the published typings never name the package.
 */

interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
}
type Attributes = Record<string, string | number | boolean | string[]>;
interface Link {
  context: SpanContext;
  attributes?: Attributes;
}
interface Span {
  spanContext(): SpanContext;
  setAttribute(key: string, value: string | number | boolean | string[]): unknown;
  setAttributes(attributes: Attributes): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: unknown): void;
  isRecording(): boolean;
  /** API 1.9+ (an SDK without it gets no links). */
  addLink?(link: Link): unknown;
  end(): void;
}
type OtelContext = object;
interface Tracer {
  startSpan(name: string, options?: { attributes?: Attributes; links?: Link[] }, context?: OtelContext): Span;
}
interface TracerProvider {
  getTracer(name: string): Tracer;
  /** On the API's proxy provider: the registered one (or the API's no-op provider). */
  getDelegate?(): TracerProvider;
}
interface OtelApi {
  trace: { getTracerProvider(): TracerProvider; setSpan(context: OtelContext, span: Span): OtelContext };
  context: { active(): OtelContext; with<T>(context: OtelContext, fn: () => T): T };
  ProxyTracerProvider: new () => { getDelegate(): TracerProvider };
}

const SPAN_STATUS_ERROR = 2;
const TRACER_NAME = 'nestjs-zk-lock';

/** The API module; undefined until looked for, null when not installed. */
let api: OtelApi | null | undefined;
/** The API's no-op provider: what the proxy provider delegates to while none is registered. */
let noopProvider: TracerProvider | undefined;
let tracerOf: { provider: TracerProvider; tracer: Tracer } | undefined;
/** Set once a span was made: until then no lease is looked up for a hold span. */
let everTraced = false;

/** From the library's place first, then the application's (a layout that does not hoist the peer). */
function loadApi(): OtelApi | null {
  for (const from of [import.meta.url, join(process.cwd(), 'package.json')]) {
    try {
      const loaded = createRequire(from)('@opentelemetry/api') as OtelApi;
      noopProvider = new loaded.ProxyTracerProvider().getDelegate();
      return loaded;
    } catch {
      // not installed there
    }
  }
  return null;
}

/** The tracer of the registered provider; undefined without the API or a provider. */
function activeTracer(): Tracer | undefined {
  if (api === undefined) api = loadApi();
  if (api === null) return undefined;
  const global = api.trace.getTracerProvider();
  const provider = typeof global.getDelegate === 'function' ? global.getDelegate() : global;
  if (provider === noopProvider) return undefined;
  if (tracerOf?.provider !== provider) tracerOf = { provider, tracer: provider.getTracer(TRACER_NAME) };
  return tracerOf.tracer;
}

/** What a lock's spans say about it. */
export interface TracedLock {
  readonly name: string;
  readonly path: string;
  readonly kind: string;
}

/** W3C trace context: version 00, trace id, parent (span) id, flags. */
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const INVALID_TRACE = /^0+$/;

function traceparentOf(context: SpanContext): string {
  return `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The span context a lock node's data names (`traceparent`), if it names a valid one. */
export function holderSpanContext(data: Buffer): SpanContext | undefined {
  const { traceparent } = parseHolderData(data);
  if (typeof traceparent !== 'string') return undefined;
  const match = TRACEPARENT.exec(traceparent);
  if (!match || INVALID_TRACE.test(match[1]!) || INVALID_TRACE.test(match[2]!)) return undefined;
  return { traceId: match[1]!, spanId: match[2]!, traceFlags: parseInt(match[3]!, 16), isRemote: true };
}

/** Tracing must never break locking: an SDK that throws loses the span's update, the lock goes on. */
function safely<T>(work: () => T): T | undefined {
  try {
    return work();
  } catch {
    return undefined;
  }
}

/**
 * One acquire's `lock.acquire` span, from the acquire's start to its outcome: the queue writes
 * the span's context into our node's data (`nodeData`), and links it to the holder named in the
 * data of each node it waits behind. No method throws.
 */
export class AcquireTrace {
  /** Merged into our node's holder data: the context waiters behind us link to. */
  readonly nodeData: { traceparent: string } | undefined;
  /** This span's context (for a later holder's handoff link). */
  readonly context: SpanContext;
  private readonly parent: OtelContext;
  private readonly span: Span;
  /** The lock's, then the hold's too (the SDK copies them at each start). */
  private readonly attributes: Attributes;
  private waited = false;
  private watched: string[] | undefined;
  /** Span ids linked to (one link per holder, however often it is watched). */
  private linked: string[] | undefined;
  private ended = false;

  /** Throws what the SDK throws (see startAcquireTrace). */
  constructor(
    private readonly otel: OtelApi,
    private readonly tracer: Tracer,
    lock: TracedLock,
  ) {
    this.parent = otel.context.active();
    this.attributes = { 'zk_lock.name': lock.name, 'zk_lock.path': lock.path, 'zk_lock.kind': lock.kind };
    this.span = tracer.startSpan('lock.acquire', { attributes: this.attributes }, this.parent);
    this.context = this.span.spanContext();
    this.nodeData = this.span.isRecording() ? { traceparent: traceparentOf(this.context) } : undefined;
  }

  /** The acquire found the lock taken: `position` callers ahead of it (in ZooKeeper's queue, or in this process). */
  waiting(position: number, inProcess = false): void {
    if (this.waited || this.ended) return;
    this.waited = true;
    safely(() => this.span.setAttributes(inProcess ? { 'zk_lock.queue.position': position, 'zk_lock.queue.in_process': true } : { 'zk_lock.queue.position': position }));
  }

  /** It waits behind `node`; `data` is what the watch's read returned (the holder data). */
  watching(node: string, data: Buffer | undefined): void {
    if (this.ended) return;
    (this.watched ??= []).push(node);
    safely(() => this.span.setAttribute('zk_lock.watched', this.watched!));
    const holder = data && holderSpanContext(data);
    if (holder) this.linkTo(holder, node);
  }

  /** A local holder handed the lock over to this acquire, which had waited for it. */
  handedOverBy(previous: AcquireTrace | undefined): void {
    if (previous && this.waited && !this.ended) this.linkTo(previous.context, undefined);
  }

  private linkTo(context: SpanContext, node: string | undefined): void {
    if (this.linked?.includes(context.spanId) || typeof this.span.addLink !== 'function') return;
    (this.linked ??= []).push(context.spanId);
    safely(() => this.span.addLink!(node ? { context, attributes: { 'zk_lock.node': node } } : { context }));
  }

  /** Ends the span as acquired and starts the hold's, a sibling under the same parent. */
  acquired(node: string, fencingToken: bigint, waitedMs: number): HoldTrace | undefined {
    if (this.ended) return undefined;
    const held = { 'zk_lock.node': node, 'zk_lock.fencing_token': fencingToken.toString() };
    this.finish('acquired', waitedMs, held);
    return safely(() => new HoldTrace(this.otel, this.tracer.startSpan('lock.hold', { attributes: Object.assign(this.attributes, held) }, this.parent)));
  }

  /** Ends the span as not acquired (`reason`: timeout, aborted, connection, error). */
  notAcquired(reason: string, waitedMs: number, error: unknown): void {
    if (this.ended) return;
    this.finish(reason, waitedMs, {}, () => {
      this.span.setStatus({ code: SPAN_STATUS_ERROR, message: reason });
      if (reason === 'error') this.span.recordException(error instanceof Error ? error : String(error));
    });
  }

  /** Sets the outcome, the wait and `more`, then ends the span. */
  private finish(outcome: string, waitedMs: number, more: Attributes, before?: () => void): void {
    this.ended = true;
    safely(() => {
      this.span.setAttributes({ ...more, 'zk_lock.outcome': outcome, 'zk_lock.wait_ms': Math.round(waitedMs * 1000) / 1000 });
      before?.();
    });
    safely(() => this.span.end());
  }
}

/** One hold's `lock.hold` span, ended at release or loss. No method throws but `run`'s `fn`. */
export class HoldTrace {
  private ended = false;

  constructor(
    private readonly otel: OtelApi,
    private readonly span: Span,
  ) {}

  /** Runs `fn` with this span as the active context (work done under the lock nests under it). */
  run<T>(fn: () => T): T {
    const { context, trace } = this.otel;
    const active = safely(() => trace.setSpan(context.active(), this.span));
    return active ? context.with(active, fn) : fn();
  }

  end(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    safely(() =>
      this.span.setAttributes(reason === 'released' ? { 'zk_lock.outcome': 'released' } : { 'zk_lock.outcome': 'lost', 'zk_lock.lost.reason': reason }),
    );
    if (reason !== 'released') safely(() => this.span.setStatus({ code: SPAN_STATUS_ERROR, message: `lost: ${reason}` }));
    safely(() => this.span.end());
  }
}

/** The acquire's span, or undefined when tracing is off (the API absent, or no provider registered). */
export function startAcquireTrace(lock: TracedLock): AcquireTrace | undefined {
  let tracer: Tracer | undefined;
  try {
    tracer = activeTracer();
  } catch {
    return undefined; // a provider that throws: no span
  }
  if (!tracer) return undefined;
  everTraced = true;
  return safely(() => new AcquireTrace(api!, tracer, lock));
}

/** Whether any span was made: until then a lease is not even asked for its hold span. */
export function tracingUsed(): boolean {
  return everTraced;
}
