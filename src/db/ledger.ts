// Ledger reads: what is owed to which wallet (unpaid owner shares and refunds), and an account's balance.
// Fees are never paid out: they stay in the treasury. Entries are written only in src/books/ledger.ts.
import type { Sql, Tx } from './sql.ts'

export interface PayableEntry {
  id: bigint
  wallet: string
  kind: 'owner_share' | 'refund'
  amount_atomic: bigint
  account_id: string | null
}

/** Unpaid, payable entries, oldest first; wallets still backing off after a failed payout wait. */
const PAYABLE = (db: Sql | Tx) => db`
  e.payout_id IS NULL AND e.kind IN ('owner_share', 'refund') AND e.wallet IS NOT NULL
  AND NOT EXISTS (
    SELECT 1 FROM payouts p WHERE p.wallet = e.wallet AND p.status = 'failed' AND p.retry_at > now()
  )`

/** Locks up to `limit` payable entries for this transaction (the batch that will link them to payouts). */
export async function lockPayableEntries(tx: Tx, { limit }: { limit: number }): Promise<PayableEntry[]> {
  return tx<PayableEntry[]>`
    SELECT e.id, e.wallet, e.kind, e.amount_atomic, e.account_id
    FROM ledger_entries e
    WHERE ${PAYABLE(tx)}
    ORDER BY e.id
    LIMIT ${limit}
    FOR UPDATE OF e`
}

/** Whether some wallet's unpaid balance is at least `minAtomic` (cheap, no locks). */
export async function someWalletOwedAtLeast(
  db: Sql | Tx,
  { minAtomic }: { minAtomic: bigint },
): Promise<boolean> {
  const rows = await db`
    SELECT 1 FROM ledger_entries e
    WHERE ${PAYABLE(db)}
    GROUP BY e.wallet
    HAVING sum(e.amount_atomic) >= ${minAtomic.toString()}::bigint
    LIMIT 1`
  return rows.length > 0
}

export interface AccountBalance {
  /** Gross amount captured for the account (owner shares + fees). */
  captured_atomic: bigint
  owner_share_atomic: bigint
  fees_atomic: bigint
  /** Owner shares in confirmed payouts. */
  paid_out_atomic: bigint
  /** Owner shares not paid yet: unpaid, or in a payout not confirmed yet. */
  pending_atomic: bigint
  /** Part of pending already in a payout on its way (pending/submitted). */
  in_flight_atomic: bigint
  /** Refunds of the account's uncaptured proofs: sent, and still to send. */
  refunded_atomic: bigint
  refunds_pending_atomic: bigint
}

/** The balance view of GET /account. */
export async function accountBalance(db: Sql | Tx, accountId: string): Promise<AccountBalance> {
  const [row] = await db<AccountBalance[]>`
    SELECT
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind IN ('owner_share', 'fee')), 0)::bigint AS captured_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0)::bigint AS owner_share_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0)::bigint AS fees_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status = 'confirmed'), 0)::bigint
        AS paid_out_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status IS DISTINCT FROM 'confirmed'), 0)::bigint
        AS pending_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status IN ('pending', 'submitted')), 0)::bigint
        AS in_flight_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND p.status = 'confirmed'), 0)::bigint
        AS refunded_atomic,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND p.status IS DISTINCT FROM 'confirmed'), 0)::bigint
        AS refunds_pending_atomic
    FROM ledger_entries e LEFT JOIN payouts p ON p.id = e.payout_id
    WHERE e.account_id = ${accountId}`
  return row!
}
