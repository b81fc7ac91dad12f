// An endpoint's pricing as the hot path uses it: money in base units (bigint), never floats. The wire
// shape (dollars, valibot) is src/pricing/input.ts; the stored shape is parsed here.

/** What a usage-priced call measures. */
export type UsageUnit = 'response_bytes' | 'duration_ms' | 'tokens'

/** What a usage-priced call measured and was charged: stored on its call row and shown in its receipt. */
export interface UsageRecord {
  unit: UsageUnit
  /** Measured quantities by name (bytes, ms, input_tokens, output_tokens, cached_input_tokens). */
  quantities: Record<string, number>
  /** The ceiling offered in the 402 (base units). */
  ceilingAtomic: bigint
  /** What the call costs (base units): never above the ceiling nor above what the payment covers. */
  chargeAtomic: bigint
  /** measured: read from the answer; fallback: the missing-usage rule applied (see `fallback`). */
  source: 'measured' | 'fallback'
  /** Why the missing-usage rule applied: no usage object, an unreadable one, or the client left first. */
  fallback: 'missing' | 'malformed' | 'client_aborted' | null
  /** The measured charge was above the ceiling and was cut to it. */
  capped: boolean
  /** A WebSocket session's row: how it ended and its whole charge (the opening row), or its opening row (a top-up's). */
  session?: SessionFacts
}

/**
 * What a WebSocket session's call row says of the session: on the row of its opening payment, who ended it,
 * its whole charge across its payments and the rows of its top-ups; on a top-up's row, the opening row.
 */
export type SessionFacts =
  | { ended_by: string; charge_atomic: string; payments: number; top_up_call_ids: string[] }
  | { call_id: string }

/** What to charge when a token-priced answer carries no readable usage. */
export type OnMissingUsage = 'max_price' | 'response_bytes' | 'nothing'

export interface PriceRule {
  /** Uppercase HTTP method, or null for any. */
  method: string | null
  /** Matches the request's sub-path (after /m/<id>) when it starts with this. */
  pathPrefix: string
  priceAtomic: bigint
}

export interface UsagePricing {
  model: 'usage'
  unit: UsageUnit
  /** The ceiling offered in the 402: no call is charged more. */
  maxAtomic: bigint
  /** Per 1,000,000 response bytes delivered (response_bytes, and the bytes fallback of tokens). */
  perMbAtomic: bigint | null
  /** Per second of upstream time (duration_ms). */
  perSecondAtomic: bigint | null
  /** Per million tokens (tokens). Cached input defaults to the input price. */
  inputPerMillionAtomic: bigint | null
  outputPerMillionAtomic: bigint | null
  cachedInputPerMillionAtomic: bigint | null
  onMissingUsage: OnMissingUsage
}

export type Pricing =
  | { model: 'fixed'; priceAtomic: bigint }
  | { model: 'rules'; rules: PriceRule[]; defaultAtomic: bigint }
  | UsagePricing

/** The `pricing` column (JSON, base units as strings); null is one fixed price, the endpoint's price_atomic. */
export type StoredPricing =
  | {
      model: 'rules'
      rules: Array<{ method: string | null; path_prefix: string; price_atomic: string }>
      default_atomic: string
    }
  | {
      model: 'usage'
      unit: UsageUnit
      max_atomic: string
      per_mb_atomic: string | null
      per_second_atomic: string | null
      input_per_million_atomic: string | null
      output_per_million_atomic: string | null
      cached_input_per_million_atomic: string | null
      on_missing_usage: OnMissingUsage
    }

const big = (x: string | null): bigint | null => (x === null ? null : BigInt(x))
const text = (x: bigint | null): string | null => (x === null ? null : x.toString())

export function pricingFromStored(stored: StoredPricing | null, priceAtomic: bigint): Pricing {
  if (stored === null) return { model: 'fixed', priceAtomic }
  if (stored.model === 'rules') {
    return {
      model: 'rules',
      rules: stored.rules.map((r) => ({
        method: r.method,
        pathPrefix: r.path_prefix,
        priceAtomic: BigInt(r.price_atomic),
      })),
      defaultAtomic: BigInt(stored.default_atomic),
    }
  }
  return {
    model: 'usage',
    unit: stored.unit,
    maxAtomic: BigInt(stored.max_atomic),
    perMbAtomic: big(stored.per_mb_atomic),
    perSecondAtomic: big(stored.per_second_atomic),
    inputPerMillionAtomic: big(stored.input_per_million_atomic),
    outputPerMillionAtomic: big(stored.output_per_million_atomic),
    cachedInputPerMillionAtomic: big(stored.cached_input_per_million_atomic),
    onMissingUsage: stored.on_missing_usage,
  }
}

export function pricingToStored(p: Pricing): StoredPricing | null {
  if (p.model === 'fixed') return null
  if (p.model === 'rules') {
    return {
      model: 'rules',
      rules: p.rules.map((r) => ({
        method: r.method,
        path_prefix: r.pathPrefix,
        price_atomic: r.priceAtomic.toString(),
      })),
      default_atomic: p.defaultAtomic.toString(),
    }
  }
  return {
    model: 'usage',
    unit: p.unit,
    max_atomic: p.maxAtomic.toString(),
    per_mb_atomic: text(p.perMbAtomic),
    per_second_atomic: text(p.perSecondAtomic),
    input_per_million_atomic: text(p.inputPerMillionAtomic),
    output_per_million_atomic: text(p.outputPerMillionAtomic),
    cached_input_per_million_atomic: text(p.cachedInputPerMillionAtomic),
    on_missing_usage: p.onMissingUsage,
  }
}

/** The price the endpoint's price_atomic column holds: the fixed price, the rules' default, the ceiling. */
export function headlinePrice(p: Pricing): bigint {
  if (p.model === 'fixed') return p.priceAtomic
  if (p.model === 'rules') return p.defaultAtomic
  return p.maxAtomic
}

/** Which price a request pays under rules: the first rule whose method and path prefix match, else the default. */
export function ruleIndex(rules: readonly PriceRule[], method: string, subPath: string): number {
  for (let i = 0; i < rules.length; i++) {
    const r = rules[i]!
    if ((r.method === null || r.method === method) && subPath.startsWith(r.pathPrefix)) return i
  }
  return -1
}

/** The measured part of a usage record as stored on its call row (JSON; money stays in its own columns). */
export function usageDocument(u: UsageRecord): object {
  const doc = { quantities: u.quantities, source: u.source, fallback: u.fallback, capped: u.capped }
  return u.session === undefined ? doc : { ...doc, session: u.session }
}
