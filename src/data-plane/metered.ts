// THE hot path, top to bottom: endpoint → proof → verify → claim → proxy → capture or release.
// Everything read from the uWS request is read synchronously (it dies with the callback); onAborted is
// attached before the first await; answers after an await are corked.
import type { LRUCache } from 'lru-cache'
import type { BatchWriter } from '../books/batch-writer.ts'
import { type ClaimResult, releaseClaim } from '../books/claims.ts'
import type { Sql } from '../db/sql.ts'
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
import { cacheCounters } from './caches.ts'
import { challengeBody, quoteExpiry } from './challenge.ts'
import {
  type EndpointCache,
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
  INVALID_PATH_MESSAGE,
  isConfinedSubPath,
  type ProxyHooks,
  type ProxyOutcome,
  proxy,
  type RequestBody,
  type UpstreamDispatcher,
} from './proxy.ts'
import { nextRequestId } from './request-id.ts'
import type { SettlementThrottle } from './settlement-throttle.ts'
import { type HttpRequest, type HttpResponse, statusLine } from './uws.ts'
import type { Verifier, VerifyResult } from './verifier.ts'

type VerifiedProof = Extract<VerifyResult, { ok: true }>

export interface MeteredDeps {
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
  settings: {
    retryWindowMs: number
    quoteTtlMs: number
    ownerShareBps: number
    maxBufferedBodyBytes: number
    /** Network name in the x-payment-response receipt. */
    network: string
  }
}

const JSON_TYPE = 'application/json; charset=utf-8'
const NOT_FOUND_BODY = (id: string, requestId: string) =>
  `{"error":{"type":"invalid_request_error","code":"endpoint_not_found","message":"no active metered endpoint ${id}"},"request_id":"${requestId}"}`
const UNAVAILABLE_BODY = (message: string) =>
  `{"error":{"type":"api_error","code":"verification_unavailable","message":"${message}"}}`

const INVALID_PATH_BODY = JSON.stringify({
  error: { type: 'invalid_request_error', code: 'invalid_path', message: INVALID_PATH_MESSAGE },
})
const BACKLOG_BODY =
  '{"error":{"type":"api_error","code":"settlement_backlog","message":"x402 payments are paused while settlements catch up; retry after Retry-After seconds with the same or a new authorization"}}'

const IN_PROGRESS_BODY =
  '{"error":{"type":"invalid_request_error","code":"payment_in_progress","message":"this proof is being used by another request right now; retry after it finishes (do not pay again)"}}'

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
    if (this.paymentHeader) {
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
      }
      // onData must be attached before the handler returns, or the body is lost.
      this.body = createRequestBody(res, ctx.settings.maxBufferedBodyBytes)
    }
  }

  start(): void {
    // --- hostile input: nothing is looked up, verified or claimed for an escaping path.
    if (this.escapingPath) return this.respond(400, INVALID_PATH_BODY)
    const cached = this.ctx.endpoints.get(this.endpointId)
    if (cached !== undefined) {
      cacheCounters.endpointHit.inc()
      this.withEndpoint(cached)
      return
    }
    cacheCounters.endpointMiss.inc()
    loadEndpoint(this.ctx.endpoints, this.endpointId).then(
      (entry) => this.withEndpoint(entry),
      (err) => {
        this.ctx.logger.error('endpoint lookup failed', { err })
        this.respondUnavailable('the endpoint could not be loaded; retry shortly')
      },
    )
  }

  withEndpoint(entry: LiveEndpoint | typeof NOT_FOUND): void {
    if (this.abort.aborted) return
    if (entry === NOT_FOUND || !entry.active)
      return this.respond(404, NOT_FOUND_BODY(this.endpointId, nextRequestId()))
    this.endpoint = entry
    if (!this.paymentHeader) return this.respond402('payment_required')
    const proof = parseProof(this.paymentHeader)
    // A proof seen spent on this instance is refused without a query.
    if (proof.kind === 'tx' && this.ctx.usedProofs.has(proof.key)) {
      cacheCounters.usedHit.inc()
      return this.respond402('proof_already_used')
    }
    // ---- x402 intake throttle (settlement backlog): refused before verifying or claiming anything. ----
    const throttle = this.ctx.settlementThrottle
    if (proof.kind === 'x402' && throttle?.engaged) return this.respondBacklog(throttle.retryAfterS)
    // ----
    const verified = this.ctx.verifier.verify(proof)
    if (verified instanceof Promise) verified.then((r) => this.withVerified(r))
    else this.withVerified(verified)
  }

  withVerified(result: VerifyResult): void {
    if (this.abort.aborted) return
    const endpoint = this.endpoint!
    if (!result.ok) {
      if (result.reason === 'rpc_unavailable') {
        return this.respondUnavailable('the chain could not be reached to verify the payment; retry shortly')
      }
      return this.respond402(result.reason, result.retryAfterMs)
    }
    if (result.valueAtomic < minimumAcceptedAtomic(endpoint, Date.now())) return this.respond402('underpaid')
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
      })
      .then(
        (outcome) => this.withClaim(outcome),
        (err) => {
          this.ctx.logger.error('claim failed', { err })
          this.respondUnavailable('the payment could not be recorded; retry shortly with the same proof')
        },
      )
  }

  withClaim(result: ClaimResult): void {
    const paid = this.paid!
    const outcome = result.outcome
    if (outcome === 'used') {
      this.ctx.usedProofs.set(paid.proofKey, true)
      if (this.abort.aborted) return
      return this.respond402('proof_already_used')
    }
    if (outcome === 'busy') {
      // In flight in another request right now. Not a 402: a client must not pay again for it.
      if (this.abort.aborted) return
      return this.respondInProgress()
    }
    this.attempt = result.attempt
    // The client may have left while the claim was written: nothing was forwarded, free the proof.
    if (this.abort.aborted) {
      // fail(), not release(): the response is gone and must not be touched.
      this.body?.fail()
      return this.release()
    }
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, this.endpoint!.target, this.abort, this)
  }

  /** ProxyHooks: the upstream's status is known, nothing is written yet. */
  onResponseHead(status: number): Array<[string, string]> {
    const paid = this.paid!
    const endpoint = this.endpoint!
    const { settings, books } = this.ctx
    // Captured once the upstream answered below 500, even if the client leaves mid-body.
    if (status < 500) {
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
    }
    // An x402 authorization has no transaction until it is settled (after the call): "" then.
    const receipt = `{"success":${status < 500},"transaction":"${paid.transaction ?? ''}","network":"${settings.network}","payer":"${paid.payer}"}`
    return [['x-payment-response', Buffer.from(receipt).toString('base64')]]
  }

  /** ProxyHooks: the final outcome, exactly once. */
  onDone(outcome: ProxyOutcome): void {
    // A proof serves at most once: it is released for a retry only when the upstream itself failed (it could
    // not be reached, timed out, or answered 5xx). A client that left while the upstream was working may
    // have been served: that claim stays held, is in doubt once its lease runs out, and is refunded at the
    // end of its window rather than served again.
    if (!this.captured && upstreamFailed(outcome)) this.release()
    if (outcome.kind === 'upstream_error') upstreamErrors.labels(outcome.code).inc()
    const status =
      outcome.kind === 'responded'
        ? outcome.status
        : outcome.kind === 'upstream_error'
          ? (outcome.status ?? (outcome.code === 'timeout' ? 504 : 502))
          : (outcome.status ?? 499)
    observe(status, this.startedMs)
  }

  release(): void {
    const { pendingReleases, sql, logger } = this.ctx
    const proofKey = this.paid!.proofKey
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

  respond402(reason: string, retryAfterMs?: number): void {
    // A body we will not forward may have paused the client's socket: let it go.
    this.body?.release()
    count402(reason)
    observe(402, this.startedMs)
    const challenge = this.endpoint!.challenge
    const text = challengeBody(challenge, reason, quoteExpiry(this.ctx.settings.quoteTtlMs))
    const res = this.res
    res.cork(() => {
      res.writeStatus('402 Payment Required').writeHeader('content-type', JSON_TYPE)
      res.writeHeader('payment-required', challenge.v2Header)
      if (retryAfterMs !== undefined)
        res.writeHeader('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
      res.end(text)
    })
  }

  respond(status: number, text: string): void {
    this.body?.release()
    observe(status, this.startedMs)
    const res = this.res
    res.cork(() => {
      res.writeStatus(statusLine(status)).writeHeader('content-type', JSON_TYPE).end(text)
    })
  }

  respondInProgress(): void {
    this.body?.release()
    observe(409, this.startedMs)
    const res = this.res
    res.cork(() => {
      res
        .writeStatus('409 Conflict')
        .writeHeader('content-type', JSON_TYPE)
        .writeHeader('retry-after', '1')
        .end(IN_PROGRESS_BODY)
    })
  }

  /** 503 settlement_backlog: x402 intake paused while settlements catch up (the proof stays unspent). */
  respondBacklog(retryAfterS: number): void {
    this.body?.release()
    observe(503, this.startedMs)
    const res = this.res
    res.cork(() => {
      res
        .writeStatus('503 Service Unavailable')
        .writeHeader('content-type', JSON_TYPE)
        .writeHeader('retry-after', String(retryAfterS))
        .end(BACKLOG_BODY)
    })
  }

  respondUnavailable(message: string): void {
    if (this.abort.aborted) return
    this.body?.release()
    observe(503, this.startedMs)
    const res = this.res
    res.cork(() => {
      res
        .writeStatus('503 Service Unavailable')
        .writeHeader('content-type', JSON_TYPE)
        .writeHeader('retry-after', '2')
        .end(UNAVAILABLE_BODY(message))
    })
  }
}

/** Whether the upstream itself failed, so that the payer may retry the proof (see onDone). */
function upstreamFailed(outcome: ProxyOutcome): boolean {
  if (outcome.kind === 'upstream_error') return outcome.status === null || outcome.status >= 500
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
