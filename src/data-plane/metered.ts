// THE hot path, top to bottom: endpoint → proof → verify → claim → proxy → capture or release.
// Everything read from the uWS request is read synchronously (it dies with the callback); onAborted is
// attached before the first await; answers after an await are corked.
import type { Span } from '@opentelemetry/api'
import type { LRUCache } from 'lru-cache'
import type { BatchWriter } from '../books/batch-writer.ts'
import type { VoucherCall } from '../books/channels.ts'
import { type ClaimResult, releaseClaim } from '../books/claims.ts'
import type { Sql } from '../db/sql.ts'
import { ERRORS, type ErrorCode, type ErrorDetails, writeError } from '../errors.ts'
import { newId } from '../ids.ts'
import { splitOwnerShare } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import {
  callsCaptured,
  capturedAtomic,
  claimReleases,
  httpDuration,
  httpRequests,
  paymentRequired,
  statusClass,
  upstreamErrors,
} from '../observability/metrics.ts'
import {
  endSpan,
  startChildSpan,
  startRequestSpan,
  traceIdOf,
  traceparentOf,
  tracing,
} from '../observability/tracing.ts'
import { requestIdFrom } from '../request-id.ts'
import { matchAccepted } from './accepted-match.ts'
import type { ProofEdge } from './app.ts'
import {
  BATCH_ERR,
  type BatchDeps,
  type BatchOutcome,
  type BatchVerified,
  batchRequiredHeader,
  decideBatch,
  parseBatchPayment,
} from './batch-voucher.ts'
import { cacheCounters } from './caches.ts'
import { challengeBody, quoteExpiry, v2Header } from './challenge.ts'
import { CORS_HEADERS, CORS_PAIRS } from './cors.ts'
import {
  type EndpointCache,
  exactAmountAccepted,
  type LiveEndpoint,
  loadEndpoint,
  minimumAcceptedAtomic,
  NOT_FOUND,
} from './endpoint-cache.ts'
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
import { paymentReceipt } from './receipt.ts'
import type { SettlementThrottle } from './settlement-throttle.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'
import type { Verifier, VerifyResult } from './verifier.ts'

type VerifiedProof = Extract<VerifyResult, { ok: true }> | BatchVerified

export interface MeteredDeps {
  /** Rate limits: who the client is, and the charge for a proof that did not pay; absent in some tests. */
  edge?: ProofEdge
  sql: Sql
  endpoints: EndpointCache
  verifier: Verifier
  usedProofs: LRUCache<string, true>
  /** Claims and captures, group-committed together (src/books/batch-writer.ts). */
  books: BatchWriter
  dispatcher: UpstreamDispatcher
  logger: Logger
  /** x402 intake throttle (settlement room): read synchronously, set by its own timer. */
  settlementThrottle?: SettlementThrottle
  /** x402 batch-settlement (issue 12): channels and vouchers; absent = not offered. */
  batch?: BatchDeps
  settings: {
    retryWindowMs: number
    quoteTtlMs: number
    ownerShareBps: number
    maxBufferedBodyBytes: number
    /** Network name in the v1 x-payment-response receipt. */
    network: string
    /** CAIP-2 network in the v2 PAYMENT-RESPONSE receipt. */
    caip2: string
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

/** What the route shares across requests: dependencies and the releases still being written. */
interface MeteredContext extends MeteredDeps {
  /** Releases of failed calls still being written, by proof: a quick retry waits for its own release. */
  pendingReleases: Map<string, Promise<void>>
}

export function createMeteredRoute(deps: MeteredDeps) {
  const ctx: MeteredContext = { ...deps, pendingReleases: new Map() }
  return function metered(res: HttpResponse, req: HttpRequest): void {
    new MeteredCall(ctx, res, req).start()
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
  readonly paymentHeader: string
  /** The caller's x-request-id when sane, else a new one: on every answer and every log line. */
  readonly requestId: string
  /** Only a paid request needs the rest of the request; the 402 path reads nothing more. */
  readonly forward: ForwardRequest | null = null
  readonly body: RequestBody | null = null
  endpoint: LiveEndpoint | null = null
  paid: VerifiedProof | null = null
  /** The claim attempt this request holds (its release names it). */
  attempt = 0
  captured = false
  /** Hostile input (issue 9): the sub-path could leave the endpoint's base path. */
  escapingPath = false
  /** The client's rate-limit key, read only when a proof came (its chain look-ups and refusals count). */
  client = ''
  /** Tracing only (null when off): the call's span and its current step (verify, claim, upstream). */
  span: Span | null = null
  step: Span | null = null

  constructor(
    readonly ctx: MeteredContext,
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
    if (tracing.on) {
      this.span = startRequestSpan('metered call', req.getHeader('traceparent'), {
        'tollgate.endpoint_id': this.endpointId,
        'tollgate.request_id': this.requestId,
      })
    }
    if (this.paymentHeader) {
      if (ctx.edge !== undefined) this.client = ctx.edge.clientKey(res, req)
      const query = req.getQuery()
      const headers: Array<[string, string]> = []
      req.forEach((k, v) => {
        headers.push([k, v])
      })
      const subPath = req.getUrl().slice(3 + this.endpointId.length)
      // --- hostile input: a path that could leave the base path is refused in start(), before the proof
      // is parsed, verified or claimed. Only paid requests are forwarded, so only they are checked.
      this.escapingPath = !isConfinedSubPath(subPath)
      this.forward = {
        method: req.getCaseSensitiveMethod().toUpperCase(),
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
    const cached = this.ctx.endpoints.get(this.endpointId)
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
    if (entry === NOT_FOUND || !entry.active) {
      if (this.paymentHeader) this.ctx.edge?.proofRefused(this.client)
      return this.respondError('endpoint_not_found', {
        message: `no active metered endpoint ${this.endpointId}`,
      })
    }
    this.endpoint = entry
    if (!this.paymentHeader) return this.respond402('payment_required')
    const proof = parseProof(this.paymentHeader)
    // --- x402 batch-settlement (issue 12): its own checks (src/data-plane/batch-voucher.ts), then the claim path.
    if (proof.kind === 'x402' && entry.batch && this.ctx.batch) {
      const batch = parseBatchPayment(proof.payload)
      if (batch === 'invalid') return this.respond402(BATCH_ERR.payload)
      if (batch !== null) {
        decideBatch(this.ctx.batch, batch, entry.priceAtomic).then(
          (outcome) => this.withBatch(outcome),
          (err) =>
            this.respondUnavailable('the channel could not be checked; retry shortly', 'batch_failed', err),
        )
        return
      }
    }
    // ---
    // A proof seen spent on this instance is refused without a query.
    if (proof.kind === 'tx' && this.ctx.usedProofs.has(proof.key)) {
      cacheCounters.usedHit.inc()
      return this.respond402('proof_already_used')
    }
    // ---- x402 intake throttle (settlement backlog): refused before verifying or claiming anything. ----
    const throttle = this.ctx.settlementThrottle
    if (proof.kind === 'x402' && throttle?.engaged) {
      return this.respondError('settlement_backlog', undefined, [
        'retry-after',
        String(throttle.retryAfterS),
        ...CORS_HEADERS,
      ])
    }
    // ----
    // A v2 payload pays the terms it names in `accepted`: they must be ours (and the amount exactly the
    // price), checked before anything costs an RPC.
    if (proof.kind === 'x402' && proof.version === 2) {
      const mismatch = matchAccepted(entry, proof.payload, Date.now())
      if (mismatch !== null) return this.respond402(mismatch)
    }
    if (this.span !== null) this.step = startChildSpan(this.span, 'verify')
    const verified = this.ctx.verifier.verify(proof, this.client)
    if (verified instanceof Promise) verified.then((r) => this.withVerified(r))
    else this.withVerified(verified)
  }

  /**
   * issue 12: a batch-settlement payment decided. An accepted voucher was accepted once, in memory, by the
   * channel's lease (no claim round trip: its call is written with the voucher after it is served), so it
   * goes straight upstream.
   */
  withBatch(outcome: BatchOutcome): void {
    if (this.abort.aborted) {
      // Accepted but never forwarded: the same voucher may come again.
      if (outcome.ok === true) this.ctx.batch!.leases.released(outcome.lease, outcome.cumulative)
      return this.finishAborted()
    }
    if (outcome.ok === true) {
      this.paid = outcome
      return this.withClaim({ outcome: 'won', attempt: 0 })
    }
    if (outcome.ok === false) {
      const header = batchRequiredHeader(
        v2Header(this.endpoint!.challenge, outcome.reason),
        outcome.reason,
        outcome.channel,
      )
      return this.respond402(outcome.reason, undefined, header)
    }
    // A refund: answered here, nothing forwarded.
    this.body?.release()
    this.finish(200, 'batch_refund')
    const res = this.res
    res.cork(() => {
      res.writeStatus('200 OK').writeHeader('content-type', JSON_TYPE)
      res.writeHeader('x-request-id', this.requestId)
      res.writeHeader('payment-response', outcome.receipt)
      res.end(outcome.body)
    })
  }

  withVerified(result: VerifyResult | BatchVerified): void {
    if (this.step !== null) this.endStep(undefined, result.ok ? undefined : result.reason)
    if (this.abort.aborted) return this.finishAborted()
    const endpoint = this.endpoint!
    if (!result.ok) {
      if (result.reason === 'rpc_unavailable') {
        return this.respondUnavailable(
          'the chain could not be reached to verify the payment; retry shortly',
          'rpc_unavailable',
        )
      }
      if (result.reason === 'too_many_lookups') {
        const message = 'too many payments from this address are being verified at once; retry after one ends'
        return this.respondError('rate_limited', { message }, RETRY_AFTER_1)
      }
      return this.respond402(result.reason, result.retryAfterMs)
    }
    const nowMs = Date.now()
    if (result.valueAtomic < minimumAcceptedAtomic(endpoint, nowMs)) return this.respond402('underpaid')
    // `exact` means exact: an authorization for more than the price is refused too (nothing moved yet).
    if (result.kind === 'eip3009' && !exactAmountAccepted(endpoint, result.valueAtomic, nowMs))
      return this.respond402('wrong_amount')
    // x402 proofs get their key from the verifier: the spent-proof check for them happens here.
    if (result.kind !== 'tx' && this.ctx.usedProofs.has(result.proofKey))
      return this.respond402('proof_already_used')
    // A retry right after a failure on this instance waits for that failure's release to be written.
    const releasing = this.ctx.pendingReleases.get(result.proofKey)
    if (releasing) {
      releasing.then(() => this.withVerified(result))
      return
    }
    this.paid = result
    if (this.span !== null) this.step = startChildSpan(this.span, 'claim')
    this.ctx.books
      .claim({
        proofKey: result.proofKey,
        kind: result.kind,
        targetType: 'call',
        targetId: endpoint.id,
        accountId: endpoint.accountId,
        payer: result.payer,
        amountAtomic: result.valueAtomic,
        retryWindowMs: this.ctx.settings.retryWindowMs,
        leaseMs: endpoint.target.timeoutMs + 5_000,
        authorization: result.kind === 'eip3009' ? result.authorization : null,
        proofAtMs: result.kind === 'tx' ? result.timestampMs : null,
      })
      .then(
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

  withClaim(result: ClaimResult): void {
    const paid = this.paid!
    const outcome = result.outcome
    if (this.step !== null) {
      this.step.setAttribute('tollgate.claim', outcome)
      this.endStep()
    }
    if (outcome === 'used') {
      this.ctx.usedProofs.set(paid.proofKey, true)
      if (this.abort.aborted) return this.finishAborted()
      return this.respond402('proof_already_used')
    }
    if (outcome === 'busy') {
      // In flight in another request right now. Not a 402: a client must not pay again for it.
      if (this.abort.aborted) return this.finishAborted()
      return this.respondError('payment_in_progress', undefined, RETRY_AFTER_1)
    }
    this.attempt = result.attempt
    // The client may have left while the claim was written: nothing was forwarded, free the proof.
    if (this.abort.aborted) {
      // fail(), not release(): the response is gone and must not be touched.
      this.body?.fail()
      this.finishAborted()
      return this.release()
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
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, this.endpoint!.target, this.abort, this)
  }

  /** ProxyHooks: the upstream's status is known, nothing is written yet. */
  onResponseHead(status: number): Array<[string, string]> {
    const paid = this.paid!
    const endpoint = this.endpoint!
    const { settings, books } = this.ctx
    if (this.step !== null) this.step.setAttribute('http.response.status_code', status)
    // issue 12: a voucher's call is written by its lease, with the voucher (src/data-plane/voucher-leases.ts).
    if (paid.kind === 'batch') {
      if (status >= 500) return [['x-request-id', this.requestId], ACAO, EXPOSE]
      this.captured = true
      this.ctx.batch!.leases.served(paid.lease, paid.cumulative, this.voucherCall(paid, status))
      callsCaptured.inc()
      capturedAtomic.inc(Number(paid.valueAtomic))
      return [['payment-response', paid.receipt], ['x-request-id', this.requestId], ACAO, EXPOSE]
    }
    // Captured once the upstream answered below 500, even if the client leaves mid-body.
    if (status < 500) {
      // The capture is queued here and group-committed by the writer: its span covers the hand-over.
      const captureSpan = this.span === null ? null : startChildSpan(this.span, 'capture')
      this.captured = true
      const split = splitOwnerShare(paid.valueAtomic, settings.ownerShareBps)
      books.capture({
        callId: newId('call'),
        proofKey: paid.proofKey,
        endpointId: endpoint.id,
        accountId: endpoint.accountId,
        ownerWallet: endpoint.ownerWallet,
        payer: paid.payer,
        amountAtomic: paid.valueAtomic,
        ownerShareAtomic: split.owner,
        feeAtomic: split.fee,
        upstreamStatus: status,
        method: this.forward!.method,
      })
      this.ctx.usedProofs.set(paid.proofKey, true)
      callsCaptured.inc()
      capturedAtomic.inc(Number(paid.valueAtomic))
      if (captureSpan !== null) endSpan(captureSpan)
    }
    // tollgate answers CORS for metered URLs: the upstream's own allow-origin is dropped (proxy.ts).
    return [paymentReceipt(paid, status < 500, settings), ['x-request-id', this.requestId], ACAO, EXPOSE]
  }

  /** issue 12: the call row of a voucher's call; `status` null for one in doubt. */
  voucherCall(paid: BatchVerified, status: number | null): VoucherCall {
    const endpoint = this.endpoint!
    const split = splitOwnerShare(paid.valueAtomic, this.ctx.settings.ownerShareBps)
    return {
      channelId: paid.channelId,
      cumulative: paid.cumulative,
      endpointId: endpoint.id,
      accountId: endpoint.accountId,
      payer: paid.payer,
      amountAtomic: paid.valueAtomic,
      call:
        status === null
          ? null
          : {
              callId: newId('call'),
              ownerWallet: endpoint.ownerWallet,
              ownerShareAtomic: split.owner,
              feeAtomic: split.fee,
              upstreamStatus: status,
              method: this.forward!.method,
            },
    }
  }

  /** ProxyHooks: the final outcome, exactly once. */
  onDone(outcome: ProxyOutcome): void {
    // A proof serves at most once: it is released for a retry only when the upstream certainly did not serve
    // it (it could not be reached, or answered 5xx; see upstreamFailed). A client that left while the upstream was working may
    // have been served: that claim stays held, is in doubt once its lease runs out, and is refunded at the
    // end of its window rather than served again. A voucher's call in doubt is written as such by its lease.
    const paid = this.paid!
    if (!this.captured && upstreamFailed(outcome)) this.release()
    else if (!this.captured && paid.kind === 'batch')
      this.ctx.batch!.leases.doubt(paid.lease, paid.cumulative, this.voucherCall(paid, null))
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

  release(): void {
    const { pendingReleases, sql, logger } = this.ctx
    const paid = this.paid!
    // issue 12: a voucher has no claim row yet: its lease frees it in memory.
    if (paid.kind === 'batch') return this.ctx.batch!.leases.released(paid.lease, paid.cumulative)
    const proofKey = paid.proofKey
    const p = releaseWithRetry(sql, proofKey, this.attempt)
      .then((applied) => {
        claimReleases.labels(applied ? 'released' : 'refused').inc()
      })
      .catch((err) => {
        // Not released: the claim stays held, then in doubt, and is refunded at the end of its window.
        claimReleases.labels('failed').inc()
        logger.warn('claim release failed; the proof will be refunded instead of retried', { err })
      })
      .finally(() => pendingReleases.delete(proofKey))
    pendingReleases.set(proofKey, p)
  }

  respond402(reason: string, retryAfterMs?: number, requiredHeader?: string): void {
    // A body we will not forward may have paused the client's socket: let it go.
    this.body?.release()
    // A proof that did not pay counts against its client's unpaid limit (one without a proof already did).
    if (this.paymentHeader) this.ctx.edge?.proofRefused(this.client)
    count402(reason)
    this.finish(402, reason)
    const challenge = this.endpoint!.challenge
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

/** Whether the upstream itself failed, so that the payer may retry the proof (see onDone). */
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

/** A release is worth a few quick tries: without it, a retry within the window is refused. */
async function releaseWithRetry(sql: Sql, proofKey: string, attempt: number): Promise<boolean> {
  for (let i = 0; ; i++) {
    try {
      return (await releaseClaim(sql, { proofKey, attempt })).ok
    } catch (err) {
      if (i >= 2) throw err
      await new Promise((r) => setTimeout(r, 100 * 2 ** i))
    }
  }
}
