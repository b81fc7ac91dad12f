// OpenTelemetry traces, exported over OTLP/HTTP (JSON) only when an endpoint is configured. The SDK is
// loaded by import() inside startTracing: with tracing off no SDK module is ever loaded (prom-client loads
// the no-op @opentelemetry/api by itself), and the hot path pays one boolean (`tracing.on`) per step.
// Every helper below assumes tracing.on was checked.
import type { Attributes, Context, Span, Tracer } from '@opentelemetry/api'

type Api = typeof import('@opentelemetry/api')

/** Read by the hot path before any span work: `if (tracing.on) …`. A plain object field, no getter. */
export const tracing = { on: false }

let api: Api | null = null
let tracer: Tracer | null = null
let provider: { forceFlush(): Promise<void>; shutdown(): Promise<void> } | null = null
/** Services sharing this process (tests) share one provider; the last to stop shuts it down. */
let users = 0
let starting: Promise<void> | null = null

export interface TracingSettings {
  /** OTLP/HTTP base URL, e.g. http://collector:4318 (spans go to <url>/v1/traces, as the OTLP spec says). */
  otlpEndpoint: string
  serviceName: string
  /** Share of new traces recorded (0…1); a caller's sampled traceparent is always followed. */
  sampleRatio: number
  /** Milliseconds between exports of the batch processor. */
  exportIntervalMs: number
}

export interface TracingHandle {
  /** Exports what is buffered now (tests). */
  flush(): Promise<void>
  stop(): Promise<void>
}

export async function startTracing(settings: TracingSettings): Promise<TracingHandle> {
  users++
  starting ??= load(settings)
  await starting
  let stopped = false
  return {
    flush: () => provider?.forceFlush() ?? Promise.resolve(),
    async stop() {
      if (stopped) return
      stopped = true
      if (--users > 0) return
      const p = provider
      tracing.on = false
      tracer = null
      provider = null
      starting = null
      api?.context.disable()
      api?.propagation.disable()
      await p?.shutdown()
    },
  }
}

async function load(settings: TracingSettings): Promise<void> {
  const [otel, sdk, hooks, exporterModule, resources, core] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/core'),
  ])
  const exporter = new exporterModule.OTLPTraceExporter({
    url: `${settings.otlpEndpoint.replace(/\/+$/, '')}/v1/traces`,
  })
  const p = new sdk.TracerProvider({
    resource: resources.resourceFromAttributes({ 'service.name': settings.serviceName }),
    sampler: new sdk.ParentBasedSampler({ root: new sdk.TraceIdRatioBasedSampler(settings.sampleRatio) }),
    spanProcessors: [
      new sdk.BatchSpanProcessor({ exporter, scheduledDelayMillis: settings.exportIntervalMs }),
    ],
  })
  // The context manager carries the active span across awaits (API requests, jobs) for child spans and
  // the trace id in log lines. The hot path does not use it: it passes its spans explicitly.
  otel.context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager())
  otel.propagation.setGlobalPropagator(new core.W3CTraceContextPropagator())
  api = otel
  provider = p
  tracer = p.getTracer('tollgate')
  tracing.on = true
}

const headerGetter = {
  keys: (carrier: Record<string, string>) => Object.keys(carrier),
  get: (carrier: Record<string, string>, key: string) => carrier[key],
}

/** The context an incoming request's traceparent names, or the root context. */
function incomingContext(traceparent: string | undefined): Context {
  const root = api!.ROOT_CONTEXT
  if (!traceparent) return root
  return api!.propagation.extract(root, { traceparent }, headerGetter)
}

/** A server span for an incoming request (metered call, API request), continuing the caller's trace. */
export function startRequestSpan(
  name: string,
  traceparent: string | undefined,
  attributes?: Attributes,
): Span {
  return tracer!.startSpan(name, { kind: api!.SpanKind.SERVER, attributes }, incomingContext(traceparent))
}

/** A child of `parent`, passed explicitly (the hot path keeps no async context). */
export function startChildSpan(parent: Span, name: string, attributes?: Attributes, client = false): Span {
  const kind = client ? api!.SpanKind.CLIENT : api!.SpanKind.INTERNAL
  return tracer!.startSpan(name, { kind, attributes }, api!.trace.setSpan(api!.ROOT_CONTEXT, parent))
}

/** A child of the active span (or a root span): jobs, webhook deliveries. */
export function startSpan(name: string, attributes?: Attributes, client = false): Span {
  const kind = client ? api!.SpanKind.CLIENT : api!.SpanKind.INTERNAL
  return tracer!.startSpan(name, { kind, attributes })
}

/** Ends a span with its status and reason; a 5xx, or a reason without a status, marks it failed. */
export function endSpan(span: Span, status?: number, reason?: string): void {
  if (status !== undefined) span.setAttribute('http.response.status_code', status)
  if (reason !== undefined) span.setAttribute('tollgate.reason', reason)
  if (status === undefined ? reason !== undefined : status >= 500) {
    span.setStatus({ code: api!.SpanStatusCode.ERROR, message: reason })
  }
  span.end()
}

/** Runs fn with span active (its awaits and log lines see it). */
export function withSpan<T>(span: Span, fn: () => T): T {
  return api!.context.with(api!.trace.setSpan(api!.context.active(), span), fn)
}

/** Runs fn inside a new span of its own when tracing is on; just runs it otherwise. */
export async function traced<T>(name: string, fn: () => Promise<T>, attributes?: Attributes): Promise<T> {
  if (!tracing.on) return fn()
  const span = startSpan(name, attributes)
  try {
    const result = await withSpan(span, fn)
    endSpan(span)
    return result
  } catch (err) {
    endSpan(span, undefined, (err as Error)?.message ?? String(err))
    throw err
  }
}

/** The W3C traceparent header value naming `span` as the parent. */
export function traceparentOf(span: Span): string {
  const c = span.spanContext()
  return `00-${c.traceId}-${c.spanId}-0${c.traceFlags & 1}`
}

export function traceIdOf(span: Span): string {
  return span.spanContext().traceId
}

/** pino's mixin: the active span's ids on every log line while one is current. pino merges the line's
 * fields into the object returned, so it must be a fresh one each time. */
export function traceLogFields(): object {
  if (!tracing.on) return {}
  const span = api!.trace.getActiveSpan()
  if (span === undefined) return {}
  const c = span.spanContext()
  return { trace_id: c.traceId, span_id: c.spanId }
}
