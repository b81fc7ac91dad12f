// /pay/:payment_id: the hosted checkout for browsers (page, status polling, QR) and the 402 flow for agents
// (GET → requirement, POST with x-payment → paid). The uWS request is read synchronously, onAborted is set
// before the first await, and every answer after an await is corked.
import { LRUCache } from 'lru-cache'
import { explorerTxUrl } from '../chain/networks.ts'
import { findClaim } from '../db/claims.ts'
import {
  type ApplyOutcome,
  amountDue,
  applyPaymentProof,
  type CheckoutPaymentRow,
  effectiveStatus,
  findCheckoutPayment,
  type PaymentView,
} from '../db/payments.ts'
import type { Sql } from '../db/sql.ts'
import { ERRORS, type ErrorCode, errorBody } from '../errors.ts'
import { toDollars } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import { httpDuration, httpRequests, paymentRequired, statusClass } from '../observability/metrics.ts'
import { requestIdFrom } from '../request-id.ts'
import type { UwsRoute } from './app.ts'
import {
  buildChallenge,
  type Challenge,
  type ChallengeChain,
  challengeBody,
  quoteExpiry,
} from './challenge.ts'
import {
  type CheckoutStatus,
  MESSAGE_CSP,
  PAGE_CSP,
  renderCheckoutPage,
  renderMessagePage,
} from './checkout-page.ts'
import { parseProof } from './proof.ts'
import { qrSvg } from './qr.ts'
import { statusLine } from './uws.ts'
import type { Verifier, VerifyResult } from './verifier.ts'

export interface CheckoutDeps {
  sql: Sql
  verifier: Verifier
  chain: ChallengeChain & { explorerUrl: string | null }
  publicUrl(): string
  logger: Logger
  settings: {
    ownerShareBps: number
    quoteTtlMs: number
    bodyLimitBytes: number
  }
}

const JSON_TYPE = 'application/json; charset=utf-8'
const HTML_TYPE = 'text/html; charset=utf-8'
const PAYMENT_ID = /^pay_[0-9A-Za-z]{1,64}$/
const NETWORK_LABELS: Record<string, string> = {
  base: 'Base',
  'base-sepolia': 'Base Sepolia (testnet)',
  local: 'Local test chain',
}

type Headers = Array<[string, string]>

export function createCheckoutRoute(deps: CheckoutDeps): UwsRoute {
  const { sql, verifier, chain, settings } = deps
  const networkLabel = NETWORK_LABELS[chain.network] ?? chain.network
  // One requirement per (payment, amount due): rebuilt only when a partial payment changes what is due.
  const challenges = new LRUCache<string, Challenge>({ max: 10_000 })
  const view = (): PaymentView => ({
    publicUrl: deps.publicUrl(),
    network: chain.network,
    chainId: chain.chainId,
    treasury: chain.treasury,
    usdcAddress: chain.usdcAddress,
  })

  function challengeFor(p: CheckoutPaymentRow): Challenge {
    const due = amountDue(p)
    const key = `${p.id}:${due}`
    let c = challenges.get(key)
    if (!c) {
      c = buildChallenge(chain, {
        resourceUrl: `${deps.publicUrl()}/pay/${p.id}`,
        description: p.description,
        priceAtomic: due,
        idField: 'payment_id',
        id: p.id,
        maxTimeoutSeconds: 60,
      })
      challenges.set(key, c)
    }
    return c
  }

  function statusOf(p: CheckoutPaymentRow): CheckoutStatus {
    const status = effectiveStatus(p)
    const due = status === 'pending' ? amountDue(p) : 0n
    return {
      id: p.id,
      object: 'payment',
      status,
      business_name: p.business_name,
      description: p.description,
      amount: toDollars(p.amount_atomic),
      amount_atomic: p.amount_atomic.toString(),
      amount_received: toDollars(p.amount_received_atomic),
      amount_received_atomic: p.amount_received_atomic.toString(),
      amount_due: toDollars(due),
      amount_due_atomic: due.toString(),
      currency: 'USDC',
      network: chain.network,
      chain_id: chain.chainId,
      recipient: chain.treasury,
      asset: chain.usdcAddress,
      expires_at: p.expires_at.toISOString(),
      paid_at: p.paid_at?.toISOString() ?? null,
      transaction: p.transaction,
      transaction_url: p.transaction ? explorerTxUrl(chain.explorerUrl, p.transaction) : null,
      payer: p.payer,
      success_url: p.success_url,
    }
  }

  /** EIP-681: a wallet that scans it proposes the USDC transfer of the amount due to the treasury. */
  function eip681(due: bigint): string {
    return `ethereum:${chain.usdcAddress}@${chain.chainId}/transfer?address=${chain.treasury}&uint256=${due}`
  }

  return function checkout(res, req): void {
    const startedMs = performance.now()
    let aborted = false
    res.onAborted(() => {
      aborted = true
    })
    const id = req.getParameter(0) ?? ''
    const method = req.getCaseSensitiveMethod().toUpperCase()
    const rest = req.getUrl().slice('/pay/'.length + id.length)
    const accept = req.getHeader('accept')
    const proofHeader = req.getHeader('x-payment') || req.getHeader('payment-signature')
    const wantsHtml = accept.includes('text/html')
    const requestId = requestIdFrom(req.getHeader('x-request-id'))
    /** What made a 5xx, for its one log line. */
    let failure: unknown

    function send(status: number, type: string, body: string, headers: Headers = []): void {
      if (aborted) return
      aborted = true
      const cls = statusClass(status)
      httpRequests.labels('checkout', cls).inc()
      httpDuration.labels('checkout', cls).observe((performance.now() - startedMs) / 1000)
      const logger = deps.logger
      if (status >= 500) {
        logger.error('checkout request failed', {
          request_id: requestId,
          payment_id: id,
          status,
          err: failure,
        })
      } else if (logger.access.on && logger.access.sample()) {
        logger.info('access', { route: 'checkout', request_id: requestId, payment_id: id, method, status })
      }
      res.cork(() => {
        res
          .writeStatus(statusLine(status))
          .writeHeader('content-type', type)
          .writeHeader('cache-control', 'no-store')
          .writeHeader('x-request-id', requestId)
        for (const [k, v] of headers) res.writeHeader(k, v)
        res.end(body)
      })
    }
    /** An error answer from the registry (src/errors.ts), with the request id. */
    function sendError(
      code: ErrorCode,
      message?: string,
      extra?: Record<string, unknown>,
      headers?: Headers,
    ): void {
      send(ERRORS[code].status, JSON_TYPE, errorBody(code, requestId, { message, extra }), headers)
    }
    function send402(p: CheckoutPaymentRow, reason: string, retryAfterMs?: number): void {
      paymentRequired.labels(reason).inc()
      const c = challengeFor(p)
      let body = challengeBody(c, reason, quoteExpiry(settings.quoteTtlMs), requestId)
      // What was already received, so an agent that underpaid knows why the price is lower now.
      body = `${body.slice(0, -1)},"amount_received_atomic":"${p.amount_received_atomic}","payment_status":"pending"}`
      const headers: Headers = [['payment-required', c.v2Header]]
      if (retryAfterMs !== undefined)
        headers.push(['retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000)))])
      send(402, JSON_TYPE, body, headers)
    }
    /** The answer for a payment that takes no payment now: 200 paid, 410 expired or canceled. */
    function sendState(p: CheckoutPaymentRow): void {
      const s = statusOf(p)
      if (s.status === 'pending') return send402(p, 'payment_required')
      if (s.status === 'paid') return send(200, JSON_TYPE, JSON.stringify(s))
      sendError(stateCode(s.status), `payment ${p.id} is ${s.status} and cannot be paid`, { payment: s })
    }
    function sendPage(p: CheckoutPaymentRow): void {
      const s = statusOf(p)
      const due = BigInt(s.amount_due_atomic)
      const qr = s.status === 'pending' ? eip681(due) : null
      const html = renderCheckoutPage({
        status: s,
        networkLabel,
        qrSvg: qr ? qrSvg(qr, { ecc: 'L', label: `Pay ${s.amount_due} USDC` }) : null,
        eip681: qr,
      })
      const headers: Headers = [
        ['content-security-policy', PAGE_CSP],
        ['x-content-type-options', 'nosniff'],
        ['referrer-policy', 'no-referrer'],
      ]
      send(s.status === 'expired' || s.status === 'canceled' ? 410 : 200, HTML_TYPE, html, headers)
    }
    function sendNotFound(): void {
      if (wantsHtml && rest.length <= 1) {
        return send(
          404,
          HTML_TYPE,
          renderMessagePage({
            title: 'Payment not found',
            message:
              'This payment link is not valid. Check the link you were given, or ask the merchant for a new one.',
          }),
          [['content-security-policy', MESSAGE_CSP]],
        )
      }
      sendError('payment_not_found', `no payment ${id}`)
    }

    if (!PAYMENT_ID.test(id)) return sendNotFound()
    const isRoot = rest === '' || rest === '/'
    if (!(isRoot && (method === 'GET' || method === 'POST')) && !(!isRoot && method === 'GET')) {
      if (isRoot || rest === '/status' || rest === '/qr.svg') {
        return sendError('method_not_allowed', `${method} is not allowed here`, undefined, [
          ['allow', isRoot ? 'GET, POST' : 'GET'],
        ])
      }
    }

    findCheckoutPayment(sql, id).then(
      (p) => {
        if (aborted) return
        if (!p) return sendNotFound()
        if (rest === '/status') return send(200, JSON_TYPE, JSON.stringify(statusOf(p)))
        if (rest === '/qr.svg') {
          if (effectiveStatus(p) !== 'pending')
            return sendError(stateCode(effectiveStatus(p)), 'nothing is due')
          return send(200, 'image/svg+xml', qrSvg(eip681(amountDue(p))), [
            ['x-content-type-options', 'nosniff'],
          ])
        }
        if (!isRoot) return sendError('route_not_found', `no route ${method} /pay/${id}${rest}`)
        if (proofHeader) return pay(p, proofHeader)
        if (method === 'GET' && wantsHtml) return sendPage(p)
        sendState(p)
      },
      (err) => fail(err),
    )

    function pay(p: CheckoutPaymentRow, header: string): void {
      const proof = parseProof(header)
      const verified = verifier.verify(proof)
      if (verified instanceof Promise) verified.then((r) => withVerified(p, r), fail)
      else withVerified(p, verified)
    }

    function withVerified(p: CheckoutPaymentRow, result: VerifyResult): void {
      if (aborted) return
      if (!result.ok) {
        if (result.reason === 'rpc_unavailable') {
          failure = 'rpc_unavailable'
          return sendError(
            'verification_unavailable',
            'the chain could not be reached to verify the payment; retry shortly',
          )
        }
        // A bad proof against a payment that takes none: say what the payment is, not what it costs.
        if (effectiveStatus(p) !== 'pending') return sendState(p)
        return send402(p, result.reason, result.retryAfterMs)
      }
      // x402 authorizations pay metered calls only for now: a checkout must see the money move before it
      // is marked paid (settlement is later), and a refund of one that never settled would pay out nothing.
      if (result.kind !== 'tx') {
        if (effectiveStatus(p) !== 'pending') return sendState(p)
        return send402(p, 'unsupported_proof')
      }
      const proof = {
        proofKey: result.proofKey,
        kind: 'tx' as const,
        payer: result.payer,
        valueAtomic: result.valueAtomic,
        transaction: result.transaction,
      }
      applyPaymentProof(sql, {
        paymentId: p.id,
        proof,
        ownerShareBps: settings.ownerShareBps,
        view: view(),
      }).then((outcome) => withOutcome(p, outcome, result.proofKey), fail)
    }

    function withOutcome(before: CheckoutPaymentRow, outcome: ApplyOutcome, proofKey: string): void {
      if (aborted) return
      switch (outcome.kind) {
        case 'not_found':
          return sendNotFound()
        case 'applied': {
          const p = { ...before, ...outcome.payment }
          if (outcome.paid) return send(200, JSON_TYPE, JSON.stringify(statusOf(p)))
          return send402(p, 'underpaid')
        }
        case 'refund_scheduled': {
          const p = { ...before, ...outcome.payment }
          const s = statusOf(p)
          const what = outcome.reason === 'already_paid' ? 'is already paid' : `is ${s.status}`
          return sendError(
            outcome.reason === 'already_paid' ? 'payment_already_paid' : stateCode(s.status),
            `payment ${p.id} ${what}; this transaction was recorded and its amount will be refunded to the sender`,
            { payment: s, refund: { status: 'scheduled', transaction: proofKey.replace(/^tx:/, '') } },
          )
        }
        case 'proof_already_used':
          // The same proof presented again for this very payment (a retry): answer with where it stands.
          return void findClaim(sql, proofKey).then(async (claim) => {
            const now = await findCheckoutPayment(sql, before.id)
            if (aborted || !now) return
            if (claim?.target_id === before.id) {
              if (effectiveStatus(now) === 'pending') return send402(now, 'underpaid')
              return sendState(now)
            }
            if (effectiveStatus(now) !== 'pending') {
              paymentRequired.labels('proof_already_used').inc()
              return send(
                402,
                JSON_TYPE,
                JSON.stringify({
                  error: 'proof_already_used',
                  request_id: requestId,
                  payment: statusOf(now),
                }),
              )
            }
            send402(now, 'proof_already_used')
          }, fail)
      }
    }

    function fail(err: unknown): void {
      failure = err
      if (aborted)
        deps.logger.error('checkout request failed', { request_id: requestId, payment_id: id, err })
      sendError(
        'service_unavailable',
        'the payment could not be processed; retry shortly with the same proof',
      )
    }
  }
}

/** The error code of a payment that takes no payment now. */
function stateCode(status: string): ErrorCode {
  return status === 'paid' ? 'payment_paid' : status === 'canceled' ? 'payment_canceled' : 'payment_expired'
}
