// ANY /pass/:endpoint_id: buying an endpoint's pass. Without a payment, a 402 at the pass price offering
// every scheme the endpoint takes (its own resource URL, so any published client pays it unchanged); with
// one, the scheme that reads it verifies it (src/schemes/, through the registry: nothing here names a
// scheme), the payment is claimed and captured as a call (method PASS: owner share and fee booked like any
// served call), and once that capture is written the pass is opened from it (src/books/passes.ts). The
// answer is the pass; a retry with the same payment gets the same pass and is not charged again.

import { openPass, type PassRow } from '../books/passes.ts'
import type { Sql } from '../db/sql.ts'
import { ERRORS, type ErrorCode, type ErrorDetails } from '../errors.ts'
import { newId } from '../ids.ts'
import type { Logger } from '../observability/logger.ts'
import { httpRequests, passesBought } from '../observability/metrics.ts'
import { requestIdFrom } from '../request-id.ts'
import type { SchemeRegistry } from '../schemes/registry.ts'
import type { ClaimOutcome, Payment, SpentProof, Verdict } from '../schemes/scheme.ts'
import { mppCredential, parseProof } from '../wire/proof.ts'
import {
  type FlatHeaders,
  RETRY_AFTER_1,
  RETRY_AFTER_30,
  retryAfter,
  writeAnswer,
  writeErrorAnswer,
} from './answer-writer.ts'
import type { ProofEdge } from './app.ts'
import {
  type EndpointCache,
  type LiveEndpoint,
  type LivePass,
  loadEndpoint,
  NOT_FOUND,
} from './endpoint-cache.ts'
import { paymentRequired } from './payment-required.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'

export interface PassPurchaseDeps {
  sql: Sql
  endpoints: EndpointCache
  schemes: SchemeRegistry
  logger: Logger
  edge?: ProofEdge
  /** database.require_synchronous_standby (src/db/replication-watch.ts): non-null refuses every purchase. */
  replication?: { readonly refusing: string | null }
  settings: {
    quoteTtlMs: number
    /** How long the purchase waits for its capture to be written before answering pass_opening. */
    openWaitMs: number
  }
}

const JSON_TYPE = 'application/json; charset=utf-8'
const NO_STORE: FlatHeaders = ['cache-control', 'no-store']
const count = {
  '2xx': httpRequests.labels('pass', '2xx'),
  '4xx': httpRequests.labels('pass', '4xx'),
  '5xx': httpRequests.labels('pass', '5xx'),
}

export function createPassPurchaseRoute(deps: PassPurchaseDeps) {
  return function passPurchase(res: HttpResponse, req: HttpRequest): void {
    new PassPurchase(deps, res, req).start()
  }
}

class PassPurchase {
  aborted = false
  readonly endpointId: string
  readonly paymentHeader: string
  readonly requestId: string
  readonly client: string
  endpoint: LiveEndpoint | null = null
  pass: LivePass | null = null

  constructor(
    readonly ctx: PassPurchaseDeps,
    readonly res: HttpResponse,
    req: HttpRequest,
  ) {
    res.onAborted(() => {
      this.aborted = true
    })
    // Nothing of the body is used: read and dropped, so the client's upload completes.
    res.onData(() => {})
    this.endpointId = req.getParameter(0) ?? ''
    this.paymentHeader =
      req.getHeader('x-payment') ||
      req.getHeader('payment-signature') ||
      mppCredential(req.getHeader('authorization'))
    this.requestId = requestIdFrom(req.getHeader('x-request-id'))
    this.client = this.paymentHeader && ctx.edge !== undefined ? ctx.edge.clientKey(res, req) : ''
  }

  start(): void {
    const cached = this.ctx.endpoints.get(this.endpointId)
    if (cached !== undefined) return this.withEndpoint(cached)
    loadEndpoint(this.ctx.endpoints, this.endpointId).then(
      (entry) => this.withEndpoint(entry),
      (err) =>
        this.respondError('verification_unavailable', { message: 'retry shortly' }, RETRY_AFTER_1, err),
    )
  }

  withEndpoint(entry: LiveEndpoint | typeof NOT_FOUND): void {
    if (this.aborted) return
    if (entry === NOT_FOUND || !entry.active)
      return this.respondError('endpoint_not_found', {
        message: `no active metered endpoint ${this.endpointId}`,
      })
    if (entry.pass === null)
      return this.respondError('pass_not_offered', { message: `endpoint ${entry.id} sells no pass` })
    this.endpoint = entry
    this.pass = entry.pass
    // As a metered call: no payment a failover could forget (src/db/replication-watch.ts).
    if (this.ctx.replication?.refusing)
      return this.respondError('replication_unsafe', undefined, RETRY_AFTER_30)
    if (!this.paymentHeader) return this.respond402('payment_required')
    const verdict = this.ctx.schemes.verify(parseProof(this.paymentHeader), {
      endpoint: { id: entry.id, accountId: entry.accountId, timeoutMs: entry.target.timeoutMs },
      quote: entry.pass.quote,
      nowMs: Date.now(),
      client: this.client,
    })
    if (verdict instanceof Promise) verdict.then((v) => this.withVerdict(v))
    else this.withVerdict(verdict)
  }

  withVerdict(verdict: Verdict): void {
    if (this.aborted) {
      if (verdict.ok === true) verdict.payment.drop()
      return
    }
    switch (verdict.ok) {
      case false:
        // Spent: by this purchase (a retry whose answer was lost, the payment settled or seen spent here
        // since) it names the same pass again; spent on anything else, it stays refused.
        if (verdict.reason === 'proof_already_used' && verdict.spent !== undefined)
          return void this.open(verdict.spent, null)
        return this.respond402(verdict.reason, verdict.requiredHeader)
      case 'unavailable':
        return this.respondError(
          'verification_unavailable',
          { message: verdict.message },
          RETRY_AFTER_1,
          verdict.err,
        )
      case 'error':
        return this.respondError(
          verdict.code,
          verdict.message ? { message: verdict.message } : undefined,
          retryAfter(verdict.retryAfterS),
        )
      case 'answered':
        return this.respondError('invalid_state', { message: 'this payment cannot buy a pass' })
    }
    const payment = verdict.payment
    const claimed = payment.claim()
    const go = (outcome: ClaimOutcome) => this.withClaim(payment, outcome)
    if (typeof claimed === 'string') return go(claimed)
    claimed.then(go, (err) =>
      this.respondError(
        'verification_unavailable',
        { message: 'the payment could not be recorded; retry shortly with the same payment' },
        RETRY_AFTER_1,
        err,
      ),
    )
  }

  withClaim(payment: Payment, outcome: ClaimOutcome): void {
    if (outcome === 'busy') return this.respondError('payment_in_progress', undefined, RETRY_AFTER_1)
    if (outcome === 'insufficient_funds') return this.respond402('insufficient_funds')
    // Used before: by this purchase (a retry whose answer was lost: the same pass) or by anything else.
    if (outcome === 'used') {
      void this.open(payment, null)
      return
    }
    // Won: whether or not the client is still there, the purchase goes through (a retry gets the pass).
    const endpoint = this.endpoint!
    payment.capture({
      endpointId: endpoint.id,
      accountId: endpoint.accountId,
      ownerWallet: endpoint.ownerWallet,
      method: 'PASS',
      callId: newId('call'),
      status: 200,
      // The whole payment is captured, as for a call (a transfer above the price pays the owner its share).
      chargeAtomic: payment.coversAtomic,
      pricingModel: 'fixed',
      usage: null,
      receiptId: null,
    })
    void this.open(payment, payment)
  }

  /**
   * Opens the pass from the purchase's capture once it is written (captures are group-committed). `payment`:
   * the one this request just captured (201 with its receipt); null: `paid` was spent before, and this is a
   * retry: the pass it bought on this endpoint (opened now if a crash came between its capture and its
   * pass) with 200, no receipt, nothing charged; or 402 proof_already_used when it bought no pass here.
   */
  async open(paid: SpentProof, payment: Payment | null): Promise<void> {
    const fresh = payment !== null
    const endpoint = this.endpoint!
    const terms = { calls: this.pass!.terms.calls, durationS: this.pass!.terms.durationS }
    const deadline = Date.now() + (fresh ? this.ctx.settings.openWaitMs : 0)
    let pass: PassRow | null = null
    try {
      for (let delayMs = 5; ; delayMs = Math.min(delayMs * 2, 200)) {
        pass = await openPass(this.ctx.sql, {
          id: newId('pass'),
          proofKey: paid.proofKey,
          endpointId: endpoint.id,
          terms,
        })
        if (pass !== null || Date.now() >= deadline) break
        await new Promise((r) => setTimeout(r, delayMs))
      }
    } catch (err) {
      return this.respondError('pass_opening', undefined, RETRY_AFTER_1, err)
    }
    if (pass === null) {
      if (fresh) return this.respondError('pass_opening', undefined, RETRY_AFTER_1)
      // A payment spent on something else never opens a pass.
      return this.respond402('proof_already_used')
    }
    // A retry names the pass only to the payment's own payer (a transaction hash's is its sender, whoever
    // sends it; an authorization's, its signer).
    if (payment === null) {
      if (paid.payer !== null && pass.payer !== paid.payer.toLowerCase())
        return this.respond402('proof_already_used')
      return this.respondPass(pass, null)
    }
    passesBought.inc()
    const settling = payment.settleBeforeAnswer?.() ?? null
    const receipt = settling === null ? payment.receipt(true) : await settling
    this.respondPass(pass, receipt)
  }

  respondPass(pass: PassRow, receipt: [string, string] | null): void {
    if (this.aborted) return
    count['2xx'].inc()
    const endpoint = this.endpoint!
    const body = JSON.stringify(presentPassRow(pass, endpoint.resourceUrl))
    const flat = receipt === null ? NO_STORE : ['cache-control', 'no-store', receipt[0], receipt[1]]
    writeAnswer(this.res, receipt === null ? '200 OK' : '201 Created', this.requestId, JSON_TYPE, flat, body)
  }

  respond402(reason: string, requiredHeader?: string): void {
    if (this.aborted) return
    if (this.paymentHeader) this.ctx.edge?.proofRefused(this.client)
    count['4xx'].inc()
    // The pass price's 402, built as a metered call's is (x402 and, where the endpoint takes it, MPP).
    const a = paymentRequired(
      {
        quote: this.pass!.quote,
        paymentHeader: this.paymentHeader,
        problemWanted: false,
        requestId: this.requestId,
        endpoint: { pass: null },
      },
      { reason, quoteTtlMs: this.ctx.settings.quoteTtlMs, requiredHeader },
    )
    writeAnswer(this.res, a.statusLine, this.requestId, a.contentType, a.headers, a.body)
  }

  respondError(code: ErrorCode, details?: ErrorDetails, headers?: FlatHeaders, err?: unknown): void {
    const status = ERRORS[code].status
    if (status >= 500)
      this.ctx.logger.error('pass purchase failed', {
        request_id: this.requestId,
        endpoint_id: this.endpointId,
        code,
        err,
      })
    if (this.aborted) return
    count[status >= 500 ? '5xx' : '4xx'].inc()
    writeErrorAnswer(this.res, code, this.requestId, details, headers)
  }
}

/** The pass as its buyer sees it. */
export function presentPassRow(p: PassRow, meteredUrl: string) {
  return {
    object: 'pass',
    id: p.id,
    endpoint_id: p.endpoint_id,
    metered_url: meteredUrl,
    payer: p.payer,
    price_atomic: p.price_atomic.toString(),
    calls: p.calls_total,
    uses_left: p.uses_left,
    expires_at: Number.isFinite(p.expires_at.getTime()) ? p.expires_at.toISOString() : null,
    created_at: p.created_at.toISOString(),
  }
}
