// An endpoint's pricing as the hot path uses it: money in base units (bigint), never floats. The wire
// shape (dollars, valibot) is src/control-plane/routes/endpoints.ts; the stored shape is parsed here.

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
}
