// POST /pay/:id with an x402 `exact` authorization (X-PAYMENT or PAYMENT-SIGNATURE), verified by the one
// verifier. A checkout must see the money move before it is paid, so the authorization is claimed for the
// payment ('settling'), settled on chain by the settlement batcher with the metered calls' authorizations,
// and only then applied to the payment by the same transition as a transaction hash. This request waits for
// that (an x402 client expects its answer after settlement, as a facilitator settles before answering) and
// answers 200 with the receipt; past the wait it answers 202 and the payment turns paid when it settles.
//
// A payment that can no longer take money (paid, expired, canceled) answers as it does for a hash, but the
// authorization is never claimed nor settled: unlike a transfer, it has moved nothing, so there is nothing
// to refund. Only one that was already on its way when the payment closed is settled and then refunded.

import { type HoldOutcome, holdPaymentAuthorization } from '../books/payments.ts'
import { findClaim, findSettlement } from '../db/claims.ts'
import { type CheckoutPaymentRow, effectiveStatus, findCheckoutPayment } from '../db/payments.ts'
import { checkoutPayments, paymentRequired } from '../observability/metrics.ts'
import { paymentReceipt } from '../schemes/mpp-charge/index.ts'
import type { VerifyResult } from '../schemes/verifier.ts'
import type { CheckoutContext } from './context.ts'
import { presentCheckout } from './presenter.ts'
import { type Headers, JSON_TYPE, type Responder, stateCode } from './responder.ts'

type Authorization = Extract<VerifyResult, { ok: true; kind: 'eip3009' }>
/** The authorization and the protocol it came by (its receipt is answered in that protocol). */
type Paid = Authorization & { protocol: 'x402' | 'mpp' }

const DEFAULT_WAIT_MS = 30_000
const POLL_MS = 200

export function payWithAuthorization(
  ctx: CheckoutContext,
  r: Responder,
  p: CheckoutPaymentRow,
  verified: Authorization,
  protocol: 'x402' | 'mpp' = 'x402',
): void {
  if (effectiveStatus(p) !== 'pending') return sendNotTaken(ctx, r, p)
  const auth: Paid = { ...verified, protocol }
  holdPaymentAuthorization(ctx.deps.sql, {
    paymentId: p.id,
    proof: {
      proofKey: auth.proofKey,
      payer: auth.payer,
      valueAtomic: auth.valueAtomic,
      authorization: auth.authorization,
    },
    view: ctx.view(),
  }).then(
    (outcome) => withHold(ctx, r, p, auth, outcome),
    (err) => ctx.fail(r, err, p.id),
  )
}

function withHold(
  ctx: CheckoutContext,
  r: Responder,
  p: CheckoutPaymentRow,
  auth: Paid,
  outcome: HoldOutcome,
): void {
  if (outcome.kind !== 'held') checkoutPayments.labels(`x402_${outcome.kind}`).inc()
  if (r.aborted) return
  switch (outcome.kind) {
    case 'not_found':
      return r.sendError('payment_not_found', `no payment ${p.id}`)
    case 'closed':
      return sendNotTaken(ctx, r, { ...p, ...outcome.payment })
    case 'underpaid':
      return ctx.sendRequirement(r, { ...p, ...outcome.payment }, 'underpaid', {
        amount_due_x402_atomic: outcome.dueAtomic.toString(),
      })
    case 'proof_already_used':
      // The same authorization again (a client's retry): wait with the first one if it is for this payment.
      return void findClaim(ctx.deps.sql, auth.proofKey).then(
        (claim) => {
          if (r.aborted) return
          if (claim?.target_id === p.id) return awaitSettlement(ctx, r, p, auth)
          ctx.sendRequirement(r, p, 'proof_already_used')
        },
        (err) => ctx.fail(r, err, p.id),
      )
    case 'held':
      return awaitSettlement(ctx, r, p, auth)
  }
}

/** Polls the claim until the settlement batcher resolved it, the client left, or the wait is over. */
function awaitSettlement(ctx: CheckoutContext, r: Responder, p: CheckoutPaymentRow, auth: Paid) {
  const deadline = Date.now() + (ctx.deps.settings.x402SettleWaitMs ?? DEFAULT_WAIT_MS)
  const tick = () => {
    if (r.aborted) return
    findSettlement(ctx.deps.sql, auth.proofKey).then(
      (claim) => {
        if (r.aborted) return
        if (claim && claim.status !== 'settling') return answerSettled(ctx, r, p, auth, claim)
        if (Date.now() >= deadline) return answerSettling(ctx, r, p)
        setTimeout(tick, POLL_MS)
      },
      (err) => ctx.fail(r, err, p.id),
    )
  }
  tick()
}

function answerSettled(
  ctx: CheckoutContext,
  r: Responder,
  before: CheckoutPaymentRow,
  auth: Paid,
  claim: { status: string; settlement_tx: string | null; settlement_error: string | null },
): void {
  findCheckoutPayment(ctx.deps.sql, before.id).then(
    (now) => {
      if (r.aborted) return
      const p = now ?? before
      const s = presentCheckout(p, ctx.view())
      if (claim.status === 'applied') {
        checkoutPayments.labels(s.status === 'paid' ? 'x402_paid' : 'x402_partial').inc()
        const receipt = receiptHeader(ctx, auth, claim.settlement_tx!)
        if (s.status === 'paid') return r.send(200, JSON_TYPE, JSON.stringify(s), [receipt])
        return ctx.sendRequirement(r, p, 'underpaid')
      }
      if (claim.status === 'refund_due') {
        // Settled after the payment closed: the money arrived, and goes back in the next payout batch.
        checkoutPayments.labels('x402_refund_scheduled').inc()
        const paid = s.status === 'paid'
        return r.sendError(
          paid ? 'payment_already_paid' : stateCode(s.status),
          `payment ${s.id} ${paid ? 'was paid' : `is ${s.status}`} before this authorization settled; its amount will be refunded to the sender`,
          {
            payment: s,
            refund: { status: 'scheduled', transaction: claim.settlement_tx },
          },
          [receiptHeader(ctx, auth, claim.settlement_tx!)],
        )
      }
      // void: never settled (its window closed, it reverted, or the payment closed before it was sent).
      checkoutPayments.labels('x402_void').inc()
      if (effectiveStatus(p) !== 'pending') return sendNotTaken(ctx, r, p)
      ctx.sendRequirement(r, p, 'settlement_failed', {
        detail: `the authorization could not be settled (${claim.settlement_error ?? 'void'}); nothing was charged`,
      })
    },
    (err) => ctx.fail(r, err, before.id),
  )
}

/** Past the wait: accepted, still settling. The payment turns paid (payment.received) when it settles. */
function answerSettling(ctx: CheckoutContext, r: Responder, p: CheckoutPaymentRow): void {
  checkoutPayments.labels('x402_settling').inc()
  const s = presentCheckout(p, ctx.view())
  r.send(
    202,
    JSON_TYPE,
    JSON.stringify({
      ...s,
      authorization: {
        status: 'settling',
        message:
          'the authorization is claimed and being settled on chain; poll this URL for the payment status',
      },
    }),
    [['retry-after', '2']],
  )
}

/** A payment that takes nothing now: the hash answer's status and code, and nothing was charged. */
function sendNotTaken(ctx: CheckoutContext, r: Responder, p: CheckoutPaymentRow): void {
  const s = presentCheckout(p, ctx.view())
  const status = effectiveStatus(p)
  const paid = status === 'paid'
  paymentRequired.labels(paid ? 'payment_already_paid' : `payment_${status}`).inc()
  r.sendError(
    paid ? 'payment_already_paid' : stateCode(status),
    `payment ${p.id} ${paid ? 'is already paid' : `is ${status}`}; this authorization was not used and nothing was charged`,
    { payment: s, authorization: { status: 'not_used' } },
  )
}

/** The receipt of a settled authorization, in the protocol (and x402 version) the payer spoke. */
function receiptHeader(ctx: CheckoutContext, auth: Paid, transaction: string): Headers[number] {
  // MPP: its Payment-Receipt, naming the settlement transaction (settled before this answer).
  if (auth.protocol === 'mpp') return paymentReceipt(transaction)
  const chain = ctx.deps.chain
  if (auth.x402Version === 1) {
    const json = `{"success":true,"transaction":"${transaction}","network":"${chain.x402Network}","payer":"${auth.payer}"}`
    return ['x-payment-response', Buffer.from(json).toString('base64')]
  }
  const json = `{"success":true,"transaction":"${transaction}","network":"${chain.caip2}","payer":"${auth.payer}","amount":"${auth.valueAtomic}"}`
  return ['payment-response', Buffer.from(json).toString('base64')]
}
