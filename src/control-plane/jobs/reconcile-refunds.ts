// Reconcile, the merchants' refunds: each refund against its ledger entries and its payout, and each paid
// payment, call or facilitator settlement against what its refunds took. Needs no chain: the payouts'
// transfers are checked by the outflow section, so a paid refund only has to sit in a confirmed payout with
// the same transaction.
import type { Sql } from '../../db/sql.ts'

export interface RefundsCheck {
  refunds: number
  paid: number
  pending: number
  failed: number
  /** Entries ≠ the refund: payer's part ≠ amount, debit or fee part ≠ the refund's, or not summing to 0. */
  entries_mismatch: number
  /** paid without its refund entry in a confirmed payout of the same transaction; pending with it in one. */
  payout_mismatch: number
  /** failed but not reversed: the payer's part still stands. */
  failed_not_reversed: number
  /** A payment, call or facilitator settlement whose refunds not failed exceed what it booked. */
  over_refunded: number
  differences: string[]
}

const NAMED = 50

export async function checkRefunds(sql: Sql, range: { from: Date; to: Date }): Promise<RefundsCheck> {
  const rows = await sql<{ rule: string; n: number; named: string[]; detail: string[] }[]>`
    WITH r AS (
      SELECT r.id, r.status, r.amount_atomic, r.owner_debit_atomic, r.fee_returned_atomic, r.transaction,
             r.payment_id, r.call_id, r.settlement_id, e.payer_part, e.debit_part, e.fee_part, e.total, e.payer_net, e.linked_tx, e.linked_status
      FROM refunds r
      LEFT JOIN LATERAL (
        SELECT coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'refund' AND x.amount_atomic > 0), 0)::bigint
                 AS payer_part,
               coalesce(-sum(x.amount_atomic) FILTER (WHERE x.kind = 'owner_share' AND x.amount_atomic < 0), 0)::bigint
                 AS debit_part,
               coalesce(-sum(x.amount_atomic) FILTER (WHERE x.kind = 'fee' AND x.amount_atomic < 0), 0)::bigint
                 AS fee_part,
               coalesce(sum(x.amount_atomic), 0)::bigint AS total,
               coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'refund'), 0)::bigint AS payer_net,
               (array_agg(lower(p.tx_hash)) FILTER (WHERE x.kind = 'refund' AND x.amount_atomic > 0))[1] AS linked_tx,
               (array_agg(p.status) FILTER (WHERE x.kind = 'refund' AND x.amount_atomic > 0))[1] AS linked_status
        FROM ledger_entries x LEFT JOIN payouts p ON p.id = x.payout_id
        WHERE x.source_type = 'refund' AND x.source_id = r.id
      ) e ON true
      WHERE r.created_at >= ${range.from} AND r.created_at < ${range.to}
    ),
    sources AS (
      SELECT coalesce(r.payment_id, r.call_id, r.settlement_id) AS source,
             sum(r.amount_atomic)::bigint AS refunded,
             ((SELECT coalesce(sum(e.amount_atomic), 0) FROM ledger_entries e
                WHERE e.source_type = CASE WHEN r.payment_id IS NOT NULL THEN 'payment'
                                           WHEN r.call_id IS NOT NULL THEN 'call' ELSE 'facilitator' END
                  AND e.source_id = coalesce(r.payment_id, r.call_id, r.settlement_id)
                  AND e.kind IN ('owner_share', 'fee'))
              -- A call booked by its capture batch (migration 0050) booked its own owner share and fee.
              + coalesce((SELECT k.owner_share_atomic + k.fee_atomic FROM calls k
                          WHERE k.id = r.call_id AND k.ledger_batch_id IS NOT NULL), 0))::bigint
               AS booked
      FROM refunds r
      WHERE r.status <> 'failed'
        AND coalesce(r.payment_id, r.call_id, r.settlement_id)
            IN (SELECT coalesce(payment_id, call_id, settlement_id) FROM r)
      GROUP BY 1, r.payment_id, r.call_id, r.settlement_id
    ),
    broken AS (
      SELECT 'entries_mismatch' AS rule, id, payer_part || '/' || debit_part || '/' || fee_part AS detail FROM r
        WHERE payer_part <> amount_atomic OR debit_part <> owner_debit_atomic OR fee_part <> fee_returned_atomic
          OR total <> 0 OR (status <> 'failed' AND payer_net <> amount_atomic)
      UNION ALL
      SELECT 'payout_mismatch', id, status || ' in a ' || coalesce(linked_status, 'missing') || ' payout' FROM r
        WHERE (status = 'paid' AND (linked_status IS DISTINCT FROM 'confirmed' OR linked_tx IS DISTINCT FROM lower(transaction)))
           OR (status = 'pending' AND linked_status IN ('confirmed', 'failed'))
      UNION ALL
      SELECT 'failed_not_reversed', id, payer_net || ' still owed to the payer' FROM r
        WHERE status = 'failed' AND payer_net <> 0
      UNION ALL
      SELECT 'over_refunded', source, refunded || ' refunded of ' || booked FROM sources WHERE refunded > booked
    )
    SELECT rule, count(*)::int AS n, (array_agg(id ORDER BY id))[1:${NAMED}] AS named,
           (array_agg(detail ORDER BY id))[1:${NAMED}] AS detail
    FROM broken GROUP BY rule
    UNION ALL
    SELECT 'status:' || status, count(*)::int, '{}', '{}' FROM r GROUP BY status`
  const check: RefundsCheck = {
    refunds: 0,
    paid: 0,
    pending: 0,
    failed: 0,
    entries_mismatch: 0,
    payout_mismatch: 0,
    failed_not_reversed: 0,
    over_refunded: 0,
    differences: [],
  }
  for (const row of rows) {
    if (row.rule.startsWith('status:')) {
      const status = row.rule.slice(7) as 'paid' | 'pending' | 'failed'
      check[status] = row.n
      check.refunds += row.n
      continue
    }
    const rule = row.rule as keyof typeof MESSAGES
    check[rule] = row.n
    row.named.forEach((id, i) => {
      check.differences.push(`refund ${id}: ${MESSAGES[rule]} (${row.detail[i]})`)
    })
    if (row.n > row.named.length)
      check.differences.push(`… and ${row.n - row.named.length} more: ${MESSAGES[rule]}`)
  }
  return check
}

const MESSAGES = {
  entries_mismatch:
    "its ledger entries differ from the refund (payer's part/merchant's debit/fee given back)",
  payout_mismatch: 'its status disagrees with the payout that carries it',
  failed_not_reversed: 'failed, but its entries were not reversed',
  over_refunded: 'refunded more than it booked',
} as const
