// Pay by transaction hash (the seed's flow): a USDC transfer to the treasury, proven by its hash, claimed
// once globally. Offered in the 402 body's own fields (price, recipient, asset, network, chain id); a
// usage-priced endpoint takes it as a prepaid ceiling and the unused part goes back in the payout batch.

import { toDollars } from '../../money.ts'
import type { Proof } from '../../wire/proof.ts'
import { minimumAccepted } from '../amounts.ts'
import { cacheCounters } from '../caches.ts'
import {
  ClaimedPayment,
  type ClaimedPaymentDeps,
  claimedPaymentDeps,
  claimLeaseMs,
} from '../claimed-payment.ts'
import type { Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, Verdict } from '../scheme.ts'
import { refusal } from '../verdicts.ts'
import type { VerifyResult } from '../verifier.ts'

export const TX_HASH = 'tx-hash'

export function txHashScheme(deps: SchemeDeps): Scheme {
  return new TxHashScheme(deps)
}

class TxHashScheme implements Scheme {
  readonly name = TX_HASH
  private readonly claimed: ClaimedPaymentDeps

  constructor(private readonly deps: SchemeDeps) {
    this.claimed = claimedPaymentDeps(deps)
  }

  offer(q: OfferQuery): Offer {
    const c = this.deps.chainInfo
    return {
      body: {
        price: toDollars(q.amountAtomic),
        price_atomic: q.amountAtomic.toString(),
        recipient: c.treasury,
        currency: 'USDC',
        asset: c.usdcAddress,
        network: c.network,
        chain_id: c.chainId,
      },
    }
  }

  reads(proof: Proof): boolean {
    return proof.kind === 'tx'
  }

  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    if (proof.kind !== 'tx') return { ok: false, reason: 'invalid_proof' }
    // A proof seen spent on this instance is refused without a query.
    if (this.deps.usedProofs.has(proof.key)) {
      cacheCounters.usedHit.inc()
      return { ok: false, reason: 'proof_already_used', spent: { proofKey: proof.key, payer: null } }
    }
    const verified = this.deps.verifier.verify(proof, q.client)
    if (verified instanceof Promise) return verified.then((r) => this.decide(r, q))
    return this.decide(verified, q)
  }

  private decide(result: VerifyResult, q: PayQuery): Verdict {
    if (!result.ok) return refusal(result)
    if (result.kind !== 'tx') return { ok: false, reason: 'invalid_proof' }
    if (result.valueAtomic < minimumAccepted(q.quote, q.nowMs)) return { ok: false, reason: 'underpaid' }
    const network = this.deps.chainInfo.x402Network
    const { transaction, payer } = result
    return {
      ok: true,
      payment: new ClaimedPayment(this.claimed, {
        scheme: TX_HASH,
        kind: 'tx',
        proofKey: result.proofKey,
        payer,
        coversAtomic: result.valueAtomic,
        transaction,
        authorization: null,
        // The block's time: pruning compares it with the stored retention horizon.
        proofAtMs: result.timestampMs,
        endpointId: q.endpoint.id,
        accountId: q.endpoint.accountId,
        leaseMs: claimLeaseMs(q.endpoint),
        // The x402 v1 receipt shape (X-PAYMENT-RESPONSE), which the `x402` package reads.
        receipt: (served) => [
          'x-payment-response',
          Buffer.from(
            `{"success":${served},"transaction":"${transaction}","network":"${network}","payer":"${payer}"}`,
          ).toString('base64'),
        ],
      }),
    }
  }
}
