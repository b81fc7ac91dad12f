// x402 `exact` on EVM: an EIP-3009 transferWithAuthorization signed by the payer for exactly the price,
// verified locally and on chain (src/schemes/verifier.ts, shared with checkout), its nonce claimed before
// the call, settled before the answer by this process's settler (group commit, src/schemes/exact/settler.ts)
// or, for an endpoint set to "after", in the leader's batches. It pays a stated amount, so it is not
// offered where the amount varies (usage pricing): the 402 says so. Registered last: it reads every x402
// payload no other scheme reads, and refuses the ones it cannot pay with the reason the client expects.

import type { ReadinessCheck } from '../../observability/admin.ts'
import type { Proof } from '../../wire/proof.ts'
import { exactAmountAccepted, minimumAccepted } from '../amounts.ts'
import { authorizationPayment, type ClaimedPaymentDeps, claimedPaymentDeps } from '../claimed-payment.ts'
import type { NotOffered, Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, Verdict } from '../scheme.ts'
import { backlogRefusal, refusal } from '../verdicts.ts'
import type { VerifyResult } from '../verifier.ts'
import { matchAccepted } from './accepted-match.ts'
import { EXACT, exactOffer } from './offer.ts'
import { paymentReceipt } from './receipt.ts'
import { type EarlySettler, sharedSettler } from './settler.ts'

export async function exactScheme(deps: SchemeDeps): Promise<Scheme> {
  return new ExactScheme(deps, await sharedSettler(deps))
}

class ExactScheme implements Scheme {
  readonly name = EXACT
  private readonly claimed: ClaimedPaymentDeps
  private readonly networks: { network: string; caip2: string }
  private warnedUnavailable = false

  /**
   * `settler` settles the authorizations of endpoints that do so (the default) before their answers; null
   * where this process has none (no settler slot free): those are settled after, and their receipts say so.
   */
  constructor(
    private readonly deps: SchemeDeps,
    private readonly settler: EarlySettler | null,
  ) {
    this.claimed = claimedPaymentDeps(deps)
    this.networks = { network: deps.chainInfo.x402Network, caip2: deps.chainInfo.caip2 }
    this.readiness = settler === null ? [] : [settler.readiness]
  }

  readonly readiness: ReadinessCheck[]

  /**
   * The settle-before-answer path, or null (said once): an endpoint that settles before the answer, served by
   * a process without a settler slot, is settled after, with the honest pending receipt.
   */
  private earlyOrWarn(): EarlySettler['early'] | null {
    if (this.settler?.usable()) return this.settler.early
    if (!this.warnedUnavailable) {
      this.warnedUnavailable = true
      this.deps.logger.warn(
        'an endpoint settles before the answer but this process has no settler slot; its calls settle after, and their receipts say settlement_pending',
      )
    }
    return null
  }

  stop(): Promise<void> {
    return this.settler?.stop() ?? Promise.resolve()
  }

  /** The captures the settler holds are written (they wait a few ms for their group). */
  flush(): Promise<void> {
    return this.settler?.early.stop() ?? Promise.resolve()
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
    const backlog = backlogRefusal(this.deps.settlementThrottle)
    if (backlog !== null) return backlog
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
      payment: authorizationPayment(this.claimed, EXACT, result, q.endpoint, {
        forgetBalance: (payer) => this.deps.verifier.forgetBalance(payer),
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
