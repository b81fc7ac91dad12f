// POST /pay/:id with x-payment: a presented transaction hash, verified by the one verifier and applied by
// the books' applyPaymentProof (the same transition the watcher's amount match uses). An x402 authorization
// goes to pay-x402.ts.

import { type ApplyOutcome, applyPaymentProof } from '../books/payments.ts'
import { findClaim } from '../db/claims.ts'
import { type CheckoutPaymentRow, effectiveStatus, findCheckoutPayment } from '../db/payments.ts'
import { checkoutPayments, paymentRequired } from '../observability/metrics.ts'
import { mppStored } from '../schemes/mpp-charge/index.ts'
import type { VerifyResult } from '../schemes/verifier.ts'
import { parseProof } from '../wire/proof.ts'
import type { CheckoutContext } from './context.ts'
import { payWithAuthorization } from './pay-x402.ts'
import { presentCheckout } from './presenter.ts'
import { JSON_TYPE, type Responder, stateCode } from './responder.ts'

export function payWithProof(
  ctx: CheckoutContext,
  r: Responder,
  p: CheckoutPaymentRow,
  header: string,
  client: string,
): void {
  let proof = parseProof(header)
  let viaMpp = false
  if (proof.kind === 'mpp') {
    // An MPP credential: the checkout's own challenge, unchanged and unexpired, then its authorization is
    // verified and settled as an x402 `exact` one.
    const checked = ctx.deps.mpp?.check(proof.token, Date.now()) ?? {
      ok: false as const,
      reason: 'method_unsupported' as const,
    }
    if (!checked.ok) {
      ctx.deps.edge?.proofRefused(client)
      if (effectiveStatus(p) !== 'pending') return ctx.sendState(r, p)
      return ctx.sendRequirement(r, p, checked.reason)
    }
    proof = { kind: 'x402', raw: proof.token, payload: checked.exact, version: 1 }
    viaMpp = true
  }
  const verified = ctx.deps.verifier.verify(proof, client)
  if (verified instanceof Promise)
    verified.then(
      (v) => withVerified(ctx, r, p, v, client, viaMpp),
      (err) => ctx.fail(r, err, p.id),
    )
  else withVerified(ctx, r, p, verified, client, viaMpp)
}

function withVerified(
  ctx: CheckoutContext,
  r: Responder,
  p: CheckoutPaymentRow,
  result: VerifyResult,
  client: string,
  viaMpp: boolean,
): void {
  if (r.aborted) return
  if (!result.ok) {
    if (result.reason === 'rpc_unavailable') {
      r.failed('rpc_unavailable')
      return r.sendError(
        'verification_unavailable',
        'the chain could not be reached to verify the payment; retry shortly',
      )
    }
    if (result.reason === 'too_many_lookups') {
      return r.sendError(
        'rate_limited',
        'too many payments from this address are being verified at once; retry after one ends',
        undefined,
        [['retry-after', '1']],
      )
    }
    // A proof that did not pay counts against its client's checkout limit.
    ctx.deps.edge?.proofRefused(client)
    // A bad proof against a payment that takes none: say what the payment is, not what it costs.
    if (effectiveStatus(p) !== 'pending') return ctx.sendState(r, p)
    const extra: Record<string, unknown> = {}
    if (result.reason === 'payment_pending') {
      extra.transaction_status = /not known/.test(result.detail ?? '') ? 'unknown' : 'unconfirmed'
      if (result.retryAfterMs !== undefined) extra.retry_after_ms = result.retryAfterMs
    } else if (result.reason === 'transaction_not_found') {
      // Final: the chain never saw it in the whole wait (a typo, another network); no retry hint.
      extra.transaction_status = 'unknown'
    }
    return ctx.sendRequirement(r, p, result.reason, extra)
  }
  // An x402 authorization is settled before it pays the payment (pay-x402.ts).
  if (result.kind === 'eip3009')
    return payWithAuthorization(ctx, r, p, viaMpp ? mppStored(result) : result, viaMpp ? 'mpp' : 'x402')
  const proof = {
    proofKey: result.proofKey,
    kind: 'tx' as const,
    payer: result.payer,
    valueAtomic: result.valueAtomic,
    transaction: result.transaction,
    proofAtMs: result.timestampMs,
  }
  const view = ctx.view()
  applyPaymentProof(ctx.deps.sql, {
    paymentId: p.id,
    proof,
    ownerShareBps: ctx.deps.settings.ownerShareBps,
    view,
  }).then(
    (outcome) => withOutcome(ctx, r, p, outcome, result.proofKey),
    (err) => ctx.fail(r, err, p.id),
  )
}

function withOutcome(
  ctx: CheckoutContext,
  r: Responder,
  before: CheckoutPaymentRow,
  outcome: ApplyOutcome,
  proofKey: string,
): void {
  // Counted before the abort check: the proof was applied whether or not the client still listens.
  checkoutPayments
    .labels(outcome.kind === 'applied' ? (outcome.paid ? 'paid' : 'partial') : outcome.kind)
    .inc()
  if (r.aborted) return
  switch (outcome.kind) {
    case 'not_found':
      return r.sendError('payment_not_found', `no payment ${before.id}`)
    case 'applied': {
      const p = { ...before, ...outcome.payment }
      if (outcome.paid) return r.send(200, JSON_TYPE, JSON.stringify(presentCheckout(p, ctx.view())))
      return ctx.sendRequirement(r, p, 'underpaid')
    }
    case 'refund_scheduled': {
      const s = presentCheckout({ ...before, ...outcome.payment }, ctx.view())
      const paid = outcome.reason === 'already_paid'
      return r.sendError(
        paid ? 'payment_already_paid' : stateCode(s.status),
        `payment ${s.id} ${paid ? 'is already paid' : `is ${s.status}`}; this transaction was recorded and its amount will be refunded to the sender`,
        { payment: s, refund: { status: 'scheduled', transaction: proofKey.replace(/^tx:/, '') } },
      )
    }
    case 'proof_already_used':
      return alreadyUsed(ctx, r, before, proofKey)
  }
}

/** The same proof again: a retry for this very payment (or the watcher matched it first) answers where it stands. */
function alreadyUsed(ctx: CheckoutContext, r: Responder, before: CheckoutPaymentRow, proofKey: string): void {
  Promise.all([findClaim(ctx.deps.sql, proofKey), findCheckoutPayment(ctx.deps.sql, before.id)]).then(
    ([claim, now]) => {
      if (r.aborted || !now) return
      const pending = effectiveStatus(now) === 'pending'
      if (claim?.target_id === before.id)
        return pending ? ctx.sendRequirement(r, now, 'underpaid') : ctx.sendState(r, now)
      if (!pending) {
        paymentRequired.labels('proof_already_used').inc()
        return r.send(
          402,
          JSON_TYPE,
          JSON.stringify({
            error: 'proof_already_used',
            request_id: r.requestId,
            payment: presentCheckout(now, ctx.view()),
          }),
        )
      }
      ctx.sendRequirement(r, now, 'proof_already_used')
    },
    (err) => ctx.fail(r, err, before.id),
  )
}
