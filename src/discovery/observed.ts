// What paid traffic observed of an endpoint: upstream latency in fixed buckets (so hours add up by adding
// counts), and the 7-day figures a listing shows, read from the hourly rows.

/** Upper bounds (ms) of the latency buckets; the last bucket holds everything slower. */
export const LATENCY_BOUNDS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000] as const
export const LATENCY_BUCKETS = LATENCY_BOUNDS_MS.length + 1

export function latencyBucket(ms: number): number {
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) if (ms <= LATENCY_BOUNDS_MS[i]!) return i
  return LATENCY_BOUNDS_MS.length
}

/**
 * The q-quantile as the upper bound of the bucket it falls in (an upper estimate, never below the truth);
 * null without samples, and the last bound for the overflow bucket (reported as "over 10 s").
 */
export function quantileMs(counts: readonly number[], q: number): number | null {
  let total = 0
  for (const c of counts) total += c
  if (total === 0) return null
  const rank = Math.ceil(q * total)
  let seen = 0
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!
    if (seen >= rank) return LATENCY_BOUNDS_MS[Math.min(i, LATENCY_BOUNDS_MS.length - 1)]!
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1]!
}

export interface ObservedRow {
  paid_calls: number
  succeeded: number
  unserved: number
  latency_buckets: number[]
  repeat_payers: number
}

/** The figures one listing item carries, over the window the rows cover. */
export function presentObserved(r: ObservedRow | undefined, windowDays: number) {
  const paid = r?.paid_calls ?? 0
  const buckets = r?.latency_buckets ?? []
  return {
    window_days: windowDays,
    paid_calls: paid,
    success_rate: paid === 0 ? null : round4(r!.succeeded / paid),
    refund_rate: paid === 0 ? null : round4(r!.unserved / paid),
    p50_upstream_ms: quantileMs(buckets, 0.5),
    p99_upstream_ms: quantileMs(buckets, 0.99),
    repeat_payers: r?.repeat_payers ?? 0,
  }
}

/** An endpoint with identity rules: its window's paid calls by who called (a configured signer or "unsigned"). */
export function presentAgents(
  rows: ReadonlyArray<{ signer: string; paid_calls: number; succeeded: number }>,
) {
  return rows.map((r) => ({
    signer: r.signer,
    paid_calls: r.paid_calls,
    success_rate: r.paid_calls === 0 ? null : round4(r.succeeded / r.paid_calls),
  }))
}

function round4(x: number): number {
  return Math.round(x * 10_000) / 10_000
}
