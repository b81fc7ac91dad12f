// Ledger entries: appended (revenue of a capture batch or of a call, refunds), and linked to / unlinked from
// the payout that pays them. Nothing else ever changes an entry.
import type { PendingQuery, Row } from 'postgres'
import type { Sql, Tx } from '../db/sql.ts'

type Db = Sql | Tx

/**
 * The owner share and fee entries of calls, one pair per call (source 'call'). `calls` is a relation (a CTE
 * name or subquery) with the columns call_id, account_id, owner_wallet, owner_share, fee: bookCallRevenue
 * passes the stored x402 calls whose settlement it books.
 */
export function revenueEntries(db: Db, calls: PendingQuery<Row[]>): PendingQuery<Row[]> {
  return db`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT r.account_id, 'owner_share', r.owner_wallet, r.owner_share, 'call', r.call_id FROM ${calls} r
    UNION ALL
    SELECT r.account_id, 'fee', NULL, r.fee, 'call', r.call_id FROM ${calls} r`
}

/**
 * The owner share and fee entries of a capture batch (migration 0050): one owner share per account and
 * owner wallet, one fee per account, each the sum over the batch's calls, source 'capture_batch' and
 * source_id `batchId` (the number the calls carry in ledger_batch_id). `calls` has the columns account_id,
 * owner_wallet, owner_share, fee. Zero sums are booked too, so every account of a batch has both its
 * entries and reconcile can ask for exactly them.
 */
export function batchRevenueEntries(
  db: Db,
  q: { calls: PendingQuery<Row[]>; batchId: PendingQuery<Row[]> },
): PendingQuery<Row[]> {
  return db`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT r.account_id, 'owner_share', r.owner_wallet, sum(r.owner_share)::bigint, 'capture_batch',
           ${q.batchId}::text
    FROM ${q.calls} r GROUP BY r.account_id, r.owner_wallet
    UNION ALL
    SELECT r.account_id, 'fee', NULL, sum(r.fee)::bigint, 'capture_batch', ${q.batchId}::text
    FROM ${q.calls} r GROUP BY r.account_id`
}

/**
 * A usage-priced call paid by a prepaid ceiling (a transaction hash for more than the charge): the unused
 * part goes back to the payer, a refund entry paid in the next payout batch. `calls` has the columns call_id,
 * account_id, payer, refund (> 0). Booked in the capture statement itself, so a capture never exists without
 * the refund it owes.
 */
export function unusedCeilingRefunds(db: Db, calls: PendingQuery<Row[]>): PendingQuery<Row[]> {
  return db`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT r.account_id, 'refund', r.payer, r.refund, 'call', r.call_id FROM ${calls} r`
}

/**
 * Books the revenue (owner share + fee) of captured calls that have none yet, one pair of entries per call.
 * Used by the settlement room for x402 calls (revenue only once the authorization settled);
 * transaction-hash calls are booked inside their capture, by its batch entries. Idempotent: a call already
 * booked (by entries of its own or by a capture batch) is skipped. Returns how many calls were booked.
 */
export async function bookCallRevenue(db: Tx, q: { proofKeys: string[] }): Promise<number> {
  if (q.proofKeys.length === 0) return 0
  // One index look-up of its claim and of its call per key, whatever the tables held when they were last
  // analysed or first planned. Driven from the keys (each LATERAL kept apart by OFFSET 0): as a plain join on
  // statistics of small tables, the plan walked every call of the account for each key found. Planned afresh
  // at every execution: a generic plan the connection kept from when a partition was small (the day's
  // claims, the vouchers', a new month of calls) scanned it whole once per key. Either ran a channel claim
  // of 80,000 calls past the statement timeout on every retry, and the claim was never recorded.
  await db`SET LOCAL plan_cache_mode = force_custom_plan`
  const [row] = await db<{ n: number }[]>`
    WITH due AS (
      SELECT k.id AS call_id, k.account_id, a.wallet_address AS owner_wallet,
             k.owner_share_atomic AS owner_share, k.fee_atomic AS fee
      FROM unnest(${q.proofKeys}::text[]) AS p(proof_key)
      -- From the proof to its call by the call its claim names (migration 0059).
      CROSS JOIN LATERAL (SELECT j.call_id FROM claims j WHERE j.proof_key = p.proof_key OFFSET 0) j
      CROSS JOIN LATERAL (SELECT * FROM calls c WHERE c.id = j.call_id OFFSET 0) k
      JOIN accounts a ON a.id = k.account_id
      WHERE k.ledger_batch_id IS NULL
        AND NOT EXISTS (SELECT 1 FROM ledger_entries e
                        WHERE e.source_type = 'call' AND e.source_id = k.id AND e.kind <> 'refund')
    ),
    booked AS (${revenueEntries(db, db`due`)} RETURNING source_id)
    SELECT count(DISTINCT source_id)::int AS n FROM booked`
  return row?.n ?? 0
}

/** What a payout's linked entries add up to, per account (account_id null: entries of no account). */
export interface LinkedPart {
  payout_id: string
  account_id: string | null
  owner_share_atomic: bigint
  refund_atomic: bigint
  entries_count: number
}

/**
 * Links entries to the payouts that pay them; only entries not in a payout yet (`payout_id IS NULL`).
 * `entryIds` is a PostgreSQL bigint[] literal (as lockPayableBatch returns it). Returns what was linked,
 * summed per payout and account in SQL: an entry already in a payout is left alone and missing from the sums.
 */
export async function linkEntriesToPayouts(
  tx: Tx,
  links: Array<{ payoutId: string; entryIds: string }>,
): Promise<LinkedPart[]> {
  if (links.length === 0) return []
  return tx<LinkedPart[]>`
    WITH m AS (
      SELECT l.payout_id, unnest(l.ids::bigint[]) AS id
      FROM unnest(${links.map((l) => l.payoutId)}::text[], ${links.map((l) => l.entryIds)}::text[])
        AS l(payout_id, ids)
    ),
    linked AS (
      UPDATE ledger_entries e SET payout_id = m.payout_id
      FROM m
      WHERE e.id = m.id AND e.payout_id IS NULL
      RETURNING e.payout_id, e.account_id, e.kind, e.amount_atomic
    )
    SELECT payout_id, account_id,
           coalesce(sum(amount_atomic) FILTER (WHERE kind <> 'refund'), 0)::bigint AS owner_share_atomic,
           coalesce(sum(amount_atomic) FILTER (WHERE kind = 'refund'), 0)::bigint AS refund_atomic,
           count(*)::int AS entries_count
    FROM linked GROUP BY payout_id, account_id`
}

/**
 * Entries of a failed payout go back to unpaid, to be batched again after the backoff; a merchant's refund
 * (source 'refund') stays with the failed payout, where failRefunds reversed it.
 */
export async function unlinkEntries(tx: Tx, payoutId: string): Promise<number> {
  const rows = await tx`
    UPDATE ledger_entries SET payout_id = NULL
    WHERE payout_id = ${payoutId} AND NOT (source_type = 'refund' AND kind = 'refund')
    RETURNING id`
  return rows.length
}
