// A metered call's trace, when tracing is on: its span and the step it is in (verify, claim, upstream). The
// call holds null otherwise, and every step is then one null check: tracing costs nothing when off.
import type { Attributes, Span } from '@opentelemetry/api'
import { endSpan, startChildSpan, startRequestSpan, traceIdOf, tracing } from '../observability/tracing.ts'

export class CallTrace {
  private step: Span | null = null

  private constructor(private readonly span: Span) {}

  /** The call's span, continuing the caller's trace; null when tracing is off. */
  static of(traceparent: string, endpointId: string, requestId: string): CallTrace | null {
    if (!tracing.on) return null
    return new CallTrace(
      startRequestSpan('metered call', traceparent, {
        'tollgate.endpoint_id': endpointId,
        'tollgate.request_id': requestId,
      }),
    )
  }

  /** A step begins (`client`: it calls out, as the upstream step does); returns its span. */
  begin(name: string, attributes?: Attributes, client = false): Span {
    this.step = startChildSpan(this.span, name, attributes, client)
    return this.step
  }

  /** An attribute of the step in progress, if any. */
  note(name: string, value: string | number): void {
    this.step?.setAttribute(name, value)
  }

  /** The step in progress ends, if any. */
  end(status?: number, reason?: string): void {
    if (this.step === null) return
    endSpan(this.step, status, reason)
    this.step = null
  }

  /** A span beside the steps (a capture handed to the writer): the caller ends it with close(). */
  child(name: string): Span {
    return startChildSpan(this.span, name)
  }

  close(span: Span): void {
    endSpan(span)
  }

  /** The call answered (or the client left: 499). */
  finish(status: number, reason?: string): void {
    endSpan(this.span, status, reason)
  }

  get traceId(): string {
    return traceIdOf(this.span)
  }
}
