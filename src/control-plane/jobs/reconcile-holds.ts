// Reconcile, the payer reservation's running totals (migration 0079): what payer_holds and the changes not
// folded yet say each payer's unsettled x402 payments hold, against claim_holds summed over the claims
// themselves. One statement, one snapshot: a trigger's change commits with the claim it follows, so any
// difference is a hold the triggers missed, not a race. Not ranged: it is the present state, read over the
// claims in flight only (each partial index of the unsettled claims), whatever the range.
import type { Sql } from '../../db/sql.ts'

export interface HoldsCheck {
  /** Payers whose claims hold anything, or whose total says so. */
  payers: number
  /** Payers whose total (with its pending changes) is not what their claims hold. */
  mismatched: number
  differences: string[]
}

/** At most this many payers are named; the count stays exact. */
const NAMED = 20

export async function checkHolds(sql: Sql): Promise<HoldsCheck> {
  const rows = await sql<{ payer: string; claims: string; total: string }[]>`
    WITH by_claims AS (
      SELECT lower(payer) AS payer_l,
             sum(claim_holds(kind, status, settled_at, settlement_error, lease_until, releases, attempts,
                             amount_atomic)) AS held
      FROM claims
      WHERE settled_at IS NULL AND settlement_error IS NULL
        AND ((kind = 'eip3009' AND status IN ('claimed', 'captured', 'settling'))
             OR (kind = 'upto' AND status IN ('claimed', 'settling')))
      GROUP BY lower(payer)
    ),
    by_total AS (
      SELECT payer_l, sum(held) AS held FROM (
        SELECT payer_l, held_atomic AS held FROM payer_holds
        UNION ALL SELECT payer_l, delta_atomic FROM payer_hold_changes
      ) t GROUP BY payer_l
    )
    SELECT payer_l AS payer, coalesce(c.held, 0)::text AS claims, coalesce(t.held, 0)::text AS total
    FROM by_claims c FULL JOIN by_total t USING (payer_l)
    WHERE coalesce(c.held, 0) <> 0 OR coalesce(t.held, 0) <> 0`
  const off = rows.filter((r) => r.claims !== r.total)
  return {
    payers: rows.length,
    mismatched: off.length,
    differences: off
      .slice(0, NAMED)
      .map((r) => `payer hold: ${r.payer} holds ${r.claims} by its claims, ${r.total} by its running total`),
  }
}
