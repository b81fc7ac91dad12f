// Reconcile, the capture batches (migration 0050): a capture statement books its transaction-hash calls as one
// owner share and one fee entry per account (source 'capture_batch'), and each call names its batch. Per
// batch, account and kind, the sum of the calls' owner shares (fees) must equal the batch's owner share
// (fee) entries, to the base unit; a batch with calls and no entries, or entries and no calls, is a
// difference too. Calls and entries of one batch share created_at (one statement), so a time range holds a
// batch whole or not at all: checking the range is exact.
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
    WITH c AS (
      SELECT ledger_batch_id::text AS batch, account_id, count(*)::int AS calls,
             sum(owner_share_atomic)::bigint AS owner, sum(fee_atomic)::bigint AS fee
      FROM calls
      WHERE ledger_batch_id IS NOT NULL AND created_at >= ${range.from} AND created_at < ${range.to}
      GROUP BY 1, 2
    ),
    e AS (
      SELECT source_id AS batch, account_id, count(*)::int AS entries,
             count(*) FILTER (WHERE kind = 'owner_share')::int AS owner_entries,
             count(*) FILTER (WHERE kind = 'fee')::int AS fee_entries,
             coalesce(sum(amount_atomic) FILTER (WHERE kind = 'owner_share'), 0)::bigint AS owner,
             coalesce(sum(amount_atomic) FILTER (WHERE kind = 'fee'), 0)::bigint AS fee
      FROM ledger_entries
      WHERE source_type = 'capture_batch' AND created_at >= ${range.from} AND created_at < ${range.to}
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
                     'capture batch ' || batch || ' of account ' || account_id || ': calls owner share '
                     || calls_owner || ' / fee ' || calls_fee || ' (' || calls || ' calls) ≠ entries '
                     || entries_owner || ' / ' || entries_fee || ' (' || entries || ' entries)')
            FROM (SELECT * FROM j WHERE mismatch ORDER BY batch, account_id LIMIT ${NAMED}) m) AS named`
  const r = row!
  const differences = [...(r.named ?? [])]
  if (r.mismatched > differences.length)
    differences.push(`… and ${r.mismatched - differences.length} more capture batches`)
  return { batches: r.batches, entries: r.entries, calls: r.calls, mismatched: r.mismatched, differences }
}
