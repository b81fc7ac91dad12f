// MPP (the Machine Payments Protocol) `evm` method, `charge` intent: the client answers a `WWW-Authenticate:
// Payment` challenge with `Authorization: Payment <credential>`, an EIP-3009 transferWithAuthorization to the
// treasury whose nonce is keccak256(challenge id + realm). The same money movement as x402 `exact`: this
// scheme checks what MPP adds (the challenge's HMAC binding and expiry, the nonce bound to it), then hands
// the authorization to the one verifier as an exact payload (signature, validity window, nonce unused on
// chain, the payer's balance), so its claim key is exact's for the same authorization (one cannot pay twice
// through the two protocols), and it settles in the settlement batcher's batches like any exact claim.
// A usage-priced endpoint takes it for the ceiling; the unused part is refunded in the payout batch.
import { MPP_STORED } from '../../books/protocols.ts'
import type { Proof } from '../../wire/proof.ts'
import { minimumAccepted } from '../amounts.ts'
import { authorizationPayment, type ClaimedPaymentDeps, claimedPaymentDeps } from '../claimed-payment.ts'
import type { Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, Verdict } from '../scheme.ts'
import { backlogRefusal, refusal } from '../verdicts.ts'
import type { VerifyResult } from '../verifier.ts'
import { MppBinding } from './binding.ts'
import { base64url, MPP_METHOD } from './challenge.ts'

export const MPP_CHARGE = 'mpp-charge'

export function mppChargeScheme(deps: SchemeDeps): Scheme {
  return new MppChargeScheme(deps)
}

class MppChargeScheme implements Scheme {
  readonly name = MPP_CHARGE
  private readonly claimed: ClaimedPaymentDeps
  private readonly binding: MppBinding

  constructor(private readonly deps: SchemeDeps) {
    this.claimed = claimedPaymentDeps(deps)
    this.binding = new MppBinding({
      secrets: deps.settings.mpp.secrets,
      publicUrl: deps.settings.mpp.publicUrl,
      chainInfo: deps.chainInfo,
      logger: deps.logger,
      purpose: 'metered',
    })
  }

  offer(q: OfferQuery): Offer {
    // A usage-priced endpoint is offered at its ceiling (what is not used goes back in the payout batch).
    return { mpp: this.binding.offer(q.amountAtomic, q.maxTimeoutSeconds * 1000) }
  }

  reads(proof: Proof): boolean {
    return proof.kind === 'mpp'
  }

  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    if (proof.kind !== 'mpp') return { ok: false, reason: 'invalid_proof' }
    const backlog = backlogRefusal(this.deps.settlementThrottle)
    if (backlog !== null) return backlog
    const checked = this.binding.check(proof.token, q.nowMs)
    if (!checked.ok) return checked
    // The price may have changed since the challenge: it must still cover this request.
    const amount = checked.amount
    if (amount < minimumAccepted(q.quote, q.nowMs) || (q.quote.varies && amount < q.quote.amountAtomic))
      return { ok: false, reason: 'payment_insufficient' }
    // The rest is x402 exact's verification, word for word (signature, window, nonce on chain, balance).
    // `raw` is the credential as it came (the verifier reads the payload only).
    const verified = this.deps.verifier.verify(
      { kind: 'x402', raw: proof.token, payload: checked.exact, version: 1 },
      q.client,
    )
    if (verified instanceof Promise) return verified.then((r) => this.decide(r, q, checked.nonce))
    return this.decide(verified, q, checked.nonce)
  }

  private decide(result: VerifyResult, q: PayQuery, nonce: string): Verdict {
    if (!result.ok) return refusal(result)
    if (result.kind !== 'eip3009') return { ok: false, reason: 'invalid_proof' }
    if (this.deps.usedProofs.has(result.proofKey)) return { ok: false, reason: 'proof_already_used' }
    return {
      ok: true,
      // The stored authorization says it came by MPP (a claim refunded without a call row still tells).
      payment: authorizationPayment(this.claimed, MPP_CHARGE, mppStored(result), q.endpoint, {
        forgetBalance: (payer) => this.deps.verifier.forgetBalance(payer),
        receipt: (served) => (served ? paymentReceipt(nonce) : null),
      }),
    }
  }
}

/** The verified authorization, its stored payload marked as MPP's. */
export function mppStored<T extends { authorization: object }>(result: T): T {
  return { ...result, authorization: { ...result.authorization, ...MPP_STORED } }
}

/**
 * The MPP receipt (Payment-Receipt: base64url JSON, as mppx's Receipt reads it). `reference`: the settlement
 * transaction when it is known; a metered call settles after the answer, in a batch, so there it is the
 * authorization's nonce (the challenge hash), which the settlement transaction's AuthorizationUsed log names.
 */
export function paymentReceipt(reference: string): [string, string] {
  const json = `{"method":"${MPP_METHOD}","reference":"${reference}","status":"success","timestamp":"${new Date().toISOString()}"}`
  return ['payment-receipt', base64url(json)]
}
