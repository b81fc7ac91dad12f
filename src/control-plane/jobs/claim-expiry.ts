// Proofs claimed for a call but never captured (upstream down for the whole retry window) are owed back to
// their payer: mark them refund_due and book a refund ledger entry, in one statement, exactly once.
import type { Sql } from '../../db/sql.ts'

export async function expireUncapturedClaims(sql: Sql): Promise<number> {
  // An x402 authorization that was never captured is never settled: no money moved, nothing to refund.
  await sql`
    UPDATE claims SET status = 'void', lease_until = NULL
    WHERE status = 'claimed' AND kind = 'eip3009' AND target_type = 'call' AND retry_until < now()
      AND (lease_until IS NULL OR lease_until < now())`
  const rows = await sql`
    WITH expired AS (
      UPDATE claims SET status = 'refund_due', lease_until = NULL
      WHERE status = 'claimed' AND kind = 'tx' AND target_type = 'call' AND retry_until < now()
        AND (lease_until IS NULL OR lease_until < now())
      RETURNING proof_key, account_id, payer, amount_atomic
    )
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT account_id, 'refund', payer, amount_atomic, 'claim', proof_key FROM expired
    RETURNING id`
  return rows.length
}
