// THE hot path, top to bottom: endpoint → proof → verify → claim → proxy → capture or release.
// Everything read from the uWS request is read synchronously (it dies with the callback); onAborted is
// attached before the first await; answers after an await are corked.
import type { LRUCache } from 'lru-cache'
import type { CaptureWriter } from '../db/captures.ts'
import { type ClaimWriter, releaseClaim } from '../db/claims.ts'
import type { Sql } from '../db/sql.ts'
import { newId } from '../ids.ts'
import { splitOwnerShare } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import {
  callsCaptured,
  capturedAtomic,
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
  type ProxyOutcome,
  proxy,
  type RequestBody,
  type UpstreamDispatcher,
} from './proxy.ts'
import { nextRequestId } from './request-id.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'
import type { Verifier, VerifyResult } from './verifier.ts'

export interface MeteredDeps {
  sql: Sql
  endpoints: EndpointCache
  verifier: Verifier
  usedProofs: LRUCache<string, true>
  claims: ClaimWriter
  captures: CaptureWriter
  dispatcher: UpstreamDispatcher
  logger: Logger
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

export function createMeteredRoute(deps: MeteredDeps) {
  const { endpoints, verifier, usedProofs, claims, captures, dispatcher, settings } = deps
  /** Releases of failed calls still being written, by proof: a quick retry waits for its own release. */
  const pendingReleases = new Map<string, Promise<void>>()

  return function metered(res: HttpResponse, req: HttpRequest): void {
    const startedMs = performance.now()
    const abort: AbortState = { aborted: false, onAbort: null }
    res.onAborted(() => {
      abort.aborted = true
      abort.onAbort?.()
    })
    const endpointId = req.getParameter(0) ?? ''
    const paymentHeader = req.getHeader('x-payment') || req.getHeader('payment-signature')

    // Only a paid request needs the rest of the request; the 402 path reads nothing more.
    let forward: ForwardRequest | null = null
    let body: RequestBody | null = null
    if (paymentHeader) {
      const url = req.getUrl()
      const query = req.getQuery()
      const headers: Array<[string, string]> = []
      req.forEach((k, v) => {
        headers.push([k, v])
      })
      forward = {
        method: req.getCaseSensitiveMethod().toUpperCase(),
        pathAndQuery: url.slice(3 + endpointId.length) + (query ? `?${query}` : ''),
        headers,
        remoteAddress: Buffer.from(res.getRemoteAddressAsText()).toString(),
      }
      body = createRequestBody(res, settings.maxBufferedBodyBytes)
    }

    const cached = endpoints.get(endpointId)
    if (cached !== undefined) {
      cacheCounters.endpointHit.inc()
      withEndpoint(cached)
    } else {
      cacheCounters.endpointMiss.inc()
      loadEndpoint(endpoints, endpointId).then(withEndpoint, (err) => {
        deps.logger.error('endpoint lookup failed', { err })
        respondUnavailable('the endpoint could not be loaded; retry shortly')
      })
    }

    function withEndpoint(entry: LiveEndpoint | typeof NOT_FOUND): void {
      if (abort.aborted) return
      if (entry === NOT_FOUND || !entry.active) {
        const requestId = nextRequestId()
        return respond(404, NOT_FOUND_BODY(endpointId, requestId))
      }
      if (!paymentHeader) return respond402(entry, 'payment_required')
      const proof = parseProof(paymentHeader)
      // A proof seen spent on this instance is refused without a query.
      if (proof.kind === 'tx' && usedProofs.has(proof.key)) {
        cacheCounters.usedHit.inc()
        return respond402(entry, 'proof_already_used')
      }
      const verified = verifier.verify(proof)
      if (verified instanceof Promise) verified.then((r) => withVerified(entry, r))
      else withVerified(entry, verified)
    }

    function withVerified(endpoint: LiveEndpoint, result: VerifyResult): void {
      if (abort.aborted) return
      if (!result.ok) {
        if (result.reason === 'rpc_unavailable') {
          return respondUnavailable('the chain could not be reached to verify the payment; retry shortly')
        }
        return respond402(endpoint, result.reason, result.retryAfterMs)
      }
      if (result.valueAtomic < minimumAcceptedAtomic(endpoint, Date.now()))
        return respond402(endpoint, 'underpaid')
      claims
        .claim({
          proofKey: result.proofKey,
          kind: result.kind,
          targetType: 'call',
          targetId: endpoint.id,
          accountId: endpoint.accountId,
          payer: result.payer,
          amountAtomic: result.valueAtomic,
          retryWindowMs: settings.retryWindowMs,
          leaseMs: endpoint.target.timeoutMs + 5_000,
        })
        .then(
          (outcome) => {
            if (outcome === 'used') {
              usedProofs.set(result.proofKey, true)
              if (abort.aborted) return
              return respond402(endpoint, 'proof_already_used')
            }
            if (outcome === 'busy') {
              // In flight in another request right now. Not a 402: a client must not pay again for it.
              if (abort.aborted) return
              return respondInProgress()
            }
            // The client may have left while the claim was written: free the proof for its retry.
            if (abort.aborted) {
              // fail(), not release(): the response is gone and must not be touched.
              body?.fail()
              return release(result.proofKey)
            }
            forwardPaid(endpoint, result as Extract<VerifyResult, { ok: true }>)
          },
          (err) => {
            deps.logger.error('claim failed', { err })
            respondUnavailable('the payment could not be recorded; retry shortly with the same proof')
          },
        )
    }

    function forwardPaid(endpoint: LiveEndpoint, paid: Extract<VerifyResult, { ok: true }>): void {
      let captured = false
      proxy(dispatcher, res, forward!, body!, endpoint.target, abort, {
        onResponseHead(status) {
          // Captured once the upstream answered below 500, even if the client leaves mid-body.
          if (status < 500) {
            captured = true
            const split = splitOwnerShare(paid.valueAtomic, settings.ownerShareBps)
            captures.add({
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
              method: forward!.method,
            })
            usedProofs.set(paid.proofKey, true)
            callsCaptured.inc()
            capturedAtomic.inc(Number(paid.valueAtomic))
          }
          const receipt = {
            success: status < 500,
            transaction: paid.transaction,
            network: settings.network,
            payer: paid.payer,
          }
          return [['x-payment-response', Buffer.from(JSON.stringify(receipt)).toString('base64')]]
        },
        onDone(outcome: ProxyOutcome) {
          if (!captured) release(paid.proofKey)
          if (outcome.kind === 'upstream_error') upstreamErrors.labels(outcome.code).inc()
          const status =
            outcome.kind === 'responded'
              ? outcome.status
              : outcome.kind === 'upstream_error'
                ? (outcome.status ?? (outcome.code === 'timeout' ? 504 : 502))
                : (outcome.status ?? 499)
          observe(status, startedMs)
        },
      })
    }

    function release(proofKey: string): void {
      const p = releaseClaim(deps.sql, proofKey)
        .catch((err) => deps.logger.warn('claim release failed', { err }))
        .finally(() => pendingReleases.delete(proofKey))
      pendingReleases.set(proofKey, p)
    }

    function respond402(endpoint: LiveEndpoint, reason: string, retryAfterMs?: number): void {
      // A body we will not forward may have paused the client's socket: let it go.
      body?.release()
      count402(reason)
      observe(402, startedMs)
      const text = challengeBody(endpoint.challenge, reason, quoteExpiry(settings.quoteTtlMs))
      res.cork(() => {
        res.writeStatus('402 Payment Required').writeHeader('content-type', JSON_TYPE)
        res.writeHeader('payment-required', endpoint.challenge.v2Header)
        if (retryAfterMs !== undefined)
          res.writeHeader('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
        res.end(text)
      })
    }

    function respond(status: number, text: string): void {
      body?.release()
      observe(status, startedMs)
      res.cork(() => {
        res
          .writeStatus(status === 404 ? '404 Not Found' : `${status}`)
          .writeHeader('content-type', JSON_TYPE)
          .end(text)
      })
    }

    function respondInProgress(): void {
      body?.release()
      observe(409, startedMs)
      res.cork(() => {
        res
          .writeStatus('409 Conflict')
          .writeHeader('content-type', JSON_TYPE)
          .writeHeader('retry-after', '1')
          .end(IN_PROGRESS_BODY)
      })
    }

    function respondUnavailable(message: string): void {
      if (abort.aborted) return
      body?.release()
      observe(503, startedMs)
      res.cork(() => {
        res
          .writeStatus('503 Service Unavailable')
          .writeHeader('content-type', JSON_TYPE)
          .writeHeader('retry-after', '2')
          .end(UNAVAILABLE_BODY(message))
      })
    }
  }
}
