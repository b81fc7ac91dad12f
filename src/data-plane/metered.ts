// THE hot path, top to bottom: endpoint → proof → verify → claim → proxy → capture or release.
// Everything read from the uWS request is read synchronously (it dies with the callback); onAborted is
// attached before the first await; answers after an await are corked (answer-writer.ts). What happens around
// a paid call's answer (usage meter, MCP rewriter, discovery count, receipt digest, payment-identifier, held
// answer) is a stage (stages/), composed per call from what its endpoint and payment use.
import { ERRORS, type ErrorCode, type ErrorDetails } from '../errors.ts'
import type { CallAgent } from '../identity/call-agent.ts'
import { newId } from '../ids.ts'
import { traceparentOf } from '../observability/tracing.ts'
import type { BodyPrice } from '../pricing/body-price.ts'
import type { Ending } from '../pricing/meter.ts'
import type { UsageRecord } from '../pricing/model.ts'
import { requestIdFrom } from '../request-id.ts'
import { cacheCounters } from '../schemes/caches.ts'
import type { CallFacts, ClaimOutcome, Payment, Quote, Verdict } from '../schemes/scheme.ts'
import { wantsProblem } from '../wire/challenge.ts'
import { mppCredential, type Proof, parseProof } from '../wire/proof.ts'
import {
  type FlatHeaders,
  paidHeaders,
  RETRY_AFTER_1,
  RETRY_AFTER_2,
  RETRY_AFTER_30,
  relayedHeaders,
  retryAfter,
  writeAnswer,
  writeErrorAnswer,
} from './answer-writer.ts'
import { type PricedBody, priceByBody } from './body-priced.ts'
import { priceByIdentity, signerNames, targetFor } from './call-identity.ts'
import { count402, countCapture, failureOf, recordAnswer, statusOf } from './call-outcome.ts'
import { CallTrace } from './call-trace.ts'
import { type LiveEndpoint, loadEndpoint, NOT_FOUND } from './endpoint-cache.ts'
import type { MeteredDeps } from './metered-deps.ts'
import { checkedPayment, paymentChecks, paymentEnded } from './payment-protocol.ts'
import { inBandPaymentRequired, paymentRequired } from './payment-required.ts'
import {
  type AbortState,
  createRequestBody,
  type ForwardRequest,
  isConfinedSubPath,
  type ProxyHooks,
  type ProxyOutcome,
  proxy,
  type RequestBody,
  readForwardRequest,
} from './proxy.ts'
import { withSignedReceipt } from './receipt-signer.ts'
import { AnswerStages, RANK } from './stages/answer-stages.ts'
import { fitsHeld, HeldAnswer } from './stages/held-answer.ts'
import { ObservedCall } from './stages/observed-call.ts'
import { PaymentIdentifier } from './stages/payment-identifier.ts'
import { ReceiptDigest } from './stages/receipt-digest.ts'
import { endingOf, MeterStage } from './stages/usage-meter.ts'
import { type HttpRequest, type HttpResponse, statusLine } from './uws.ts'

export type { MeteredDeps, MeteredIdentity } from './metered-deps.ts'

type HeaderPairs = Array<[string, string]>

const REPLAYED: FlatHeaders = ['payment-identifier-replayed', 'true']
const NO_HEADERS: FlatHeaders = []
const ENDPOINT_NOT_LOADED = 'the endpoint could not be loaded; retry shortly'

export function createMeteredRoute(deps: MeteredDeps) {
  return function metered(res: HttpResponse, req: HttpRequest): void {
    const endpointId = req.getParameter(0) ?? ''
    const cached = deps.endpoints.get(endpointId)
    new MeteredCall(deps, res, req, endpointId, cached).start(cached)
  }
}

/**
 * One metered request. A plain object with its steps on the prototype: the 402 path allocates this and
 * nothing else (no per-request closures), and the object doubles as the proxy's hooks.
 */
class MeteredCall implements ProxyHooks {
  readonly startedMs = performance.now()
  readonly abort: AbortState = { aborted: false, onAbort: null }
  /** The payment header, or a payment the body carried (the x402 MCP transport's params._meta). */
  paymentHeader: string
  /** SIGN-IN-WITH-X, read only for an endpoint that sells a pass (or is not cached yet); else ''. */
  readonly signIn: string
  /** The caller's x-request-id when sane, else a new one: on every answer and every log line. */
  readonly requestId: string
  /** Only a paid request needs the rest of the request; the 402 path reads nothing more. */
  readonly forward: ForwardRequest | null = null
  readonly body: RequestBody | null = null
  readonly method: string
  /** The part after /m/<id>, without the query: with the method, it selects the price. */
  readonly subPath: string
  /** An unpaid request from a client speaking MPP (Accept-Payment): its 402 is a problem (RFC 9457). */
  readonly problemWanted: boolean
  /** The client's rate-limit key, read only when a proof came (its chain look-ups and refusals count). */
  client = ''
  endpoint: LiveEndpoint | null = null
  /** The price this request pays, with its 402. */
  quote: Quote | null = null
  /** A body-priced call (an MCP tool): what it bought, how it is charged, its in-band answers; else null. */
  priced: PricedBody | null = null
  /** An endpoint with identity rules: who called and the rule that priced it, for the call row (else null). */
  agent: CallAgent | null = null
  payment: Payment | null = null
  /** Given to every paid answer from its first byte; the call's receipt is read at /receipts/<id>. */
  receiptId: string | null = null
  /** Usage pricing: the stage that measures the answer, charged at its end (null for fixed prices). */
  meter: MeterStage | null = null
  /** The stages around the answer (null: none, the answer passes untouched). */
  answer: AnswerStages | null = null
  captured = false
  /** payment-identifier: the id the payment carries, reserved once it verified (null: none). */
  paymentId: PaymentIdentifier | null = null
  /** Tracing only (null when off): the call's span and its current step. */
  readonly trace: CallTrace | null

  constructor(
    readonly ctx: MeteredDeps,
    readonly res: HttpResponse,
    req: HttpRequest,
    readonly endpointId: string,
    cached: LiveEndpoint | typeof NOT_FOUND | undefined,
  ) {
    const abort = this.abort
    res.onAborted(() => {
      abort.aborted = true
      abort.onAbort?.()
    })
    this.paymentHeader =
      req.getHeader('x-payment') ||
      req.getHeader('payment-signature') ||
      mppCredential(req.getHeader('authorization'))
    this.problemWanted =
      this.paymentHeader === '' && wantsProblem(req.getHeader('accept-payment'), req.getHeader('accept'))
    this.requestId = requestIdFrom(req.getHeader('x-request-id'))
    this.method = req.getCaseSensitiveMethod().toUpperCase()
    this.subPath = req.getUrl().slice(3 + endpointId.length)
    // Only an endpoint that sells a pass reads the sign-in header: every other call pays nothing for it.
    this.signIn =
      ctx.passes !== undefined && (cached === undefined || (cached !== NOT_FOUND && cached.pass !== null))
        ? req.getHeader('sign-in-with-x')
        : ''
    this.trace = CallTrace.of(req.getHeader('traceparent'), endpointId, this.requestId)
    // A paid request is forwarded; so may be an unpaid one whose price is read from its body (an MCP
    // method that is free, or a payment carried in the body), and one to an endpoint not cached yet (the
    // request dies with this callback).
    if (
      this.paymentHeader ||
      this.signIn ||
      cached === undefined ||
      (cached !== NOT_FOUND && (cached.bodyPricing !== null || cached.identity !== null))
    ) {
      if (ctx.edge !== undefined) this.client = ctx.edge.clientKey(res, req)
      const peerTrusted = ctx.edge?.peerTrusted(res) === true
      const { method, subPath, requestId } = this
      this.forward = readForwardRequest(res, req, { method, subPath, requestId, peerTrusted })
      // onData must be attached before the handler returns, or the body is lost.
      this.body = createRequestBody(res, ctx.settings.maxBufferedBodyBytes)
    }
  }

  start(cached: LiveEndpoint | typeof NOT_FOUND | undefined): void {
    // --- hostile input: a path that could leave the base path is refused before the proof is parsed,
    // verified or claimed. Only forwarded requests are checked: only they can leave it.
    if (this.forward !== null && !isConfinedSubPath(this.subPath)) return this.respondError('invalid_path')
    if (cached !== undefined) {
      cacheCounters.endpointHit.inc()
      this.withEndpoint(cached)
      return
    }
    cacheCounters.endpointMiss.inc()
    loadEndpoint(this.ctx.endpoints, this.endpointId).then(
      (entry) => this.withEndpoint(entry),
      (err) => this.respondUnavailable(ENDPOINT_NOT_LOADED, 'endpoint_lookup_failed', err),
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
    if (entry.bodyPricing !== null) return priceByBody(this, entry.bodyPricing)
    const quote = entry.quoteFor(this.method, this.subPath)
    if (entry.identity !== null) return priceByIdentity(this, entry.identity, quote)
    this.withQuote(quote)
  }

  /** The call carries a payment (or a pass sign-in where a pass is sold): it will be served if it pays. */
  paying(): boolean {
    return this.paymentHeader !== '' || (this.signIn !== '' && this.endpoint!.pass !== null)
  }

  /** Free by the endpoint's own terms (a protocol method, a free tool): forwarded as is, nothing booked. */
  forwardUnpaid(): void {
    const target = targetFor(this.endpoint!.target, this.agent)
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, target, this.abort, this)
  }

  withQuote(quote: Quote): void {
    this.quote = quote
    // Standbys attached, none synchronous, and the operator required one: no payment is taken (nor invited
    // by a 402) whose claim a failover could forget and serve again. Free calls (above) go on.
    if (this.ctx.replication?.refusing)
      return this.respondError('replication_unsafe', undefined, RETRY_AFTER_30)
    if (!this.paymentHeader) {
      // A pass holder signed in: one use of the pass pays this call (a payment header, if any, wins).
      if (this.signIn && this.endpoint!.pass !== null) return this.usePass()
      return this.respond402('payment_required')
    }
    // The scheme that reads the payment verifies it against this request's price (src/schemes/).
    const proof = parseProof(this.paymentHeader)
    // payment-identifier: read here (no query); the database is asked only once the payment verified, or
    // when it is refused as already used (a retry): an unpaid request never writes.
    this.paymentId = PaymentIdentifier.of(this.ctx.paidAnswers, proof, this.endpoint!.id)
    this.verifyProof(proof)
  }

  /** The sign-in checked and one use drawn (pass-uses.ts): then the way of any verified payment. */
  usePass(): void {
    const entry = this.endpoint!
    this.trace?.begin('verify')
    this.ctx.passes!.use(this.signIn, { id: entry.id, resourceUrl: entry.resourceUrl }).then(
      (v) => this.withVerdict(v),
      (err) => this.respondUnavailable('the sign-in could not be checked; retry shortly', 'pass_failed', err),
    )
  }

  verifyProof(proof: Proof): void {
    const entry = this.endpoint!
    this.trace?.begin('verify')
    const verdict = this.ctx.schemes.verify(proof, {
      endpoint: {
        id: entry.id,
        accountId: entry.accountId,
        timeoutMs: entry.target.timeoutMs,
        settleBeforeAnswer: entry.settleBeforeAnswer,
        protocols: entry.protocols,
      },
      quote: this.quote!,
      nowMs: Date.now(),
      client: this.client,
    })
    if (verdict instanceof Promise) verdict.then((v) => this.withVerdict(v))
    else this.withVerdict(verdict)
  }

  withVerdict(verdict: Verdict): void {
    this.trace?.end(undefined, verdict.ok === true ? undefined : 'refused')
    if (this.abort.aborted) {
      // Verified but never forwarded: the scheme lets go of what it holds.
      if (verdict.ok === true) verdict.payment.drop()
      return this.finishAborted()
    }
    switch (verdict.ok) {
      case false:
        if (this.paymentId !== null && verdict.reason === 'proof_already_used')
          return this.paymentId.replayOrRefuse(this, verdict)
        return this.respond402(verdict.reason, verdict.retryAfterMs, verdict.requiredHeader)
      case 'unavailable':
        return this.respondUnavailable(verdict.message, verdict.reason, verdict.err)
      case 'error': {
        const details = verdict.message ? { message: verdict.message } : undefined
        return this.respondError(verdict.code, details, retryAfter(verdict.retryAfterS))
      }
      case 'answered':
        return this.respondAnswered(verdict)
    }
    const payment = checkedPayment(verdict.payment)
    this.payment = payment
    // payment-identifier: the id is reserved before the claim (stages/payment-identifier.ts).
    if (this.paymentId !== null) return this.paymentId.reserveThenClaim(this, payment)
    this.claim(payment)
  }

  claim(payment: Payment): void {
    this.trace?.begin('claim')
    const claimed = payment.claim()
    if (typeof claimed === 'string') return this.withClaim(claimed)
    claimed.then(
      (outcome) => this.withClaim(outcome),
      (err) => {
        this.trace?.end(undefined, 'claim_failed')
        const message = 'the payment could not be recorded; retry shortly with the same proof'
        this.respondUnavailable(message, 'claim_failed', err)
      },
    )
  }

  withClaim(outcome: ClaimOutcome): void {
    this.trace?.note('tollgate.claim', outcome)
    this.trace?.end()
    if (outcome !== 'won' && this.abort.aborted) return this.finishAborted()
    if (outcome === 'used') return this.respond402('proof_already_used')
    if (outcome === 'insufficient_funds') return this.respond402('insufficient_funds')
    // In flight in another request right now. Not a 402: a client must not pay again for it.
    if (outcome === 'busy') return this.respondError('payment_in_progress', undefined, RETRY_AFTER_1)
    // The client may have left while the claim was written: nothing was forwarded, free the payment.
    if (this.abort.aborted) {
      // fail(), not release(): the response is gone and must not be touched.
      this.body?.fail()
      this.payment!.release()
      return this.finishAborted()
    }
    this.forwardPaid()
  }

  /** Claimed: the stages this call uses are built, and the request goes upstream. */
  forwardPaid(): void {
    const entry = this.endpoint!
    const forward = this.forward!
    if (this.trace !== null)
      forward.traceparent = traceparentOf(
        this.trace.begin('upstream', { 'server.address': entry.target.host }, true),
      )
    this.receiptId = newId('rcpt')
    const usage = this.priced !== null ? this.priced.usage : entry.usage
    if (usage !== null) {
      this.meter = MeterStage.start(usage, entry.target.basePath, forward, this.body!)
      this.stages().add(RANK.meter, this.meter)
    }
    // Discovery counts the calls of listed endpoints only: the listing is the one reader of its figures,
    // and an endpoint that is not listed pays nothing for it (its figures start when it is listed).
    const observed = this.ctx.observed
    if (observed !== undefined && entry.listed) {
      const tool = this.priced === null ? null : this.priced.observedLabel
      const stage = new ObservedCall(observed, this.endpointId, tool, this.payment!.payer, this.agent?.signer)
      this.stages().add(RANK.observed, stage)
    }
    if (this.paymentId !== null) this.stages().add(RANK.recorder, this.paymentId)
    const target = targetFor(entry.target, this.agent)
    proxy(this.ctx.dispatcher, this.res, forward, this.body!, target, this.abort, this)
  }

  /** The stages around the answer, built with the first one. */
  stages(): AnswerStages {
    this.answer ??= new AnswerStages()
    return this.answer
  }

  /** ProxyHooks: the answer is rewritten (sent unsized). */
  get resizes(): boolean {
    return this.answer?.resizes === true
  }

  /** ProxyHooks: the head waits for the settlement while the body is read and kept. */
  get readsWhileHeld(): boolean {
    return this.answer?.holds === true
  }

  /** ProxyHooks: the answer is kept for a payment-identifier retry, read on if the client leaves. */
  get keepsAnswer(): boolean {
    return this.paymentId?.keeps === true
  }

  /** ProxyHooks: the upstream's status is known, nothing is written yet. */
  onResponseHead(status: number, head: Buffer[]): HeaderPairs | Promise<HeaderPairs> {
    this.trace?.note('http.response.status_code', status)
    this.answer?.onHead(head, status)
    const payment = this.payment
    if (payment === null) return relayedHeaders(this.requestId)
    if (status < 500 && this.meter === null) {
      // Captured once the upstream answered below 500, even if the client leaves mid-body.
      // The capture is queued here and group-committed by the writer: its span covers the hand-over.
      const span = this.trace?.child('capture')
      this.capture(status, payment.coversAtomic, null)
      if (span !== undefined) this.trace!.close(span)
    } else if (status < 500 && payment.settlesEarly === true) {
      // Usage pricing: charged when the answer ends, for what it measured; held for a settlement before it.
      const held = this.holdAnswer(head, status)
      if (held !== null) return held
    }
    // A scheme that settles before the answer holds the head until its receipt names the transaction.
    const settling = this.captured ? (payment.settleBeforeAnswer?.() ?? null) : null
    if (settling !== null) return settling.then((receipt) => this.answerHeaders(receipt, status, head))
    return this.answerHeaders(payment.receipt(status < 500), status, head)
  }

  /**
   * Settled before the answer though charged at its end: the answer is held whole (bounded), the charge
   * captured (and settled) at its end, and the head written with the receipt that names the transaction.
   */
  holdAnswer(head: Buffer[], status: number): Promise<HeaderPairs> | null {
    const max = this.ctx.settings.heldAnswerMaxBytes
    if (max === undefined || this.answer!.resizes || this.priced?.receiptInAnswer) return null
    if (!fitsHeld(head, max)) return null
    // The body passes the digest before the head goes out.
    this.digestAnswer()
    const held = HeldAnswer.around(this, max, head, status)
    this.answer!.add(RANK.held, held)
    return held.head
  }

  /** The headers tollgate adds to a paid answer (tollgate answers CORS; the upstream's is dropped, proxy.ts). */
  answerHeaders(receipt: [string, string] | null, status: number, head: Buffer[]): HeaderPairs {
    let signed = receipt
    const signing = this.ctx.receipts
    if (signing !== undefined && status < 500) {
      if (signed !== null)
        signed = withSignedReceipt(signed, signing.signer, {
          resourceUrl: this.endpoint!.resourceUrl,
          network: signing.network,
          payer: this.payment!.payer,
          nowMs: Date.now(),
        })
      this.digestAnswer()
    }
    const inAnswer = this.priced === null ? null : this.priced.receiptInAnswer
    if (inAnswer !== null && signed !== null && status < 500) {
      // Paid in the body: the receipt goes back in the body too (x402 MCP transport).
      const rewriter = inAnswer(Buffer.from(signed[1], 'base64').toString('utf8'))
      rewriter.onHead(head)
      this.stages().add(RANK.rewriter, rewriter)
    }
    // A receipt id only for an answer that can have a receipt: a 5xx is never captured (the payment is
    // released), so its id would answer 404 for good.
    const headers =
      status < 500 ? paidHeaders(this.requestId, this.receiptId!) : relayedHeaders(this.requestId)
    if (signed !== null) headers.unshift(signed)
    // Kept with the answer: the upstream's content headers and the receipt (a replay gets its own request id).
    this.paymentId?.head(status, head, signed)
    return headers
  }

  /** Where receipts are signed, the body as delivered is digested for the final receipt (once). */
  digestAnswer(): void {
    const answer = this.stages()
    if (this.ctx.receipts === undefined || answer.has(RANK.digest)) return
    answer.add(RANK.digest, new ReceiptDigest(this.payment!, this.receiptId!, this.ctx.observed))
  }

  /** ProxyHooks: a body chunk on its way out, through the stages. */
  onResponseData(chunk: Buffer): Buffer {
    return this.answer === null ? chunk : this.answer.onData(chunk)
  }

  onResponseEnd(): Buffer | null {
    return this.answer === null ? null : this.answer.onEnd()
  }

  /** ProxyHooks: a chunked answer can take bytes between the upstream's (an MCP stream's events). */
  onStreamOpen(push: (bytes: Buffer) => boolean): void {
    this.answer?.attach(push)
  }

  capture(status: number, chargeAtomic: bigint, usage: UsageRecord | null): void {
    this.captured = true
    this.payment!.capture({
      ...this.callFacts(),
      // The call id shares its receipt id's random part: a receipt is found by the call's primary key, and
      // the receipt id needs no index of its own (migration 0058). Its merchant, who sees the call id, can
      // read its receipt: nothing on it that the merchant's API does not show.
      callId: this.receiptId === null ? newId('call') : `call_${this.receiptId.slice(5)}`,
      status,
      chargeAtomic,
      usage,
      receiptId: this.receiptId,
      tool: this.priced === null ? null : this.priced.label,
      agent: this.agent,
    })
    countCapture(chargeAtomic, this.agent, signerNames(this.ctx.identity), this.priced?.metricLabel ?? null)
  }

  /** A usage-priced call that was served is charged what its meter measured (stages/usage-meter.ts). */
  captureUsage(ending: Ending): void {
    const meter = this.meter!
    const status = meter.servedStatus
    const usage = meter.charge(ending, this.payment!.coversAtomic)
    this.capture(status, usage.chargeAtomic, usage)
  }

  callFacts(): CallFacts {
    const endpoint = this.endpoint!
    return {
      endpointId: endpoint.id,
      accountId: endpoint.accountId,
      ownerWallet: endpoint.ownerWallet,
      method: this.method,
      pricingModel: this.priced !== null ? this.priced.model : endpoint.pricingModel,
    }
  }

  /** ProxyHooks: the final outcome, exactly once. */
  onDone(outcome: ProxyOutcome): void {
    // A proof serves at most once: it is released for a retry only when the upstream certainly did not serve
    // it (it could not be reached, or answered 5xx; see upstreamFailed). A client that left while the upstream
    // was working may have been served: that claim stays held, is in doubt once its lease runs out, and is
    // refunded at the end of its window rather than served again. What a call in doubt costs is its scheme's
    // to say (Payment.doubt).
    const payment = this.payment
    let released = false
    if (payment !== null) {
      if (this.meter !== null && this.meter.servedStatus !== 0) this.captureUsage(endingOf(outcome))
      released = !this.captured && upstreamFailed(outcome)
      if (released) payment.release()
      else if (!this.captured) payment.doubt(this.callFacts())
    }
    this.answer?.onDone(outcome, this.captured, released)
    const reason = failureOf(outcome)
    const status = statusOf(outcome)
    this.trace?.end(status, reason)
    this.finish(status, reason)
  }

  /** Every answer ends here once (call-outcome.ts): metrics, the call's span, its log lines. */
  finish(status: number, reason?: string, err?: unknown): void {
    // Answered without forwarding (refused, failed): the identifier is free for the payment's retry.
    this.paymentId?.release()
    if (paymentChecks.on) paymentEnded(this.payment)
    recordAnswer(this.ctx.logger, this, status, reason, err)
  }

  /** The client left before an answer: only the span needs closing (the proxy reports its own aborts). */
  finishAborted(): void {
    this.paymentId?.release()
    if (paymentChecks.on) paymentEnded(this.payment)
    this.trace?.finish(499, 'client_aborted')
  }

  /** A payment missing or refused: the 402 its client reads (payment-required.ts). */
  respond402(reason: string, retryAfterMs?: number, requiredHeader?: string): void {
    count402(reason)
    const inBand = this.priced === null ? null : this.priced.paymentRequired
    if (inBand !== null) return this.respondRefused(inBandPaymentRequired(this, reason, inBand), reason)
    // A body we will not forward may have paused the client's socket: let it go.
    this.body?.release()
    // A proof (or sign-in) that did not pay counts against its client's unpaid limit (one without a proof
    // already did).
    if (this.paymentHeader || this.signIn) this.ctx.edge?.proofRefused(this.client)
    const quoteTtlMs = this.ctx.settings.quoteTtlMs
    const a = paymentRequired(this, { reason, quoteTtlMs, retryAfterMs, requiredHeader })
    this.finish(a.status, reason)
    writeAnswer(this.res, a.statusLine, this.requestId, a.contentType, a.headers, a.body)
  }

  /** The scheme answered the request itself (a channel refund): nothing was forwarded. */
  respondAnswered(answer: Extract<Verdict, { ok: 'answered' }>): void {
    this.body?.release()
    this.finish(Number.parseInt(answer.status, 10), answer.reason)
    writeAnswer(this.res, answer.status, this.requestId, null, NO_HEADERS, answer.body, answer.headers)
  }

  /** The endpoint refused the body before anything was forwarded (an MCP body that is not JSON-RPC). */
  respondRefused(refusal: Extract<BodyPrice, { ok: 'refused' }>, reason = 'invalid_body'): void {
    this.body?.release()
    this.finish(Number.parseInt(refusal.status, 10), reason)
    writeAnswer(this.res, refusal.status, this.requestId, refusal.contentType, NO_HEADERS, refusal.body)
  }

  /** payment-identifier: the answer kept from the first time this payment was served. */
  respondReplay(status: number, headers: HeaderPairs, body: Buffer | null): void {
    this.body?.release()
    this.finish(status, 'paid_answer_replayed')
    writeAnswer(this.res, statusLine(status), this.requestId, null, REPLAYED, body ?? '', headers)
  }

  /** An error answer from the registry (src/errors.ts); logged by finish() when it is a 5xx. */
  respondError(
    code: ErrorCode,
    details?: ErrorDetails,
    headers?: FlatHeaders,
    reason?: string,
    err?: unknown,
  ): void {
    this.body?.release()
    this.finish(ERRORS[code].status, reason ?? code, err)
    writeErrorAnswer(this.res, code, this.requestId, details, headers)
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
