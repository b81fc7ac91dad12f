// x402 `exact` on EVM: an EIP-3009 transferWithAuthorization signed by the payer for exactly the price,
// verified locally and on chain (src/data-plane/verifier.ts, shared with checkout), its nonce claimed before
// the call, settled after it in batches by the settlement batcher. It pays a stated amount, so it is not
// offered where the amount varies (usage pricing): the 402 says so. Registered last: it reads every x402
// payload no other scheme reads, and refuses the ones it cannot pay with the reason the client expects.

import { settleBeforeAnswerUnavailable } from '../../config/settle-before-answer.ts'
import { CORS_HEADERS } from '../../data-plane/cors.ts'
import type { Proof } from '../../data-plane/proof.ts'
import type { VerifyResult } from '../../data-plane/verifier.ts'
import { exactAmountAccepted, minimumAccepted } from '../amounts.ts'
import { ClaimedPayment, type ClaimedPaymentDeps, claimedPaymentDeps } from '../claimed-payment.ts'
import type { NotOffered, Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, Verdict } from '../scheme.ts'
import { refusal } from '../verdicts.ts'
import { matchAccepted } from './accepted-match.ts'
import { EXACT, exactOffer } from './offer.ts'
import { paymentReceipt } from './receipt.ts'
import { SettleBeforeAnswer } from './settle-before-answer.ts'

export function exactScheme(deps: SchemeDeps): Scheme {
  return new ExactScheme(deps)
}

class ExactScheme implements Scheme {
  readonly name = EXACT
  private readonly claimed: ClaimedPaymentDeps
  private readonly networks: { network: string; caip2: string }
  /**
   * Settles the authorizations of endpoints that ask for it before their answers; null where this process
   * cannot (no settler key, or several workers): those are settled after, and their receipts say so.
   */
  private readonly early: SettleBeforeAnswer | null
  private warnedUnavailable = false

  constructor(private readonly deps: SchemeDeps) {
    this.claimed = claimedPaymentDeps(deps)
    this.networks = { network: deps.chainInfo.x402Network, caip2: deps.chainInfo.caip2 }
    this.early = settleBeforeAnswer(deps)
  }

  /**
   * The settle-before-answer path, or null (said once): an endpoint set to before_answer on an instance
   * without it (another instance accepted the setting) is settled after, with the honest pending receipt.
   */
  private earlyOrWarn(): SettleBeforeAnswer | null {
    if (this.early === null && !this.warnedUnavailable) {
      this.warnedUnavailable = true
      this.deps.logger.warn(
        'an endpoint asks to settle before the answer but this instance cannot; its calls settle after, and their receipts say settlement_pending',
      )
    }
    return this.early
  }

  stop(): Promise<void> {
    return this.early?.stop() ?? Promise.resolve()
  }

  /** The captures the settler holds are written (they wait a few ms for their group). */
  flush(): Promise<void> {
    return this.early?.stop() ?? Promise.resolve()
  }

  offer(q: OfferQuery): Offer | NotOffered {
    // An authorization moves exactly its value: it cannot be settled for a charge measured afterwards.
    if (q.varies) return { notOffered: 'amount_varies' }
    return exactOffer(this.deps.chainInfo, q.amountAtomic, q.maxTimeoutSeconds)
  }

  reads(proof: Proof): boolean {
    return proof.kind === 'x402'
  }

  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    if (proof.kind !== 'x402') return { ok: false, reason: 'invalid_proof' }
    // The settlement backlog would outrun new authorizations' validity windows: refused before any work.
    const throttle = this.deps.settlementThrottle
    if (throttle?.engaged) {
      return {
        ok: 'error',
        code: 'settlement_backlog',
        headers: ['retry-after', String(throttle.retryAfterS), ...CORS_HEADERS],
      }
    }
    if (q.quote.varies) return { ok: false, reason: 'scheme_not_offered' }
    // A v2 payload pays the terms it names in `accepted`: they must be ours (and the amount exactly the
    // price), checked before anything costs an RPC.
    if (proof.version === 2) {
      const mismatch = matchAccepted(q.quote, proof.payload, q.nowMs)
      if (mismatch !== null) return { ok: false, reason: mismatch }
    }
    const verified = this.deps.verifier.verify(proof, q.client)
    if (verified instanceof Promise) return verified.then((r) => this.decide(r, q))
    return this.decide(verified, q)
  }

  private decide(result: VerifyResult, q: PayQuery): Verdict {
    if (!result.ok) return refusal(result)
    if (result.kind !== 'eip3009') return { ok: false, reason: 'invalid_proof' }
    if (result.valueAtomic < minimumAccepted(q.quote, q.nowMs)) return { ok: false, reason: 'underpaid' }
    // `exact` means exact: an authorization for more than the price is refused too (nothing moved yet).
    if (!exactAmountAccepted(q.quote, result.valueAtomic, q.nowMs))
      return { ok: false, reason: 'wrong_amount' }
    // The spent-proof check needs the verifier's key (chain, token, payer, nonce).
    if (this.deps.usedProofs.has(result.proofKey))
      return {
        ok: false,
        reason: 'proof_already_used',
        spent: { proofKey: result.proofKey, payer: result.payer },
      }
    const networks = this.networks
    const early = q.endpoint.settleBeforeAnswer === true ? this.earlyOrWarn() : null
    const authorization = result.authorization
    return {
      ok: true,
      payment: new ClaimedPayment(this.claimed, {
        scheme: EXACT,
        kind: 'eip3009',
        proofKey: result.proofKey,
        payer: result.payer,
        coversAtomic: result.valueAtomic,
        transaction: null,
        authorization: result.authorization,
        proofAtMs: null,
        endpointId: q.endpoint.id,
        accountId: q.endpoint.accountId,
        leaseMs: q.endpoint.timeoutMs + 5_000,
        reserve:
          result.balance === null
            ? null
            : { balanceAtomic: result.balance.atomic, block: result.balance.block },
        onInsufficientFunds: () => this.deps.verifier.forgetBalance(result.payer),
        receipt: (served) => paymentReceipt(result, served, networks),
        settleEarly:
          early === null
            ? undefined
            : (capture) =>
                early
                  .settle(capture, authorization)
                  .then((outcome) => paymentReceipt(result, true, networks, outcome)),
      }),
    }
  }
}

function settleBeforeAnswer(deps: SchemeDeps): SettleBeforeAnswer | null {
  const { config, logger } = deps
  // A scheme built from a partial config (unit tests) settles after.
  const o = config.settlement?.before_answer
  const key = config.secrets?.settler_private_key ?? null
  if (o === undefined || key === null) return null
  // One settler key, one nonce counter: several data-plane processes would assign the same nonces.
  const why = settleBeforeAnswerUnavailable(config)
  if (why !== null) {
    logger.warn(`x402 exact cannot settle before the answer: ${why}; every endpoint settles after the call`)
    return null
  }
  const settler = new SettleBeforeAnswer({
    sql: deps.sql,
    books: deps.books,
    chain: deps.chain,
    logger,
    settlerKey: key,
    windowMs: o.window_ms,
    waitMs: o.wait_ms,
    perTransaction: config.settlement.per_transaction,
  })
  logger.info('x402 exact: endpoints may settle before the answer', {
    settler: settler.address,
    by_default: o.enabled,
    window_ms: o.window_ms,
  })
  return settler
}
