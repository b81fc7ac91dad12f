// The x402 `exact` requirement for one amount, in its v1 (`accepts` in the body) and v2 (PAYMENT-REQUIRED)
// forms: the metered 402 and the hosted checkout's 402 offer the same terms.
import type { Offer } from '../scheme.ts'

export const EXACT = 'exact'

/** What an `exact` offer names: the chain's x402 names and the token's EIP-712 domain. */
export interface ExactTerms {
  x402Network: string
  caip2: string
  treasury: string
  usdcAddress: string
  usdcName: string
  usdcVersion: string
}

export function exactOffer(c: ExactTerms, amountAtomic: bigint, maxTimeoutSeconds: number): Offer {
  const amount = amountAtomic.toString()
  const extra = { name: c.usdcName, version: c.usdcVersion }
  return {
    v1: {
      scheme: EXACT,
      network: c.x402Network,
      maxAmountRequired: amount,
      mimeType: 'application/json',
      payTo: c.treasury,
      maxTimeoutSeconds,
      asset: c.usdcAddress,
      extra,
    },
    v2: {
      scheme: EXACT,
      network: c.caip2,
      amount,
      asset: c.usdcAddress,
      payTo: c.treasury,
      maxTimeoutSeconds,
      extra,
    },
  }
}
