// Payout reads and the payout's public shape. Every change of a payout lives in src/books/payouts.ts.
import { toDollars } from '../money.ts'
import type { Sql, Tx } from './sql.ts'

export type PayoutStatus = 'pending' | 'submitted' | 'confirmed' | 'failed'
export type PayoutKind = 'payout' | 'refund' | 'mixed'

export interface PayoutRow {
  id: string
  wallet: string
  amount_atomic: bigint
  kind: PayoutKind
  status: PayoutStatus
  treasury: string
  nonce: bigint
  tx_hash: string
  raw_tx: string
  previous_tx_hashes: string[]
  block_number: bigint | null
  entries_count: number
  attempts: number
  last_error: string | null
  created_at: Date
  submitted_at: Date | null
  confirmed_at: Date | null
  failed_at: Date | null
  retry_at: Date | null
}

export const COLUMNS =
  'id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, raw_tx, previous_tx_hashes, block_number, entries_count, attempts, last_error, created_at, submitted_at, confirmed_at, failed_at, retry_at'

/** The public shape of a payout: the API's and the payout.* events' data. */
export function payoutObject(p: PayoutRow, account?: { amount_atomic: bigint } | null) {
  return {
    id: p.id,
    object: 'payout',
    status: p.status,
    kind: p.kind,
    wallet: p.wallet,
    amount: toDollars(p.amount_atomic),
    amount_atomic: p.amount_atomic.toString(),
    ...(account ? { account_amount_atomic: account.amount_atomic.toString() } : {}),
    currency: 'USDC',
    transaction: p.status === 'pending' && !p.submitted_at ? null : p.tx_hash,
    nonce: Number(p.nonce),
    block_number: p.block_number === null ? null : Number(p.block_number),
    entries_count: p.entries_count,
    attempts: p.attempts,
    failure_reason: p.last_error,
    created_at: p.created_at.toISOString(),
    submitted_at: p.submitted_at?.toISOString() ?? null,
    confirmed_at: p.confirmed_at?.toISOString() ?? null,
    failed_at: p.failed_at?.toISOString() ?? null,
    next_attempt_at: p.status === 'failed' ? (p.retry_at?.toISOString() ?? null) : null,
  }
}

/** Payouts whose outcome is not known yet, in nonce order: they are resolved before anything new is sent. */
export async function openPayouts(db: Sql | Tx): Promise<PayoutRow[]> {
  return db<PayoutRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM payouts WHERE status IN ('pending', 'submitted') ORDER BY treasury, nonce`
}

/** The highest nonce ever recorded for a treasury (new payouts never reuse one), or -1. */
export async function highestRecordedNonce(db: Sql | Tx, treasury: string): Promise<number> {
  const [row] = await db<
    { n: bigint | null }[]
  >`SELECT max(nonce) AS n FROM payouts WHERE treasury = ${treasury}`
  return row?.n === null || row?.n === undefined ? -1 : Number(row.n)
}

export interface AccountPayoutRow extends PayoutRow {
  account_amount_atomic: bigint
}

/**
 * An account's payouts, newest first: a walk of payout_accounts_account_created (migration 0015) that stops
 * after `limit` rows, each joined to its payout by primary key, so a page costs the same at any history.
 * `startingAfter` is looked up among the account's own payouts (a foreign id pages nothing, as in cursor.ts).
 */
export async function listAccountPayouts(
  db: Sql | Tx,
  q: { accountId: string; limit: number; startingAfter: string | null; status: PayoutStatus | null },
): Promise<AccountPayoutRow[]> {
  return db<AccountPayoutRow[]>`
    SELECT ${db.unsafe(
      COLUMNS.split(', ')
        .map((c) => `p.${c}`)
        .join(', '),
    )},
           pa.owner_share_atomic + pa.refund_atomic AS account_amount_atomic
    FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
    WHERE pa.account_id = ${q.accountId}
    ${q.status ? db`AND p.status = ${q.status}` : db``}
    ${
      q.startingAfter
        ? db`AND (pa.created_at, pa.payout_id) < (SELECT created_at, payout_id FROM payout_accounts
                                                 WHERE account_id = ${q.accountId} AND payout_id = ${q.startingAfter})`
        : db``
    }
    ORDER BY pa.created_at DESC, pa.payout_id DESC
    LIMIT ${q.limit}`
}

export async function findAccountPayout(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<AccountPayoutRow | null> {
  const [row] = await db<AccountPayoutRow[]>`
    SELECT ${db.unsafe(
      COLUMNS.split(', ')
        .map((c) => `p.${c}`)
        .join(', '),
    )},
           pa.owner_share_atomic + pa.refund_atomic AS account_amount_atomic
    FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
    WHERE pa.account_id = ${accountId} AND p.id = ${id}`
  return row ?? null
}
