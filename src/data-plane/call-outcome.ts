// What every metered call leaves behind: its answer counted and timed, its span ended, one log line for every
// 5xx (tollgate's own or the upstream's) and the access log when on; the counts of a capture and of a 402.

import type { CallAgent } from '../identity/call-agent.ts'
import { countAgentRevenue } from '../identity/count-identity.ts'
import type { Logger } from '../observability/logger.ts'
import {
  callsCaptured,
  capturedAtomic,
  httpDuration,
  httpRequests,
  mcpToolCalls,
  mcpToolRevenueAtomic,
  paymentRequired,
  statusClass,
  upstreamErrors,
} from '../observability/metrics.ts'
import type { CallTrace } from './call-trace.ts'
import type { ProxyOutcome } from './proxy.ts'

// Children resolved once: per-request label look-ups would hash and allocate.
const count = {
  '1xx': httpRequests.labels('metered', '1xx'),
  '2xx': httpRequests.labels('metered', '2xx'),
  '3xx': httpRequests.labels('metered', '3xx'),
  '4xx': httpRequests.labels('metered', '4xx'),
  '5xx': httpRequests.labels('metered', '5xx'),
}
const duration = {
  '1xx': httpDuration.labels('metered', '1xx'),
  '2xx': httpDuration.labels('metered', '2xx'),
  '3xx': httpDuration.labels('metered', '3xx'),
  '4xx': httpDuration.labels('metered', '4xx'),
  '5xx': httpDuration.labels('metered', '5xx'),
}
const reasonCounters = new Map<string, ReturnType<typeof paymentRequired.labels>>()

export function count402(reason: string): void {
  let c = reasonCounters.get(reason)
  if (!c) {
    c = paymentRequired.labels(reason)
    reasonCounters.set(reason, c)
  }
  c.inc()
}

/** A capture's counts: calls and revenue, per agent signer and per MCP tool where the call has one. */
export function countCapture(
  chargeAtomic: bigint,
  agent: CallAgent | null,
  signerNames: ReadonlySet<string>,
  toolLabel: string | null,
): void {
  callsCaptured.inc()
  capturedAtomic.inc(Number(chargeAtomic))
  if (agent !== null) countAgentRevenue(signerNames, agent, chargeAtomic)
  if (toolLabel !== null) {
    mcpToolCalls.labels(toolLabel).inc()
    mcpToolRevenueAtomic.labels(toolLabel).inc(Number(chargeAtomic))
  }
}

/** The status a forwarded call answered with: the upstream's, else tollgate's own 502/504, else 499. */
export function statusOf(outcome: ProxyOutcome): number {
  if (outcome.kind === 'responded') return outcome.status
  if (outcome.kind === 'upstream_error') return outcome.status ?? (outcome.code === 'timeout' ? 504 : 502)
  return outcome.status ?? 499
}

/** Why a forwarded call failed (an upstream error is counted), or undefined. */
export function failureOf(outcome: ProxyOutcome): string | undefined {
  if (outcome.kind === 'upstream_error') {
    upstreamErrors.labels(outcome.code).inc()
    return `upstream_${outcome.code}`
  }
  return outcome.kind === 'responded' && outcome.status >= 500 ? 'upstream_status' : undefined
}

/** The call as its answer is recorded. */
export interface AnsweredCall {
  readonly requestId: string
  readonly endpointId: string
  readonly startedMs: number
  readonly trace: CallTrace | null
}

/** Every answer once: metrics, the span, a log line for a 5xx and the access log when on. */
export function recordAnswer(
  logger: Logger,
  call: AnsweredCall,
  status: number,
  reason?: string,
  err?: unknown,
): void {
  const cls = statusClass(status)
  count[cls].inc()
  duration[cls].observe((performance.now() - call.startedMs) / 1000)
  const trace = call.trace
  trace?.finish(status, reason)
  if (status >= 500) {
    // The upstream's own 5xx is its owner's problem (warn); tollgate's 502/503/504 are ours (error).
    logger[reason === 'upstream_status' ? 'warn' : 'error']('metered call failed', {
      request_id: call.requestId,
      endpoint_id: call.endpointId,
      status,
      reason,
      trace_id: trace?.traceId,
      err,
    })
  } else if (logger.access.on && logger.access.sample()) {
    logger.info('access', {
      route: 'metered',
      request_id: call.requestId,
      endpoint_id: call.endpointId,
      status,
      reason,
      duration_ms: Math.round((performance.now() - call.startedMs) * 1000) / 1000,
      trace_id: trace?.traceId,
    })
  }
}
