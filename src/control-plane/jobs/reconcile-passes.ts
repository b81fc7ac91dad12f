// Reconcile, passes: each pass against the purchase it was opened from (a captured claim whose call is the
// endpoint's PASS call, for the pass's price) and its count against its draws (calls bought − uses left =
// draws not given back). Needs no chain: the purchase's money is its call's, checked with every call.
import type { Sql } from '../../db/sql.ts'

export interface PassesCheck {
  passes: number
  /** Uses drawn and not given back, over the passes checked. */
  uses_drawn: number
  /** A pass whose purchase is not a captured PASS call of its endpoint for its price. */
  without_purchase: number
  /** calls bought − uses left ≠ the draws not given back (or uses left outside 0…calls bought). */
  count_mismatch: number
  differences: string[]
}

const NAMED = 50

export async function checkPasses(sql: Sql, range: { from: Date; to: Date }): Promise<PassesCheck> {
  const [row] = await sql<
    { passes: number; uses_drawn: number; without_purchase: string[]; count_mismatch: string[] }[]
  >`
    WITH p AS (
      SELECT p.id, p.calls_total, p.uses_left, p.price_atomic,
             -- A claim may be pruned once its proof is too old to be presented (bounded history); its
             -- call never is.
             ((c.status = 'captured' OR c.proof_key IS NULL) AND k.method = 'PASS'
               AND k.endpoint_id = p.endpoint_id AND k.amount_atomic = p.price_atomic) AS purchased,
             (SELECT count(*) FROM pass_draws d WHERE d.pass_id = p.id AND NOT d.given_back)::int AS drawn
      FROM passes p
      LEFT JOIN claims c ON c.proof_key = p.proof_key
      LEFT JOIN calls k ON k.id = p.call_id
      WHERE p.created_at >= ${range.from} AND p.created_at < ${range.to}
    )
    SELECT count(*)::int AS passes,
           coalesce(sum(drawn), 0)::int AS uses_drawn,
           coalesce((array_agg(id) FILTER (WHERE purchased IS NOT TRUE))[1:${NAMED}], '{}') AS without_purchase,
           coalesce((array_agg(id || ' ' || (calls_total - uses_left) || '≠' || drawn)
             FILTER (WHERE calls_total IS NOT NULL AND calls_total - uses_left <> drawn))[1:${NAMED}], '{}')
             AS count_mismatch
    FROM p`
  const r = row!
  const differences = [
    ...r.without_purchase.map((id) => `pass ${id}: not opened from a captured purchase of its price`),
    ...r.count_mismatch.map(
      (d) => `pass ${d.split(' ')[0]}: uses drawn ${d.split(' ')[1]} (bought − left ≠ draws)`,
    ),
  ]
  return {
    passes: r.passes,
    uses_drawn: r.uses_drawn,
    without_purchase: r.without_purchase.length,
    count_mismatch: r.count_mismatch.length,
    differences,
  }
}
