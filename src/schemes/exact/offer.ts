// The x402 `exact` requirement for one amount, in its v1 (`accepts` in the body) and v2 (PAYMENT-REQUIRED)
// forms: the metered 402 and the hosted checkout's 402 offer the same terms.
import { type RequirementTerms, v2Requirement } from '../requirement.ts'
import type { Offer } from '../scheme.ts'

export const EXACT = 'exact'

/** What an `exact` offer names: the chain's x402 names and the token's EIP-712 domain. */
export type ExactTerms = RequirementTerms & { x402Network: string }

export function exactOffer(c: ExactTerms, amountAtomic: bigint, maxTimeoutSeconds: number): Offer {
  const v2 = v2Requirement(c, { scheme: EXACT, amountAtomic, maxTimeoutSeconds })
  return {
    v1: {
      scheme: EXACT,
      network: c.x402Network,
      maxAmountRequired: v2.amount,
      mimeType: 'application/json',
      payTo: c.treasury,
      maxTimeoutSeconds,
      asset: c.usdcAddress,
      extra: v2.extra,
    },
    v2,
  }
}
