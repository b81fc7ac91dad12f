// THE hot path, top to bottom: endpoint → proof → verify → claim → proxy → capture or release.
// Everything read from the uWS request is read synchronously (it dies with the callback); onAborted is
// attached before the first await; answers after an await are corked.
import { createHash, type Hash } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Span } from '@opentelemetry/api'
import { ERRORS, type ErrorCode, type ErrorDetails, writeError } from '../errors.ts'
import { type CallAgent, callAgent, UNSIGNED } from '../identity/call-agent.ts'
import { countAgentCall, countAgentRevenue, countIdentity } from '../identity/count-identity.ts'
import { messageView } from '../identity/message-view.ts'
import { decide } from '../identity/rules.ts'
import type { MessageView } from '../identity/signature-base.ts'
import { forPayment, type Identity } from '../identity/verify-request.ts'
import { newId } from '../ids.ts'
import type { Logger } from '../observability/logger.ts'
import {
  callsCaptured,
  capturedAtomic,
  deliveriesApart,
  deliveriesOnCall,
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
import type { AnswerRewriter, BodyPrice, BodyPricing } from '../pricing/body-price.ts'
import { asksForStreamUsage, type Ending, UsageMeter, withStreamUsage } from '../pricing/meter.ts'
import type { UsagePricing, UsageRecord } from '../pricing/model.ts'
import { requestIdFrom } from '../request-id.ts'
import { cacheCounters } from '../schemes/caches.ts'
import type { SchemeRegistry } from '../schemes/registry.ts'
import type { CallFacts, ClaimOutcome, Payment, Quote, Verdict } from '../schemes/scheme.ts'
import {
  challengeBody,
  mppHeader,
  mppProblem,
  problemBody,
  quoteExpiry,
  v2Header,
  wantsProblem,
} from '../wire/challenge.ts'
import { mppCredential, type Proof, parseProof } from '../wire/proof.ts'
import type { ProofEdge } from './app.ts'
import { peerAddress } from './client-address.ts'
import { CORS_HEADERS, CORS_PAIRS, retryAfterHeaders } from './cors.ts'
import {
  type EndpointCache,
  type LiveEndpoint,
  type LiveIdentityRules,
  loadEndpoint,
  NOT_FOUND,
} from './endpoint-cache.ts'
import { fitsHeld, HeldAnswer } from './held-answer.ts'
import type { ObservedCalls } from './observed-calls.ts'
import { AnswerRecorder, type PaidAnswers, paymentIdentifier, type Reservation } from './paid-answers.ts'
import type { PassUses } from './pass-uses.ts'
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
  type UpstreamTarget,
} from './proxy.ts'
import { type ReceiptSigner, withSignedReceipt } from './receipt-signer.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'

export interface MeteredDeps {
  /** Rate limits: who the client is, and the charge for a proof that did not pay; absent in some tests. */
  edge?: ProofEdge
  endpoints: EndpointCache
  /** The ways to pay (src/schemes/): what a 402 offers, who verifies a payment, claims, settles, receipts. */
  schemes: SchemeRegistry
  dispatcher: UpstreamDispatcher
  logger: Logger
  /** Counts what paid calls did, for the discovery listing (absent in tests of other parts). */
  observed?: ObservedCalls
  /** Signs the receipt on a paid answer (x402 offer-receipt) and digests the body it delivers. */
  receipts?: { signer: ReceiptSigner; network: string }
  /** The `payment-identifier` extension's kept answers; absent: the extension is not read. */
  paidAnswers?: PaidAnswers
  /** Passes: a signed-in call (sign-in-with-x) draws one use; absent: passes are not honoured. */
  passes?: PassUses
  /** database.require_synchronous_standby (src/db/replication-watch.ts): non-null refuses every paid call. */
  replication?: { readonly refusing: string | null }
  /** Web Bot Auth (src/identity/): verifies a signed call to an endpoint with identity rules; absent: every
   * such call is unsigned. */
  identity?: MeteredIdentity
  settings: {
    quoteTtlMs: number
    maxBufferedBodyBytes: number
    /** Usage-priced answers held whole to settle their charge before the head: at most this many bytes. */
    heldAnswerMaxBytes?: number
  }
}

export interface MeteredIdentity {
  /** checkSignature with the configured keys and directories: synchronous, no nonce claimed. */
  verify(msg: MessageView): Identity
  /** Claims a verified signature's nonce (once across instances); only for a call that will be served. */
  claim(identity: Identity): Promise<Identity>
  /** The operator's signer names (bounded metric labels). */
  signerNames: ReadonlySet<string>
  /** The scheme callers reach this service by (the public URL's), for `@scheme` and `@target-uri`. */
  scheme(): string
}

const JSON_TYPE = 'application/json; charset=utf-8'
/** RFC 9457: the answer to a refused MPP credential, and the first 402 of a client speaking MPP. */
const PROBLEM_TYPE = 'application/problem+json'
// Every answer of a metered URL carries CORS (cors.ts): a browser agent reads the 402 and the receipt.
const RETRY_AFTER_1 = ['retry-after', '1', ...CORS_HEADERS]
const RETRY_AFTER_2 = ['retry-after', '2', ...CORS_HEADERS]
const RETRY_AFTER_30 = ['retry-after', '30', ...CORS_HEADERS]
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
const NO_SIGNERS: ReadonlySet<string> = new Set()
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
  /** The tool discovery counts a body-priced call under (bounded like metricLabel); else null. */
  observedLabel: string | null = null
  /** The body's own way to refuse (an in-band PaymentRequired) instead of HTTP 402; and its receipt. */
  paymentRequired: Extract<BodyPrice, { ok: 'priced' }>['paymentRequired'] = null
  receiptInAnswer: ((settlementJson: string) => AnswerRewriter) | null = null
  rewriter: AnswerRewriter | null = null
  resizes = false
  /** The endpoint as the cache held it when the request came in (undefined: not cached). */
  readonly cached: LiveEndpoint | typeof NOT_FOUND | undefined
  /** The upstream's status once it answered below 500, while a usage-priced call's charge is measured. */
  servedStatus = 0
  captured = false
  /** When the request went upstream, and when the upstream's head came back (0: never). */
  forwardedMs = 0
  headMs = 0
  /** SHA-256 of the body as delivered (after any change the meter made), for the signed final receipt. */
  digest: Hash | null = null
  bodyBytes = 0
  /** Hostile input: the sub-path could leave the endpoint's base path. */
  escapingPath = false
  /** The client's rate-limit key, read only when a proof came (its chain look-ups and refusals count). */
  client = ''
  /** payment-identifier: the id and payment digest the payload carries (null: none). */
  pidCandidate: { id: string; digest: string } | null = null
  /** payment-identifier: the id and payment this call reserved (null: none, or no longer held). */
  paidId: { id: string; digest: string } | null = null
  /** payment-identifier: the answer as it streams, kept for a retry; and read on if the client leaves. */
  recorder: AnswerRecorder | null = null
  /** A usage-priced answer held until its charge is settled (held-answer.ts); the proxy reads on meanwhile. */
  held: HeldAnswer | null = null
  readsWhileHeld = false
  keepsAnswer = false
  /** The answer's end went through the hooks (a sized answer ended by the proxy's tryEnd does not). */
  answerEnded = false
  /** An unpaid request from a client speaking MPP (Accept-Payment): its 402 is a problem (RFC 9457). */
  readonly problemWanted: boolean
  headStatus = 0
  rawHead: Buffer[] | null = null
  /** A verified agent's call: the endpoint's target plus x-tollgate-agent (null: the endpoint's own). */
  agentTarget: UpstreamTarget | null = null
  /** An endpoint with identity rules: who called and the rule that priced it, for the call row (else null). */
  agent: CallAgent | null = null
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
    this.paymentHeader =
      req.getHeader('x-payment') ||
      req.getHeader('payment-signature') ||
      mppCredential(req.getHeader('authorization'))
    this.problemWanted =
      this.paymentHeader === '' && wantsProblem(req.getHeader('accept-payment'), req.getHeader('accept'))
    this.requestId = requestIdFrom(req.getHeader('x-request-id'))
    this.method = req.getCaseSensitiveMethod().toUpperCase()
    this.subPath = req.getUrl().slice(3 + this.endpointId.length)
    const cached = ctx.endpoints.get(this.endpointId)
    this.cached = cached
    // Only an endpoint that sells a pass reads the sign-in header: every other call pays nothing for it.
    this.signIn =
      ctx.passes !== undefined && (cached === undefined || (cached !== NOT_FOUND && cached.pass !== null))
        ? req.getHeader('sign-in-with-x')
        : ''
    if (tracing.on) {
      this.span = startRequestSpan('metered call', req.getHeader('traceparent'), {
        'tollgate.endpoint_id': this.endpointId,
        'tollgate.request_id': this.requestId,
      })
    }
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
        remoteAddress: peerAddress(res),
        peerTrusted: ctx.edge?.peerTrusted(res) === true,
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
    if (entry === NOT_FOUND || !entry.active) {
      if (this.paymentHeader) this.ctx.edge?.proofRefused(this.client)
      return this.respondError('endpoint_not_found', {
        message: `no active metered endpoint ${this.endpointId}`,
      })
    }
    this.endpoint = entry
    if (entry.bodyPricing !== null) return this.priceByBody(entry.bodyPricing)
    this.usage = entry.usage
    this.pricingModel = entry.pricingModel
    const quote = entry.quoteFor(this.method, this.subPath)
    if (entry.identity !== null) return this.withIdentityRules(entry.identity, quote)
    this.withQuote(quote)
  }

  /**
   * Identity rules: who is calling decides the price (docs/agent-identity.md). A signed call is verified
   * (a verified nonce is claimed in the database) before anything is priced, claimed or forwarded. `base`:
   * what the call costs without rules (its route's price, or an MCP tool's).
   */
  withIdentityRules(live: LiveIdentityRules, base: Quote): void {
    const forward = this.forward
    // Not read: the endpoint gained rules after this request was taken (a change landed between).
    if (forward === null) return this.respondUnavailable('the endpoint changed; retry', 'endpoint_changed')
    const headers = forward.headers
    const identityDeps = this.ctx.identity
    const signed =
      identityDeps !== undefined &&
      (headerOf(headers, 'signature-input') !== '' || headerOf(headers, 'signature') !== '')
    if (!signed) return this.withIdentity(live, { status: 'unsigned' }, base)
    const fields: Record<string, string> = {}
    for (const [k, v] of headers) fields[k] = fields[k] === undefined ? v : `${fields[k]}, ${v}`
    const view = messageView({
      method: this.method,
      scheme: identityDeps.scheme(),
      host: fields.host ?? '',
      target: `/m/${this.endpointId}${forward.pathAndQuery}`,
      headers: fields,
    })
    const checked = identityDeps.verify(view)
    // A browsing signature (Visa TAP) does not carry authority to pay: on a paying call it counts as failed.
    const identity = this.paying() ? forPayment(checked) : checked
    if (identity.status !== 'verified' || !this.serves(live, identity, base))
      return this.withIdentity(live, identity, base)
    identityDeps.claim(identity).then(
      (claimed) => {
        if (this.abort.aborted) return this.finishAborted()
        this.withIdentity(live, claimed, base)
      },
      (err) =>
        this.respondUnavailable('the signature could not be checked; retry shortly', 'identity_failed', err),
    )
  }

  /** The call carries a payment (or a pass sign-in where a pass is sold): it will be served if it pays. */
  paying(): boolean {
    return this.paymentHeader !== '' || (this.signIn !== '' && this.endpoint!.pass !== null)
  }

  /**
   * Whether this verified call is served (free for its signer, or paying): only then is its nonce claimed.
   * A 402 or a 403 serves nothing, so it writes nothing; the signature stays good for one served call.
   */
  serves(live: LiveIdentityRules, identity: Identity, base: Quote): boolean {
    const decision = decide(live.rules, identity, base.amountAtomic, base.varies)
    if (decision.kind === 'block') return false
    return decision.atomic === 0n || this.paying()
  }

  withIdentity(live: LiveIdentityRules, identity: Identity, base: Quote): void {
    const entry = this.endpoint!
    const names = this.ctx.identity?.signerNames ?? NO_SIGNERS
    countIdentity(names, identity)
    const decision = decide(live.rules, identity, base.amountAtomic, base.varies)
    const signer = identity.status === 'verified' ? identity.signer : UNSIGNED
    if (decision.kind === 'block') {
      countAgentCall(names, signer, 'block')
      return this.respondError('agent_blocked')
    }
    countAgentCall(names, signer, decision.action)
    this.agent = callAgent(identity, decision)
    if (identity.status === 'verified') {
      const target = entry.target
      this.agentTarget = {
        ...target,
        injectHeaders: [...target.injectHeaders, ['x-tollgate-agent', identity.signer]],
      }
    }
    // Free for this caller: forwarded without payment, like a free MCP method; nothing is booked.
    if (decision.atomic === 0n) return this.forwardUnpaid()
    this.withQuote(decision.action === 'endpoint_price' ? base : live.quoteFor(decision.rule, base))
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
      const forward = this.forward!
      const target = this.endpoint!.target
      const price = pricing.price(this.method, whole, {
        endpointId: this.endpointId,
        pathAndQuery: forward.pathAndQuery,
        origin: target.origin,
        basePath: target.basePath,
        accept: headerOf(forward.headers, 'accept'),
        mcpSession: headerOf(forward.headers, 'mcp-session-id') !== '',
      })
      if (price.ok === 'free') {
        if (price.rewriter !== undefined) this.rewriter = price.rewriter()
        return this.forwardUnpaid()
      }
      if (price.ok === 'refused') return this.respondRefused(price)
      this.usage = price.usage
      this.pricingModel = price.model
      this.label = price.label
      this.metricLabel = price.metricLabel
      this.observedLabel = price.observedLabel
      this.paymentRequired = price.paymentRequired
      if (!this.paymentHeader && price.payment !== null) {
        this.paymentHeader = price.payment
        this.receiptInAnswer = price.receiptInAnswer
      }
      const forwardBody = price.forwardBody
      // The payment read from the body is not forwarded (the MCP server has no use for it).
      if (forwardBody !== null && body.rewrite(() => forwardBody))
        setContentLength(this.forward!.headers, body.length)
      // A priced tool, resource or prompt: who calls may change its price, as on an HTTP endpoint.
      const identity = this.endpoint!.identity
      if (identity !== null) return this.withIdentityRules(identity, price.quote)
      this.withQuote(price.quote)
    })
  }

  /** Free by the endpoint's own terms (a protocol method, a free tool): forwarded as is, nothing booked. */
  forwardUnpaid(): void {
    const target = this.agentTarget ?? this.endpoint!.target
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, target, this.abort, this)
  }

  withQuote(quote: Quote): void {
    const entry = this.endpoint!
    this.quote = quote
    // Standbys attached, none synchronous, and the operator required one: no payment is taken (nor invited
    // by a 402) whose claim a failover could forget and serve again. Free calls (above) go on.
    if (this.ctx.replication?.refusing)
      return this.respondError('replication_unsafe', undefined, RETRY_AFTER_30)
    if (!this.paymentHeader) {
      // A pass holder signed in: one use of the pass pays this call (a payment header, if any, wins).
      if (this.signIn && entry.pass !== null) return this.usePass()
      return this.respond402('payment_required')
    }
    // The scheme that reads the payment verifies it against this request's price (src/schemes/).
    const proof = parseProof(this.paymentHeader)
    // payment-identifier: read here (no query); the database is asked only once the payment verified, or
    // when it is refused as already used (a retry): an unpaid request never writes.
    this.pidCandidate = this.ctx.paidAnswers === undefined ? null : paymentIdentifier(proof)
    this.verifyProof(proof)
  }

  /** The sign-in checked and one use drawn (pass-uses.ts): then the way of any verified payment. */
  usePass(): void {
    const entry = this.endpoint!
    if (this.span !== null) this.step = startChildSpan(this.span, 'verify')
    this.ctx.passes!.use(this.signIn, { id: entry.id, resourceUrl: entry.resourceUrl }).then(
      (v) => this.withVerdict(v),
      (err) => this.respondUnavailable('the sign-in could not be checked; retry shortly', 'pass_failed', err),
    )
  }

  /** payment-identifier, a verified payment: the id becomes its own before the claim, or it is taken. */
  reserveThenClaim(payment: Payment): void {
    const pid = this.pidCandidate!
    this.ctx.paidAnswers!.reserve({ ...pid, endpointId: this.endpoint!.id }).then(
      (r) => {
        if (r.kind === 'go') {
          this.paidId = pid
          this.recorder = new AnswerRecorder(this.ctx.paidAnswers!.settings.maxAnswerBytes)
          this.keepsAnswer = true
          if (this.abort.aborted) {
            payment.drop()
            return this.finishAborted()
          }
          return this.claim(payment)
        }
        // Not claimed: the payment stays what it was (the kept answer, or another payment, holds the id).
        payment.drop()
        if (this.abort.aborted) return this.finishAborted()
        this.withReservation(r)
      },
      (err) => {
        payment.drop()
        this.respondUnavailable(
          'the payment identifier could not be recorded; retry shortly',
          'paid_answer_failed',
          err,
        )
      },
    )
  }

  /** payment-identifier, a payment refused as already used: the retry of a call whose answer was kept? */
  replayOrRefuse(verdict: Extract<Verdict, { ok: false }>): void {
    const pid = this.pidCandidate!
    this.ctx.paidAnswers!.lookup({ ...pid, endpointId: this.endpoint!.id }).then(
      (r) => {
        if (this.abort.aborted) return this.finishAborted()
        if (r === null) return this.respond402(verdict.reason, verdict.retryAfterMs, verdict.requiredHeader)
        this.withReservation(r)
      },
      (err) =>
        this.respondUnavailable(
          'the payment identifier could not be looked up; retry shortly',
          'paid_answer_failed',
          err,
        ),
    )
  }

  /** payment-identifier: what the id holds, answered (never 'go' here). */
  withReservation(r: Reservation): void {
    switch (r.kind) {
      case 'go':
        return this.respondError('invalid_state')
      case 'replay':
        return this.respondReplay(r.answer.status ?? 200, r.answer.headers ?? [], r.answer.body)
      case 'conflict':
        return this.respondError('idempotency_key_reused', {
          message: 'this payment-identifier was used with another payment (or another endpoint)',
        })
      case 'in_progress':
        return this.respondError('payment_in_progress', undefined, RETRY_AFTER_1)
      case 'not_kept':
        return this.respondError('invalid_state', {
          message:
            r.why === 'too_large'
              ? 'this payment was used once and its answer was over the size kept for retries: it is not sent again, and not charged again'
              : 'this payment was used once and its answer did not complete: it is not sent again, and not charged again',
        })
    }
  }

  verifyProof(proof: Proof): void {
    const entry = this.endpoint!
    if (this.span !== null) this.step = startChildSpan(this.span, 'verify')
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
    if (this.step !== null) this.endStep(undefined, verdict.ok === true ? undefined : 'refused')
    if (this.abort.aborted) {
      // Verified but never forwarded: the scheme lets go of what it holds.
      if (verdict.ok === true) verdict.payment.drop()
      return this.finishAborted()
    }
    switch (verdict.ok) {
      case false:
        if (this.pidCandidate !== null && verdict.reason === 'proof_already_used')
          return this.replayOrRefuse(verdict)
        return this.respond402(verdict.reason, verdict.retryAfterMs, verdict.requiredHeader)
      case 'unavailable':
        return this.respondUnavailable(verdict.message, verdict.reason, verdict.err)
      case 'error':
        return this.respondError(
          verdict.code,
          verdict.message ? { message: verdict.message } : undefined,
          retryAfterHeaders(verdict.retryAfterS),
        )
      case 'answered':
        return this.respondAnswered(verdict)
    }
    const payment = verdict.payment
    this.payment = payment
    if (this.pidCandidate !== null) return this.reserveThenClaim(payment)
    this.claim(payment)
  }

  claim(payment: Payment): void {
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
    if (outcome === 'insufficient_funds') {
      if (this.abort.aborted) return this.finishAborted()
      return this.respond402('insufficient_funds')
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
    this.forwardedMs = performance.now()
    const target = this.agentTarget ?? this.endpoint!.target
    proxy(this.ctx.dispatcher, this.res, this.forward!, this.body!, target, this.abort, this)
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
  onResponseHead(status: number, head: Buffer[]): Array<[string, string]> | Promise<Array<[string, string]>> {
    const payment = this.payment
    this.headStatus = status
    this.rawHead = head
    const meter = this.meter
    this.headMs = performance.now()
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
      if (payment.settlesEarly === true) {
        const held = this.holdAnswer(head)
        if (held !== null) return held
      }
    } else if (status < 500) {
      // Captured once the upstream answered below 500, even if the client leaves mid-body.
      // The capture is queued here and group-committed by the writer: its span covers the hand-over.
      const captureSpan = this.span === null ? null : startChildSpan(this.span, 'capture')
      this.captured = true
      this.capture(status, payment.coversAtomic, null)
      if (captureSpan !== null) endSpan(captureSpan)
    }
    // A scheme that settles before the answer holds the head until its receipt names the transaction.
    const settling = this.captured ? (payment.settleBeforeAnswer?.() ?? null) : null
    if (settling !== null) return settling.then((receipt) => this.answerHeaders(receipt))
    return this.answerHeaders(payment.receipt(status < 500))
  }

  /**
   * Settled before the answer though charged at its end: the answer is held whole (bounded), the charge
   * captured (and settled) at its end, and the head written with the receipt that names the transaction.
   */
  holdAnswer(head: Buffer[]): Promise<Array<[string, string]>> | null {
    const max = this.ctx.settings.heldAnswerMaxBytes
    if (max === undefined || this.rewriter !== null || this.receiptInAnswer !== null) return null
    if (!fitsHeld(head, max)) return null
    // Read when the head goes out, long after the socket buffer the head is a view of was reused.
    this.rawHead = head.map((b) => Buffer.from(b))
    // The body passes the digest before the head goes out.
    if (this.ctx.receipts !== undefined) this.digest = createHash('sha256')
    this.readsWhileHeld = true
    const held = new HeldAnswer(max, {
      pending: () => this.answerHeaders(this.payment!.receipt(true)),
      settle: () => {
        this.captureUsage({ kind: 'responded', status: this.servedStatus, bytes: this.bodyBytes })
        this.servedStatus = 0
        const settling = this.payment!.settleBeforeAnswer?.() ?? null
        if (settling === null) return Promise.resolve(this.answerHeaders(this.payment!.receipt(true)))
        return settling.then((receipt) => this.answerHeaders(receipt))
      },
    })
    this.held = held
    return held.head
  }

  /** The headers tollgate adds to a paid answer. */
  answerHeaders(receipt: [string, string] | null): Array<[string, string]> {
    // tollgate answers CORS for metered URLs: the upstream's own allow-origin is dropped (proxy.ts).
    let signed = receipt
    const signing = this.ctx.receipts
    if (signing !== undefined && this.headStatus < 500) {
      if (signed !== null)
        signed = withSignedReceipt(signed, signing.signer, {
          resourceUrl: this.endpoint!.resourceUrl,
          network: signing.network,
          payer: this.payment!.payer,
          nowMs: Date.now(),
        })
      this.digest ??= createHash('sha256')
    }
    if (this.receiptInAnswer !== null && signed !== null && this.headStatus < 500) {
      // Paid in the body: the receipt goes back in the body too (x402 MCP transport).
      this.rewriter = this.receiptInAnswer(Buffer.from(signed[1], 'base64').toString('utf8'))
      this.rewriter.onHead(this.rawHead!)
      this.resizes = true
    }
    // A receipt id only for an answer that can have a receipt: a 5xx is never captured (the payment is
    // released), so its id would answer 404 for good.
    const ids: Array<[string, string]> =
      this.headStatus < 500
        ? [['x-request-id', this.requestId], ['x-receipt-id', this.receiptId!], ACAO, EXPOSE]
        : [['x-request-id', this.requestId], ACAO, EXPOSE]
    if (signed !== null) ids.unshift(signed)
    // Kept with the answer: the upstream's content headers and the receipt (a replay gets its own request id).
    this.recorder?.head(this.headStatus, this.rawHead!, signed === null ? [] : [signed])
    return ids
  }

  /** ProxyHooks: a body chunk on its way out (a usage meter reads it, and may take an event out). */
  onResponseData(chunk: Buffer): Buffer {
    const metered = this.meter === null ? chunk : this.meter.onData(chunk)
    // The receipt's digest and a kept answer read the bytes as delivered (after any rewrite).
    const out = this.rewriter === null ? metered : this.rewriter.onData(metered)
    this.delivered(out)
    return out
  }

  onResponseEnd(): Buffer | null {
    this.answerEnded = true
    const held = this.meter === null ? null : this.meter.onEnd()
    const rewriter = this.rewriter
    let tail = held
    if (rewriter !== null) {
      const last = held === null ? null : rewriter.onData(held)
      const rest = rewriter.onEnd()
      if (last === null || last.length === 0) tail = rest
      else tail = rest === null ? last : Buffer.concat([last, rest])
    }
    if (tail !== null) this.delivered(tail)
    this.held?.end()
    return tail
  }

  /** Bytes on their way to the client: digested for the signed receipt, kept for a payment-identifier retry. */
  delivered(bytes: Buffer): void {
    this.held?.data(bytes.length)
    if (this.digest !== null) {
      this.digest.update(bytes)
      this.bodyBytes += bytes.length
    }
    this.recorder?.data(bytes)
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
      pricingModel: this.pricingModel,
      usage,
      receiptId: this.receiptId,
      tool: this.label,
      agent: this.agent,
    })
    callsCaptured.inc()
    capturedAtomic.inc(Number(chargeAtomic))
    if (this.agent !== null)
      countAgentRevenue(this.ctx.identity?.signerNames ?? NO_SIGNERS, this.agent, chargeAtomic)
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
      pricingModel: this.pricingModel,
    }
  }

  /** payment-identifier: the whole answer of a served call is kept; otherwise the id says why not. */
  keepAnswer(outcome: ProxyOutcome, released: boolean): void {
    const id = this.paidId!.id
    this.paidId = null
    const store = this.ctx.paidAnswers!
    if (released) return store.close(id, 'released')
    const complete = outcome.kind === 'responded' || (outcome.kind === 'client_aborted' && this.answerEnded)
    if (!this.captured || !complete) return store.close(id, 'lost')
    const r = this.recorder!
    store.store(id, r.status, r.headers, r.body())
  }

  /** A reservation this request made but will not use (refused, failed, or the client left first). */
  releaseReservation(): void {
    if (this.paidId === null) return
    this.ctx.paidAnswers!.close(this.paidId.id, 'released')
    this.paidId = null
  }

  /** payment-identifier: the answer kept from the first time this payment was served. */
  respondReplay(status: number, headers: Array<[string, string]>, body: Buffer | null): void {
    this.body?.release()
    this.finish(status, 'paid_answer_replayed')
    const res = this.res
    res.cork(() => {
      res.writeStatus(`${status} ${STATUS_CODES[status] ?? ''}`)
      res.writeHeader('x-request-id', this.requestId)
      res.writeHeader('payment-identifier-replayed', 'true')
      for (const [name, value] of headers) res.writeHeader(name, value)
      res.writeHeader(ACAO[0], ACAO[1])
      res.writeHeader(EXPOSE[0], EXPOSE[1])
      res.end(body ?? '')
    })
  }

  /** ProxyHooks: a chunked answer can take bytes between the upstream's (an MCP stream's events). */
  onStreamOpen(push: (bytes: Buffer) => boolean): void {
    this.rewriter?.attach?.(push)
  }

  /** ProxyHooks: the final outcome, exactly once. */
  onDone(outcome: ProxyOutcome): void {
    this.rewriter?.close?.()
    // A proof serves at most once: it is released for a retry only when the upstream certainly did not serve
    // it (it could not be reached, or answered 5xx; see upstreamFailed). A client that left while the upstream was working may
    // have been served: that claim stays held, is in doubt once its lease runs out, and is refunded at the
    // end of its window rather than served again. What a call in doubt costs is its scheme's to say (Payment.doubt).
    const payment = this.payment
    if (payment !== null) {
      if (this.servedStatus !== 0) this.captureUsage(outcome)
      const released = !this.captured && upstreamFailed(outcome)
      if (released) payment.release()
      else if (!this.captured) payment.doubt(this.callFacts())
      this.ctx.observed?.record({
        endpointId: this.endpointId,
        tool: this.observedLabel,
        payer: payment.payer,
        served: this.captured,
        upstreamMs: this.headMs === 0 ? null : this.headMs - this.forwardedMs,
        signer: this.agent?.signer,
      })
      // Only an answer delivered whole has a digest to sign: a partial one says so on its receipt.
      if (this.digest !== null && outcome.kind === 'responded') {
        const sha256 = this.digest.digest('hex')
        // On the call row when its capture is still queued; else a record of its own, a few seconds later.
        if (payment.deliver?.(sha256, this.bodyBytes) === true) deliveriesOnCall.inc()
        else {
          deliveriesApart.inc()
          this.ctx.observed?.delivered(this.receiptId!, sha256, this.bodyBytes)
        }
      }
      if (this.paidId !== null) this.keepAnswer(outcome, released)
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
    // Answered without forwarding (refused, failed): the identifier is free for the payment's retry.
    if (this.paidId !== null) this.releaseReservation()
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
    if (this.paidId !== null) this.releaseReservation()
    if (this.span !== null) endSpan(this.span, 499, 'client_aborted')
  }

  endStep(status?: number, reason?: string): void {
    endSpan(this.step!, status, reason)
    this.step = null
  }

  respond402(reason: string, retryAfterMs?: number, requiredHeader?: string): void {
    // A refused MPP credential is answered as the Payment scheme names the refusal (an RFC 9457 problem).
    const problem =
      mppCredential(this.paymentHeader) === '' ? null : mppProblem(this.quote!.challenge, reason)
    if (this.paymentRequired !== null) {
      // Answered in-band (x402 MCP transport): the PaymentRequired the v2 header would carry, in the body.
      count402(reason)
      const required = `{"x402Version":2,"error":"${reason}"${this.quote!.challenge.v2Rest}`
      const mpp = mppHeader(this.quote!.challenge, Date.now())
      return this.respondRefused({ ok: 'refused', ...this.paymentRequired(required, mpp, problem) }, reason)
    }
    // A body we will not forward may have paused the client's socket: let it go.
    this.body?.release()
    // A proof (or sign-in) that did not pay counts against its client's unpaid limit (one without a proof
    // already did).
    if (this.paymentHeader || this.signIn) this.ctx.edge?.proofRefused(this.client)
    count402(reason)
    const challenge = this.quote!.challenge
    const requestId = this.requestId
    const text = challengeBody(challenge, reason, quoteExpiry(this.ctx.settings.quoteTtlMs), requestId)
    // The same price for MPP clients (Machine Payments Protocol): a fresh challenge with every 402.
    const mpp = mppHeader(challenge, Date.now())
    // The first 402 of a client that speaks MPP is the spec's payment-required problem (x402 members kept).
    const answered =
      problem ?? (reason === 'payment_required' && this.problemWanted ? mppProblem(challenge, reason) : null)
    const problemAnswer = answered !== null && mpp !== null
    // The spec gives method-unsupported a 400 (still with a fresh challenge); every other refusal is a 402.
    const status = problemAnswer && answered.status === 400 ? 400 : 402
    this.finish(status, reason)
    const res = this.res
    res.cork(() => {
      res.writeStatus(status === 400 ? '400 Bad Request' : '402 Payment Required')
      res.writeHeader('content-type', problemAnswer ? PROBLEM_TYPE : JSON_TYPE)
      res.writeHeader('x-request-id', requestId)
      // The same URL answers differently once paid: no cache may keep a 402 (nor the reason in it).
      res.writeHeader('cache-control', 'no-store')
      res.writeHeader('access-control-allow-origin', '*')
      res.writeHeader('access-control-expose-headers', EXPOSE[1])
      const pass = this.endpoint!.pass
      // A pass endpoint's 402 carries a fresh sign-in challenge (its nonce is single-use): built per answer.
      res.writeHeader(
        'payment-required',
        requiredHeader ?? (pass === null ? v2Header(challenge, reason) : pass.v2Header(challenge, reason)),
      )
      if (mpp !== null) res.writeHeader('www-authenticate', mpp)
      if (retryAfterMs !== undefined)
        res.writeHeader('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
      res.end(problemAnswer ? problemBody(answered, mpp, text) : text)
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
      for (const [name, value] of CORS_PAIRS) res.writeHeader(name, value)
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
      for (const [name, value] of CORS_PAIRS) res.writeHeader(name, value)
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

/** A request header's value ('' when absent); names are lower-case as uWS gives them. */
function headerOf(headers: Array<[string, string]>, name: string): string {
  for (const h of headers) if (h[0] === name) return h[1]
  return ''
}

/** The forwarded content-length after the body was rewritten. */
function setContentLength(headers: Array<[string, string]>, length: number): void {
  for (const h of headers) if (h[0] === 'content-length') h[1] = String(length)
}
