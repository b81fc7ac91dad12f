// THE hot path, top to bottom: endpoint → proof → verify → claim → proxy → capture or release.
// Everything read from the uWS request is read synchronously (it dies with the callback); onAborted is
// attached before the first await; answers after an await are corked.
import type { Span } from '@opentelemetry/api'
import { ERRORS, type ErrorCode, type ErrorDetails, writeError } from '../errors.ts'
import { newId } from '../ids.ts'
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
  usageCapped,
} from '../observability/metrics.ts'
import {
  endSpan,
  startChildSpan,
  startRequestSpan,
  traceIdOf,
  traceparentOf,
  tracing,
} from '../observability/tracing.ts'
import type { AnswerRewriter, BodyAnswer, BodyPrice, BodyPricing } from '../pricing/body-price.ts'
import { asksForStreamUsage, type Ending, UsageMeter, withStreamUsage } from '../pricing/meter.ts'
import type { UsagePricing, UsageRecord } from '../pricing/model.ts'
import { requestIdFrom } from '../request-id.ts'
import type { SchemeRegistry } from '../schemes/registry.ts'
import type { CallFacts, ClaimOutcome, Payment, Quote, Verdict } from '../schemes/scheme.ts'
import { cacheCounters } from './caches.ts'
import { challengeBody, quoteExpiry, v2Header } from './challenge.ts'
import { CORS_HEADERS, CORS_PAIRS } from './cors.ts'
import { type EndpointCache, type LiveEndpoint, loadEndpoint, NOT_FOUND } from './endpoint-cache.ts'
import { parseProof } from './proof.ts'
import {
  type AbortState,
  createRequestBody,
  type ForwardRequest,
  isConfinedSubPath,
  type ProxyHooks,
  type ProxyOutcome,
  proxy,
  type RequestBody,
  type UpstreamDispatcher,
} from './proxy.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'

export interface MeteredDeps {
  endpoints: EndpointCache
  /** The ways to pay (src/schemes/): what a 402 offers, who verifies a payment, claims, settles, receipts. */
  schemes: SchemeRegistry
  dispatcher: UpstreamDispatcher
  logger: Logger
  settings: {
    quoteTtlMs: number
    maxBufferedBodyBytes: number
  }
}

const JSON_TYPE = 'application/json; charset=utf-8'
// Every answer of a metered URL carries CORS (cors.ts): a browser agent reads the 402 and the receipt.
const RETRY_AFTER_1 = ['retry-after', '1', ...CORS_HEADERS]
const RETRY_AFTER_2 = ['retry-after', '2', ...CORS_HEADERS]
const ACAO = CORS_PAIRS[0]!
const EXPOSE = CORS_PAIRS[1]!

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
function count402(reason: string) {
  let c = reasonCounters.get(reason)
  if (!c) {
    c = paymentRequired.labels(reason)
    reasonCounters.set(reason, c)
  }
  c.inc()
}
function observe(status: number, startedMs: number) {
  const cls = statusClass(status)
  count[cls].inc()
  duration[cls].observe((performance.now() - startedMs) / 1000)
}

export function createMeteredRoute(deps: MeteredDeps) {
  return function metered(res: HttpResponse, req: HttpRequest): void {
    new MeteredCall(deps, res, req).start()
  }
}

/**
 * One metered request. A plain object with its steps on the prototype: the 402 path allocates this and
 * nothing else (no per-request closures), and the object doubles as the proxy's hooks.
 */
class MeteredCall implements ProxyHooks {
  readonly startedMs = performance.now()
  readonly abort: AbortState = { aborted: false, onAbort: null }
  readonly endpointId: string
  /** The payment header, or a payment the body carried (the x402 MCP transport's params._meta). */
  paymentHeader: string
  /** The caller's x-request-id when sane, else a new one: on every answer and every log line. */
  readonly requestId: string
  /** Only a paid request needs the rest of the request; the 402 path reads nothing more. */
  readonly forward: ForwardRequest | null = null
  readonly body: RequestBody | null = null
  readonly method: string
  /** The part after /m/<id>, without the query: with the method, it selects the price. */
  readonly subPath: string
  endpoint: LiveEndpoint | null = null
  /** The price this request pays, with its 402. */
  quote: Quote | null = null
  payment: Payment | null = null
  /** Given to every paid answer from its first byte; the call's receipt is read at /receipts/<id>. */
  receiptId: string | null = null
  /** Usage pricing: measures the answer as it streams past (null for fixed prices). */
  meter: UsageMeter | null = null
  /** How this request is priced: the endpoint's, or what its body asked for (an MCP tool). */
  usage: UsagePricing | null = null
  pricingModel: 'fixed' | 'rules' | 'usage' = 'fixed'
  /** What a body-priced call bought (a tool name) for its call row, and its metric label; else null. */
  label: string | null = null
  metricLabel: string | null = null
  /** The body's own way to refuse (an in-band PaymentRequired) instead of HTTP 402; and its receipt. */
  paymentRequired: ((paymentRequiredJson: string) => BodyAnswer) | null = null
  receiptInAnswer: ((settlementJson: string) => AnswerRewriter) | null = null
  rewriter: AnswerRewriter | null = null
  resizes = false
  /** The endpoint as the cache held it when the request came in (undefined: not cached). */
  readonly cached: LiveEndpoint | typeof NOT_FOUND | undefined
  /** The upstream's status once it answered below 500, while a usage-priced call's charge is measured. */
  servedStatus = 0
  captured = false
  /** Hostile input: the sub-path could leave the endpoint's base path. */
  escapingPath = false
  /** Tracing only (null when off): the call's span and its current step (verify, claim, upstream). */
  span: Span | null = null
  step: Span | null = null

  constructor(
    readonly ctx: MeteredDeps,
    readonly res: HttpResponse,
    req: HttpRequest,
  ) {
    const abort = this.abort
    res.onAborted(() => {
      abort.aborted = true
      abort.onAbort?.()
    })
    this.endpointId = req.getParameter(0) ?? ''
    this.paymentHeader = req.getHeader('x-payment') || req.getHeader('payment-signature')
    this.requestId = requestIdFrom(req.getHeader('x-request-id'))
    this.method = req.getCaseSensitiveMethod().toUpperCase()
    this.subPath = req.getUrl().slice(3 + this.endpointId.length)
    const cached = ctx.endpoints.get(this.endpointId)
    this.cached = cached
    if (tracing.on) {
      this.span = startRequestSpan('metered call', req.getHeader('traceparent'), {
        'tollgate.endpoint_id': this.endpointId,
        'tollgate.request_id': this.requestId,
      })
    }
    // A paid request is forwarded; so may be an unpaid one whose price is read from its body (an MCP
    // method that is free), and one to an endpoint not cached yet (the request dies with this callback).
    if (this.paymentHeader || cached === undefined || (cached !== NOT_FOUND && cached.bodyPricing !== null)) {
      const query = req.getQuery()
      const headers: Array<[string, string]> = []
      req.forEach((k, v) => {
        headers.push([k, v])
      })
      const subPath = this.subPath
      // --- hostile input: a path that could leave the base path is refused in start(), before the proof
      // is parsed, verified or claimed. Only paid requests are forwarded, so only they are checked.
      this.escapingPath = !isConfinedSubPath(subPath)
      this.forward = {
        method: this.method,
        pathAndQuery: subPath + (query ? `?${query}` : ''),
        headers,
        remoteAddress: Buffer.from(res.getRemoteAddressAsText()).toString(),
        requestId: this.requestId,
        traceparent: null,
      }
      // onData must be attached before the handler returns, or the body is lost.
      this.body = createRequestBody(res, ctx.settings.maxBufferedBodyBytes)
    }
  }

  start(): void {
    // --- hostile input: nothing is looked up, verified or claimed for an escaping path.
    if (this.escapingPath) return this.respondError('invalid_path')
    const cached = this.cached
    if (cached !== undefined) {
      cacheCounters.endpointHit.inc()
      this.withEndpoint(cached)
      return
    }
    cacheCounters.endpointMiss.inc()
    loadEndpoint(this.ctx.endpoints, this.endpointId).then(
      (entry) => this.withEndpoint(entry),
      (err) =>
        this.respondUnavailable(
          'the endpoint could not be loaded; retry shortly',
          'endpoint_lookup_failed',
          err,
        ),
    )
  }

  withEndpoint(entry: LiveEndpoint | typeof NOT_FOUND): void {
    if (this.abort.aborted) return this.finishAborted()
    if (entry === NOT_FOUND || !entry.active)
      return this.respondError('endpoint_not_found', {
        message: `no active metered endpoint ${this.endpointId}`,
      })
    this.endpoint = entry
    if (entry.bodyPricing !== null) return this.priceByBody(entry.bodyPricing)
    this.usage = entry.usage
    this.pricingModel = entry.pricingModel
    this.withQuote(entry.quoteFor(this.method, this.subPath))
  }

  /** The price is in the body (an MCP endpoint): read it whole, bounded, before a 402 or a forward. */
  priceByBody(pricing: BodyPricing): void {
    // Not read: the endpoint became body-priced after this request was taken (a change landed between).
    const body = this.body
    if (body === null) return this.respondUnavailable('the endpoint changed; retry', 'endpoint_changed')
    body.whole(pricing.maxBytes).then((whole) => {
      if (this.abort.aborted) return this.finishAborted()
      if (whole === 'too_large')
        return this.respondError('body_too_large', {
          message: `the JSON-RPC body is larger than ${pricing.maxBytes} bytes`,
        })
      const price = pricing.price(this.method, whole)
      if (price.ok === 'free') {
        if (price.rewriter !== undefined) this.rewriter = price.rewriter()
        return this.forwardUnpaid()
      }
      if (price.ok === 'refused') return this.respondRefused(price)
      this.usage = price.usage
      this.pricingModel = price.model
      this.label = price.label
      this.metricLabel = price.metricLabel
      this.paymentRequired = price.paymentRequired
      if (!this.paymentHeader && price.payment !== null) {
        this.paymentHeader = price.payment
        this.receiptInAnswer = price.receiptInAnswer
      }
      const forwardBody = price.forwardBody
      // The payment read from the body is not forwarded (the MCP server has no use for it).
      if (forwardBody !== null && body.rewrite(() => forwardBody))
        setContentLength(this.forward!.headers, body.length)
      this.withQuote(price.quote)
    })
  }

  /** Free by the endpoint's own terms (a protocol method, a free tool): forwarded as is, nothing booked. */
  forwardUnpaid(): void {
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, this.endpoint!.target, this.abort, this)
  }

  withQuote(quote: Quote): void {
    const entry = this.endpoint!
    this.quote = quote
    if (!this.paymentHeader) return this.respond402('payment_required')
    // The scheme that reads the payment verifies it against this request's price (src/schemes/).
    if (this.span !== null) this.step = startChildSpan(this.span, 'verify')
    const verdict = this.ctx.schemes.verify(parseProof(this.paymentHeader), {
      endpoint: { id: entry.id, accountId: entry.accountId, timeoutMs: entry.target.timeoutMs },
      quote,
      nowMs: Date.now(),
    })
    if (verdict instanceof Promise) verdict.then((v) => this.withVerdict(v))
    else this.withVerdict(verdict)
  }

  withVerdict(verdict: Verdict): void {
    if (this.step !== null) this.endStep(undefined, verdict.ok === true ? undefined : 'refused')
    if (this.abort.aborted) {
      // Verified but never forwarded: the scheme lets go of what it holds.
      if (verdict.ok === true) verdict.payment.drop()
      return this.finishAborted()
    }
    switch (verdict.ok) {
      case false:
        return this.respond402(verdict.reason, verdict.retryAfterMs, verdict.requiredHeader)
      case 'unavailable':
        return this.respondUnavailable(verdict.message, verdict.reason, verdict.err)
      case 'error':
        return this.respondError(verdict.code, undefined, verdict.headers)
      case 'answered':
        return this.respondAnswered(verdict)
    }
    const payment = verdict.payment
    this.payment = payment
    if (this.span !== null) this.step = startChildSpan(this.span, 'claim')
    const claimed = payment.claim()
    if (typeof claimed === 'string') return this.withClaim(claimed)
    claimed.then(
      (outcome) => this.withClaim(outcome),
      (err) => {
        if (this.step !== null) this.endStep(undefined, 'claim_failed')
        this.respondUnavailable(
          'the payment could not be recorded; retry shortly with the same proof',
          'claim_failed',
          err,
        )
      },
    )
  }

  withClaim(outcome: ClaimOutcome): void {
    const payment = this.payment!
    if (this.step !== null) {
      this.step.setAttribute('tollgate.claim', outcome)
      this.endStep()
    }
    if (outcome === 'used') {
      if (this.abort.aborted) return this.finishAborted()
      return this.respond402('proof_already_used')
    }
    if (outcome === 'busy') {
      // In flight in another request right now. Not a 402: a client must not pay again for it.
      if (this.abort.aborted) return this.finishAborted()
      return this.respondError('payment_in_progress', undefined, RETRY_AFTER_1)
    }
    // The client may have left while the claim was written: nothing was forwarded, free the payment.
    if (this.abort.aborted) {
      // fail(), not release(): the response is gone and must not be touched.
      this.body?.fail()
      this.finishAborted()
      return payment.release()
    }
    if (this.span !== null) {
      this.step = startChildSpan(
        this.span,
        'upstream',
        { 'server.address': this.endpoint!.target.host },
        true,
      )
      this.forward!.traceparent = traceparentOf(this.step)
    }
    this.receiptId = newId('rcpt')
    if (this.usage !== null) this.startMeter()
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, this.endpoint!.target, this.abort, this)
  }

  /**
   * A usage-priced call is measured on its answer. An OpenAI-style stream that did not ask for its usage
   * asks for it (the meter takes the extra event out again): only a body complete by now can be changed.
   */
  startMeter(): void {
    const endpoint = this.endpoint!
    const usage = this.usage!
    const forward = this.forward!
    let injected = false
    if (usage.unit === 'tokens' && asksForStreamUsage(endpoint.target.basePath + forward.pathAndQuery)) {
      injected = this.body!.rewrite(withStreamUsage)
      if (injected) setContentLength(forward.headers, this.body!.length)
    }
    this.meter = new UsageMeter(usage, performance.now(), injected)
  }

  /** ProxyHooks: the upstream's status is known, nothing is written yet. */
  onResponseHead(status: number, head: Buffer[]): Array<[string, string]> {
    const payment = this.payment
    const meter = this.meter
    if (this.step !== null) this.step.setAttribute('http.response.status_code', status)
    if (payment === null) {
      if (this.rewriter !== null) {
        this.rewriter.onHead(head)
        this.resizes = true
      }
      return [['x-request-id', this.requestId], ACAO, EXPOSE]
    }
    if (meter !== null && status < 500) {
      // Usage pricing: charged when the answer ends, for what it measured.
      meter.onHead(head)
      this.servedStatus = status
    } else if (status < 500) {
      // Captured once the upstream answered below 500, even if the client leaves mid-body.
      // The capture is queued here and group-committed by the writer: its span covers the hand-over.
      const captureSpan = this.span === null ? null : startChildSpan(this.span, 'capture')
      this.captured = true
      this.capture(status, payment.coversAtomic, null)
      if (captureSpan !== null) endSpan(captureSpan)
    }
    // tollgate answers CORS for metered URLs: the upstream's own allow-origin is dropped (proxy.ts).
    const receipt = payment.receipt(status < 500)
    if (this.receiptInAnswer !== null && receipt !== null && status < 500) {
      // Paid in the body: the receipt goes back in the body too (x402 MCP transport).
      this.rewriter = this.receiptInAnswer(Buffer.from(receipt[1], 'base64').toString('utf8'))
      this.rewriter.onHead(head)
      this.resizes = true
    }
    const ids: Array<[string, string]> = [
      ['x-request-id', this.requestId],
      ['x-receipt-id', this.receiptId!],
      ACAO,
      EXPOSE,
    ]
    if (receipt !== null) ids.unshift(receipt)
    return ids
  }

  /** ProxyHooks: a body chunk on its way out (a usage meter reads it, and may take an event out). */
  onResponseData(chunk: Buffer): Buffer {
    const out = this.meter === null ? chunk : this.meter.onData(chunk)
    return this.rewriter === null ? out : this.rewriter.onData(out)
  }

  onResponseEnd(): Buffer | null {
    const held = this.meter === null ? null : this.meter.onEnd()
    const rewriter = this.rewriter
    if (rewriter === null) return held
    const last = held === null ? null : rewriter.onData(held)
    const rest = rewriter.onEnd()
    if (last === null || last.length === 0) return rest
    return rest === null ? last : Buffer.concat([last, rest])
  }

  capture(status: number, chargeAtomic: bigint, usage: UsageRecord | null): void {
    this.captured = true
    this.payment!.capture({
      ...this.callFacts(),
      callId: newId('call'),
      status,
      chargeAtomic,
      pricingModel: this.pricingModel,
      usage,
      receiptId: this.receiptId,
      tool: this.label,
    })
    callsCaptured.inc()
    capturedAtomic.inc(Number(chargeAtomic))
    if (this.metricLabel !== null) {
      mcpToolCalls.labels(this.metricLabel).inc()
      mcpToolRevenueAtomic.labels(this.metricLabel).inc(Number(chargeAtomic))
    }
  }

  /**
   * A usage-priced call that was served ends here: the client got the whole answer, left mid-stream
   * (charged for what was delivered), or the upstream broke off (charged nothing). Never above what the
   * payment covers, nor above the ceiling (counted when the measure went past it).
   */
  captureUsage(outcome: ProxyOutcome): void {
    const ending: Ending =
      outcome.kind === 'responded'
        ? 'complete'
        : outcome.kind === 'client_aborted'
          ? 'client_aborted'
          : 'upstream_failed'
    const usage = this.meter!.finish(ending, performance.now())
    if (usage.capped) usageCapped.inc()
    const covers = this.payment!.coversAtomic
    let charge = usage.chargeAtomic < covers ? usage.chargeAtomic : covers
    if (ending === 'upstream_failed') charge = 0n
    usage.chargeAtomic = charge
    this.capture(this.servedStatus, charge, usage)
  }

  callFacts(): CallFacts {
    const endpoint = this.endpoint!
    return {
      endpointId: endpoint.id,
      accountId: endpoint.accountId,
      ownerWallet: endpoint.ownerWallet,
      method: this.method,
    }
  }

  /** ProxyHooks: the final outcome, exactly once. */
  onDone(outcome: ProxyOutcome): void {
    // A proof serves at most once: it is released for a retry only when the upstream certainly did not serve
    // it (it could not be reached, or answered 5xx; see upstreamFailed). A client that left while the upstream was working may
    // have been served: that claim stays held, is in doubt once its lease runs out, and is refunded at the
    // end of its window rather than served again. What a call in doubt costs is its scheme's to say (Payment.doubt).
    const payment = this.payment
    if (payment !== null) {
      if (this.servedStatus !== 0) this.captureUsage(outcome)
      if (!this.captured && upstreamFailed(outcome)) payment.release()
      else if (!this.captured) payment.doubt(this.callFacts())
    }
    let reason: string | undefined
    if (outcome.kind === 'upstream_error') {
      upstreamErrors.labels(outcome.code).inc()
      reason = `upstream_${outcome.code}`
    } else if (outcome.kind === 'responded' && outcome.status >= 500) reason = 'upstream_status'
    const status =
      outcome.kind === 'responded'
        ? outcome.status
        : outcome.kind === 'upstream_error'
          ? (outcome.status ?? (outcome.code === 'timeout' ? 504 : 502))
          : (outcome.status ?? 499)
    if (this.step !== null) this.endStep(status, reason)
    this.finish(status, reason)
  }

  /**
   * Every answer ends here once: metrics, the call's span, the access log when on, and one log line for
   * every 5xx (tollgate's own or the upstream's) with the request id, endpoint id and reason.
   */
  finish(status: number, reason?: string, err?: unknown): void {
    observe(status, this.startedMs)
    const span = this.span
    if (span !== null) endSpan(span, status, reason)
    const logger = this.ctx.logger
    if (status >= 500) {
      // The upstream's own 5xx is its owner's problem (warn); tollgate's 502/503/504 are ours (error).
      logger[reason === 'upstream_status' ? 'warn' : 'error']('metered call failed', {
        request_id: this.requestId,
        endpoint_id: this.endpointId,
        status,
        reason,
        trace_id: span === null ? undefined : traceIdOf(span),
        err,
      })
    } else if (logger.access.on && logger.access.sample()) {
      logger.info('access', {
        route: 'metered',
        request_id: this.requestId,
        endpoint_id: this.endpointId,
        status,
        reason,
        duration_ms: Math.round((performance.now() - this.startedMs) * 1000) / 1000,
        trace_id: span === null ? undefined : traceIdOf(span),
      })
    }
  }

  /** The client left before an answer: only the span needs closing (the proxy reports its own aborts). */
  finishAborted(): void {
    if (this.span !== null) endSpan(this.span, 499, 'client_aborted')
  }

  endStep(status?: number, reason?: string): void {
    endSpan(this.step!, status, reason)
    this.step = null
  }

  respond402(reason: string, retryAfterMs?: number, requiredHeader?: string): void {
    if (this.paymentRequired !== null) {
      // Answered in-band (x402 MCP transport): the PaymentRequired the v2 header would carry, in the body.
      count402(reason)
      const required = `{"x402Version":2,"error":"${reason}"${this.quote!.challenge.v2Rest}`
      return this.respondRefused({ ok: 'refused', ...this.paymentRequired(required) }, reason)
    }
    // A body we will not forward may have paused the client's socket: let it go.
    this.body?.release()
    count402(reason)
    this.finish(402, reason)
    const challenge = this.quote!.challenge
    const requestId = this.requestId
    const text = challengeBody(challenge, reason, quoteExpiry(this.ctx.settings.quoteTtlMs), requestId)
    const res = this.res
    res.cork(() => {
      res.writeStatus('402 Payment Required').writeHeader('content-type', JSON_TYPE)
      res.writeHeader('x-request-id', requestId)
      // The same URL answers differently once paid: no cache may keep a 402 (nor the reason in it).
      res.writeHeader('cache-control', 'no-store')
      res.writeHeader('access-control-allow-origin', '*')
      res.writeHeader('access-control-expose-headers', EXPOSE[1])
      res.writeHeader('payment-required', requiredHeader ?? v2Header(challenge, reason))
      if (retryAfterMs !== undefined)
        res.writeHeader('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
      res.end(text)
    })
  }

  /** The scheme answered the request itself (a channel refund): nothing was forwarded. */
  respondAnswered(answer: Extract<Verdict, { ok: 'answered' }>): void {
    this.body?.release()
    this.finish(Number.parseInt(answer.status, 10), answer.reason)
    const res = this.res
    res.cork(() => {
      res.writeStatus(answer.status)
      res.writeHeader('x-request-id', this.requestId)
      for (const [name, value] of answer.headers) res.writeHeader(name, value)
      res.end(answer.body)
    })
  }

  /** The endpoint refused the body before anything was forwarded (an MCP body that is not JSON-RPC). */
  respondRefused(refusal: Extract<BodyPrice, { ok: 'refused' }>, reason = 'invalid_body'): void {
    this.body?.release()
    this.finish(Number.parseInt(refusal.status, 10), reason)
    const res = this.res
    const requestId = this.requestId
    res.cork(() => {
      res.writeStatus(refusal.status).writeHeader('content-type', refusal.contentType)
      res.writeHeader('x-request-id', requestId)
      res.writeHeader('access-control-allow-origin', '*')
      res.end(refusal.body)
    })
  }

  /** An error answer from the registry (src/errors.ts); logged by finish() when it is a 5xx. */
  respondError(
    code: ErrorCode,
    details?: ErrorDetails,
    headers?: readonly string[],
    reason?: string,
    err?: unknown,
  ): void {
    this.body?.release()
    this.finish(ERRORS[code].status, reason ?? code, err)
    const res = this.res
    const requestId = this.requestId
    res.cork(() => {
      writeError(res, code, requestId, details, headers ?? CORS_HEADERS)
    })
  }

  respondUnavailable(message: string, reason: string, err?: unknown): void {
    if (this.abort.aborted) {
      this.ctx.logger.error('metered call failed after the client left', {
        request_id: this.requestId,
        endpoint_id: this.endpointId,
        reason,
        err,
      })
      return this.finishAborted()
    }
    this.respondError('verification_unavailable', { message }, RETRY_AFTER_2, reason, err)
  }
}

/**
 * Whether the upstream certainly did not serve the call, so its proof may be retried: it answered 5xx, or the
 * request never reached it (refused, unreachable, no connection in time, reset before an answer: a keep-alive
 * connection closed under the request is far more common than an upstream that worked and then reset).
 * A timeout waiting for the head is not: the request went out and the work may be done, so the claim stays
 * held, goes in doubt, and is refunded (tx) or voided (x402) at the end of its window, never served again.
 */
function upstreamFailed(outcome: ProxyOutcome): boolean {
  if (outcome.kind === 'upstream_error') {
    if (outcome.status !== null) return outcome.status >= 500
    return outcome.code !== 'timeout'
  }
  return outcome.status !== null && outcome.status >= 500
}

/** The forwarded content-length after the body was rewritten. */
function setContentLength(headers: Array<[string, string]>, length: number): void {
  for (const h of headers) if (h[0] === 'content-length') h[1] = String(length)
}
