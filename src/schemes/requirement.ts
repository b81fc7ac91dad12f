// The x402 v2 requirement every EVM scheme offers, and the one check of what a v2 payload says it pays
// (`accepted`). As the reference server does (@x402/core paymentRequirementsMatchAccepted), `accepted` must
// equal what we advertise: the same core fields, each equal, and an `extra` that contains ours. Checked before
// anything is verified on chain, so a payload signed for other terms costs no RPC. The one field that may
// differ from the current 402 is the amount: a price quoted within quote_ttl_ms still holds (endpoint floor).
import type { ChallengeChain, Requirement } from '../wire/challenge.ts'
import { exactAmountAccepted } from './amounts.ts'
import type { Quote } from './scheme.ts'

/** What a requirement names of the chain: its CAIP-2 id, the treasury and the token's EIP-712 domain. */
export type RequirementTerms = Pick<
  ChallengeChain,
  'caip2' | 'treasury' | 'usdcAddress' | 'usdcName' | 'usdcVersion'
>

/** A scheme's v2 requirement for one amount; `extra` adds to the token's domain (name, version). */
export function v2Requirement(
  c: RequirementTerms,
  q: { scheme: string; amountAtomic: bigint; maxTimeoutSeconds: number },
  extra: Record<string, unknown> = {},
): Requirement {
  return {
    scheme: q.scheme,
    network: c.caip2,
    amount: q.amountAtomic.toString(),
    asset: c.usdcAddress,
    payTo: c.treasury,
    maxTimeoutSeconds: q.maxTimeoutSeconds,
    extra: { name: c.usdcName, version: c.usdcVersion, ...extra },
  }
}

const CORE_KEYS = ['scheme', 'network', 'amount', 'asset', 'payTo', 'maxTimeoutSeconds'] as const

/**
 * The amount a payload's `accepted` pays, when its terms are the advertised requirement's; null: other
 * terms (requirements_mismatch). Addresses in `extra` compare without regard to case.
 */
export function acceptedAmount(
  advertised: Requirement,
  quote: Quote,
  payload: unknown,
  nowMs: number,
): bigint | null {
  const accepted = (payload as { accepted?: unknown } | null)?.accepted
  if (accepted === null || typeof accepted !== 'object' || Array.isArray(accepted)) return null
  const a = accepted as Record<string, unknown>
  // The same set of core keys, each equal (the reference compares everything outside `extra`).
  let keys = 0
  for (const key in a) {
    if (key === 'extra') continue
    keys++
    if (key === 'amount') continue
    const ours = advertised[key as (typeof CORE_KEYS)[number]]
    if (ours === undefined || a[key] !== ours) return null
  }
  if (keys !== CORE_KEYS.length) return null
  const extra = a.extra as Record<string, unknown> | null | undefined
  if (extra === null || typeof extra !== 'object') return null
  for (const [key, ours] of Object.entries(advertised.extra)) if (!same(extra[key], ours)) return null
  const amount = atomic(a.amount)
  if (amount === null || !exactAmountAccepted(quote, amount, nowMs)) return null
  return amount
}

function same(theirs: unknown, ours: unknown): boolean {
  if (theirs === ours) return true
  return (
    typeof theirs === 'string' &&
    typeof ours === 'string' &&
    /^0x[0-9a-fA-F]{40}$/.test(ours) &&
    theirs.toLowerCase() === ours.toLowerCase()
  )
}

/** A base-units amount as the wire writes it (a decimal string); null otherwise. */
export function atomic(x: unknown): bigint | null {
  if (typeof x !== 'string' || !/^\d{1,78}$/.test(x)) return null
  return BigInt(x)
}
