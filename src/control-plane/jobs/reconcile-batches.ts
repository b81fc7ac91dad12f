// Reconcile, the revenue batches: a capture statement books its transaction-hash calls as one owner share and
// one fee entry per account (source 'capture_batch', migration 0050), a settlement statement its settled x402
// calls the same way (source 'settlement_batch', migration 0064), and each call names its batch. Per batch,
// account and kind, the sum of the calls' owner shares (fees) must equal the batch's owner share (fee)
// entries, to the base unit; a batch with calls and no entries, or entries and no calls, is a difference too.
// - A capture batch's calls and entries share created_at (one statement), so a time range holds it whole or
//   not at all: checking the range is exact.
// - A settlement batch's calls were written before its entries, so it is checked whole whenever its entries
//   or any of its calls fall in the range: every call of it (calls_settlement_batch) with the sums of its
//   calls whose month was archived (archived_batch_calls), against every entry of it.
import type { Sql } from '../../db/sql.ts'

export interface BatchesCheck {
  /** Batches with calls or entries in the range. */
  batches: number
  /** Entries of those batches (owner shares and fees). */
  entries: number
  /** Calls booked by those batches. */
  calls: number
  /** (batch, account) pairs whose calls do not sum to their entries, per kind. */
  mismatched: number
  differences: string[]
}

/** At most this many mismatches are named; the count stays exact. */
const NAMED = 50

export async function checkBatches(sql: Sql, range: { from: Date; to: Date }): Promise<BatchesCheck> {
  // Summed in SQL: a full run covers every batch of history; only the mismatches (at most NAMED) come back.
  const [row] = await sql<
    { batches: number; entries: number; calls: number; mismatched: number; named: string[] | null }[]
  >`
    WITH in_range AS MATERIALIZED (
      SELECT ledger_batch_id AS batch, account_id, count(*) AS calls, sum(owner_share_atomic) AS owner,
             sum(fee_atomic) AS fee
      FROM calls
      WHERE ledger_batch_id IS NOT NULL AND created_at >= ${range.from} AND created_at < ${range.to}
      GROUP BY 1, 2
    ),
    -- The settlement batches the range touches, by an entry or by a call.
    settled AS MATERIALIZED (
      SELECT source_id::bigint AS batch FROM ledger_entries
      WHERE source_type = 'settlement_batch' AND created_at >= ${range.from} AND created_at < ${range.to}
      UNION
      SELECT batch FROM in_range WHERE batch < 0
    ),
    c AS (
      SELECT batch::text AS batch, account_id, sum(calls)::int AS calls, sum(owner)::bigint AS owner,
             sum(fee)::bigint AS fee
      FROM (
        SELECT * FROM in_range WHERE batch > 0
        UNION ALL
        SELECT ledger_batch_id, account_id, count(*), sum(owner_share_atomic), sum(fee_atomic)
        FROM calls WHERE ledger_batch_id < 0 AND ledger_batch_id IN (SELECT batch FROM settled)
        GROUP BY 1, 2
        UNION ALL
        SELECT batch_id, account_id, calls, owner_share_atomic, fee_atomic
        FROM archived_batch_calls WHERE batch_id IN (SELECT batch FROM settled)
      ) x
      GROUP BY 1, 2
    ),
    e AS (
      SELECT source_id AS batch, account_id, count(*)::int AS entries,
             count(*) FILTER (WHERE kind = 'owner_share')::int AS owner_entries,
             count(*) FILTER (WHERE kind = 'fee')::int AS fee_entries,
             coalesce(sum(amount_atomic) FILTER (WHERE kind = 'owner_share'), 0)::bigint AS owner,
             coalesce(sum(amount_atomic) FILTER (WHERE kind = 'fee'), 0)::bigint AS fee
      FROM (
        SELECT source_id, account_id, kind, amount_atomic FROM ledger_entries
        WHERE source_type = 'capture_batch' AND created_at >= ${range.from} AND created_at < ${range.to}
        UNION ALL
        SELECT source_id, account_id, kind, amount_atomic FROM ledger_entries
        WHERE source_type = 'settlement_batch' AND source_id IN (SELECT batch::text FROM settled)
      ) x
      GROUP BY 1, 2
    ),
    j AS MATERIALIZED (
      SELECT coalesce(c.batch, e.batch) AS batch, coalesce(c.account_id, e.account_id) AS account_id,
             coalesce(c.calls, 0) AS calls, coalesce(e.entries, 0) AS entries,
             coalesce(c.owner, 0) AS calls_owner, coalesce(c.fee, 0) AS calls_fee,
             coalesce(e.owner, 0) AS entries_owner, coalesce(e.fee, 0) AS entries_fee,
             -- Every (batch, account) has its one fee entry and at least one owner share entry (one per
             -- owner wallet), even when they are zero; entries without calls are a difference too.
             (coalesce(c.owner, 0) <> coalesce(e.owner, 0) OR coalesce(c.fee, 0) <> coalesce(e.fee, 0)
              OR c.calls IS NULL OR coalesce(e.fee_entries, 0) <> 1 OR coalesce(e.owner_entries, 0) = 0)
               AS mismatch
      FROM c FULL JOIN e ON e.batch = c.batch AND e.account_id = c.account_id
    )
    SELECT (SELECT count(DISTINCT batch)::int FROM j) AS batches,
           (SELECT coalesce(sum(entries), 0)::int FROM j) AS entries,
           (SELECT coalesce(sum(calls), 0)::int FROM j) AS calls,
           (SELECT count(*)::int FROM j WHERE mismatch) AS mismatched,
           (SELECT array_agg(
                     CASE WHEN batch LIKE '-%' THEN 'settlement batch ' ELSE 'capture batch ' END
                     || batch || ' of account ' || account_id || ': calls owner share '
                     || calls_owner || ' / fee ' || calls_fee || ' (' || calls || ' calls) ≠ entries '
                     || entries_owner || ' / ' || entries_fee || ' (' || entries || ' entries)')
            FROM (SELECT * FROM j WHERE mismatch ORDER BY batch, account_id LIMIT ${NAMED}) m) AS named`
  const r = row!
  const differences = [...(r.named ?? [])]
  if (r.mismatched > differences.length)
    differences.push(`… and ${r.mismatched - differences.length} more revenue batches`)
  return { batches: r.batches, entries: r.entries, calls: r.calls, mismatched: r.mismatched, differences }
}
