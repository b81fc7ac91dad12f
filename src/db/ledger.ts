// Ledger reads: what is owed to which wallet (unpaid owner shares and refunds), and an account's balance.
// Fees are never paid out: they stay in the treasury. Entries are written only in src/books/ledger.ts.
import type { PayoutKind } from './payouts.ts'
import type { Sql, Tx } from './sql.ts'

/** One wallet's part of a payout batch, summed in SQL: no entry crosses into this process. */
export interface PayableWallet {
  wallet: string
  amount_atomic: bigint
  kind: PayoutKind
  entries_count: number
  /** The ids of its locked entries as a PostgreSQL bigint[] literal, handed back unparsed to link them. */
  entry_ids: string
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

/**
 * Locks up to `limit` payable entries for this transaction (the batch that will link them to payouts) and
 * sums them per wallet (case-insensitive; the spelling of its oldest entry), in one statement. Returns the
 * wallets owed at least `minAtomic`, largest first, at most `maxWallets`, and how many wallets wait.
 *
 * Why in SQL: a batch holds up to 100,000 entries. Read into this process (which serves paid calls too) they
 * cost ~0.9 s of its CPU and stalled its event loop for ~150 ms (bench/history/payout-record-cost.ts); as
 * sums and one id list per wallet they cost a few milliseconds.
 */
export async function lockPayableBatch(
  tx: Tx,
  o: { limit: number; minAtomic: bigint; maxWallets: number },
): Promise<{ wallets: PayableWallet[]; waiting: number }> {
  const rows = await tx<(PayableWallet & { groups: number })[]>`
    WITH batch AS (
      SELECT e.id, e.wallet, e.kind, e.amount_atomic
      FROM ledger_entries e
      WHERE ${PAYABLE(tx)}
      ORDER BY e.id
      LIMIT ${o.limit}
      FOR UPDATE OF e
    ),
    per_wallet AS (
      SELECT (array_agg(wallet ORDER BY id))[1] AS wallet, sum(amount_atomic)::bigint AS amount_atomic,
             CASE WHEN bool_and(kind = 'refund') THEN 'refund' WHEN bool_or(kind = 'refund') THEN 'mixed'
                  ELSE 'payout' END AS kind,
             count(*)::int AS entries_count, array_agg(id ORDER BY id)::text AS entry_ids, min(id) AS first_id
      FROM batch GROUP BY lower(wallet)
    )
    SELECT w.wallet, w.amount_atomic, w.kind, w.entries_count, w.entry_ids, g.groups
    FROM (SELECT count(*)::int AS groups FROM per_wallet) g
    LEFT JOIN LATERAL (
      SELECT * FROM per_wallet
      WHERE amount_atomic > 0 AND amount_atomic >= ${o.minAtomic.toString()}::bigint
      ORDER BY amount_atomic DESC, first_id
      LIMIT ${o.maxWallets}
    ) w ON true`
  const wallets = rows.filter((r) => r.wallet !== null).map(({ groups: _, ...w }) => w)
  return { wallets, waiting: (rows[0]?.groups ?? 0) - wallets.length }
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
