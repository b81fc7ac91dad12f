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

/**
 * Unpaid, payable entries, oldest first; wallets still backing off after a failed payout wait. The index
 * ledger_payable (migration 0012) holds exactly the first line's predicate, by id.
 */
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

/**
 * Whether some wallet's unpaid balance is at least `minAtomic` (cheap, no locks): one look at the running
 * wallet balances (kept by triggers on ledger_entries, migration 0011), not a sum over the unpaid entries.
 */
export async function someWalletOwedAtLeast(
  db: Sql | Tx,
  { minAtomic }: { minAtomic: bigint },
): Promise<boolean> {
  const rows = await db`
    SELECT 1 FROM wallet_balance_totals w
    WHERE w.unpaid_atomic > 0 AND w.unpaid_atomic >= ${minAtomic.toString()}::bigint
      AND NOT EXISTS (
        SELECT 1 FROM payouts p WHERE p.wallet = w.wallet AND p.status = 'failed' AND p.retry_at > now()
      )
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

/**
 * The balance view of GET /account: the running balances (migration 0011: at most 8 slot rows, read through
 * the primary key), kept in the same statement as the entries that change them; reconcile checks them.
 */
export async function accountBalance(db: Sql | Tx, accountId: string): Promise<AccountBalance> {
  const [row] = await db<AccountBalance[]>`
    SELECT owner_share_atomic + fees_atomic AS captured_atomic, owner_share_atomic, fees_atomic,
           paid_out_atomic, owner_share_atomic - paid_out_atomic AS pending_atomic, in_flight_atomic,
           refunded_atomic, refunds_atomic - refunded_atomic AS refunds_pending_atomic
    FROM account_balance_totals WHERE account_id = ${accountId}`
  return row ?? ZERO_BALANCE
}

const ZERO_BALANCE: AccountBalance = {
  captured_atomic: 0n,
  owner_share_atomic: 0n,
  fees_atomic: 0n,
  paid_out_atomic: 0n,
  pending_atomic: 0n,
  in_flight_atomic: 0n,
  refunded_atomic: 0n,
  refunds_pending_atomic: 0n,
}
