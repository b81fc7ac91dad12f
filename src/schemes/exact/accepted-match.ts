// An x402 v2 `exact` payload's `accepted` against the advertised requirement (../requirement.ts, the one
// match every scheme uses), and then exact's own rule: the signed value is exactly the accepted amount.
import { acceptedAmount, atomic } from '../requirement.ts'
import type { Quote } from '../scheme.ts'
import { EXACT } from './offer.ts'

/** Why `accepted` does not match; null when it does. */
export type AcceptedMismatch = 'requirements_mismatch' | 'underpaid' | 'wrong_amount' | null

export function matchAccepted(quote: Quote, payload: unknown, nowMs: number): AcceptedMismatch {
  const advertised = quote.challenge.accepts.find((a) => a.scheme === EXACT)
  if (advertised === undefined) return 'requirements_mismatch'
  const amount = acceptedAmount(advertised, quote, payload, nowMs)
  if (amount === null) return 'requirements_mismatch'
  // `exact` pays exactly what was accepted: the signed value must be that amount, not more, not less.
  const value = atomic(
    (payload as { payload?: { authorization?: { value?: unknown } } }).payload?.authorization?.value,
  )
  // A malformed value is the verifier's to report (invalid_proof).
  if (value === null || value === amount) return null
  return value < amount ? 'underpaid' : 'wrong_amount'
}
