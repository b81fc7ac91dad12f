// An x402 v2 payload names the requirement it pays (`accepted`); as the reference server does
// (@x402/core paymentRequirementsMatchAccepted), it must equal what we advertise: every field but `extra`
// exactly, and `extra` must contain ours. Checked before anything is verified on chain, so a payload signed
// for other terms costs no RPC. The one field that may differ from the current 402 is the amount: a price
// quoted within quote_ttl_ms still holds (endpoint floor), as it does for every other proof.
import { exactAmountAccepted } from '../amounts.ts'
import type { Quote } from '../scheme.ts'

/** Why `accepted` does not match; null when it does. */
export type AcceptedMismatch = 'requirements_mismatch' | 'underpaid' | 'wrong_amount' | null

const CORE_KEYS = ['scheme', 'network', 'amount', 'asset', 'payTo', 'maxTimeoutSeconds'] as const

export function matchAccepted(quote: Quote, payload: unknown, nowMs: number): AcceptedMismatch {
  const advertised = quote.challenge.accepts.find((a) => a.scheme === 'exact')
  if (advertised === undefined) return 'requirements_mismatch'
  const accepted = (payload as { accepted?: unknown } | null)?.accepted
  if (accepted === null || typeof accepted !== 'object' || Array.isArray(accepted))
    return 'requirements_mismatch'
  const a = accepted as Record<string, unknown>
  // The same set of core keys, each equal (the reference compares everything outside `extra`).
  let keys = 0
  for (const key in a) {
    if (key === 'extra') continue
    keys++
    if (key === 'amount') continue
    const ours = advertised[key as (typeof CORE_KEYS)[number]]
    if (ours === undefined || a[key] !== ours) return 'requirements_mismatch'
  }
  if (keys !== CORE_KEYS.length) return 'requirements_mismatch'
  const extra = a.extra as Record<string, unknown> | null | undefined
  if (extra === null || typeof extra !== 'object') return 'requirements_mismatch'
  if (extra.name !== advertised.extra.name || extra.version !== advertised.extra.version)
    return 'requirements_mismatch'
  const amount = atomic(a.amount)
  if (amount === null || !exactAmountAccepted(quote, amount, nowMs)) return 'requirements_mismatch'
  // `exact` pays exactly what was accepted: the signed value must be that amount, not more, not less.
  const value = atomic(
    (payload as { payload?: { authorization?: { value?: unknown } } }).payload?.authorization?.value,
  )
  // A malformed value is the verifier's to report (invalid_proof).
  if (value === null || value === amount) return null
  return value < amount ? 'underpaid' : 'wrong_amount'
}

function atomic(x: unknown): bigint | null {
  if (typeof x !== 'string' || !/^\d{1,78}$/.test(x)) return null
  return BigInt(x)
}
