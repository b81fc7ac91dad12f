// Payments: the rows, the reads, and what a row's amounts and status mean. The API object of a payment is
// payment-presenter.ts; every statement that changes a payment lives in src/books/payments.ts.
import { afterCursor } from './cursor.ts'
import type { Sql, Tx } from './sql.ts'

export type PaymentStatus = 'pending' | 'paid' | 'expired' | 'canceled'

export interface PaymentRow {
  id: string
  account_id: string
  /** The merchant's price. */
  amount_atomic: bigint
  /** What the customer is asked to send in all: the price plus the offset that makes the figure unique. */
  amount_requested_atomic: bigint
  amount_received_atomic: bigint
  description: string
  metadata: Record<string, string>
  status: PaymentStatus
  success_url: string | null
  cancel_url: string | null
  logo_url: string | null
  expires_at: Date
  paid_at: Date | null
  transaction: string | null
  payer: string | null
  canceled_at: Date | null
  created_at: Date
}

/** A payment with what the checkout page and the ledger need from its account. */
export interface CheckoutPaymentRow extends PaymentRow {
  business_name: string
  owner_wallet: string
}

export interface TimelineRow {
  type: string
  data: Record<string, unknown>
  created_at: Date
}

export const PAYMENT_COLUMNS =
  'id, account_id, amount_atomic, amount_requested_atomic, amount_received_atomic, description, metadata, status, success_url, cancel_url, logo_url, expires_at, paid_at, transaction, payer, canceled_at, created_at'
export const CHECKOUT_COLUMNS = `${PAYMENT_COLUMNS.split(', ')
  .map((c) => `p.${c}`)
  .join(', ')}, a.business_name, a.wallet_address AS owner_wallet`

/** What is left to send: the requested figure minus what was received (0 once covered). */
export function amountDue(p: Pick<PaymentRow, 'amount_requested_atomic' | 'amount_received_atomic'>): bigint {
  const due = p.amount_requested_atomic - p.amount_received_atomic
  return due > 0n ? due : 0n
}

/** Received beyond the requested figure: owed back to the payer who overshot (booked at paid). */
export function amountSurplus(
  p: Pick<PaymentRow, 'amount_requested_atomic' | 'amount_received_atomic'>,
): bigint {
  const surplus = p.amount_received_atomic - p.amount_requested_atomic
  return surplus > 0n ? surplus : 0n
}

/** pending but past expires_at counts as expired even before the sweeper writes it. */
export function effectiveStatus(
  p: Pick<PaymentRow, 'status' | 'expires_at'>,
  nowMs = Date.now(),
): PaymentStatus {
  return p.status === 'pending' && p.expires_at.getTime() <= nowMs ? 'expired' : p.status
}

// ── reads ────────────────────────────────────────────────────────────────────────────────────────────

export async function findOwnedPayment(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<PaymentRow | null> {
  const [row] = await db<PaymentRow[]>`
    SELECT ${db.unsafe(PAYMENT_COLUMNS)} FROM payments WHERE id = ${id} AND account_id = ${accountId}`
  return row ?? null
}

/** The checkout's read: any payment by id, with the merchant's display name and wallet. */
export async function findCheckoutPayment(db: Sql | Tx, id: string): Promise<CheckoutPaymentRow | null> {
  const [row] = await db<CheckoutPaymentRow[]>`
    SELECT ${db.unsafe(CHECKOUT_COLUMNS)}
    FROM payments p JOIN accounts a ON a.id = p.account_id WHERE p.id = ${id}`
  return row ?? null
}

export async function listPayments(
  db: Sql | Tx,
  q: { accountId: string; status: PaymentStatus | null; limit: number; startingAfter: string | null },
): Promise<PaymentRow[]> {
  return db<PaymentRow[]>`
    SELECT ${db.unsafe(PAYMENT_COLUMNS)} FROM payments
    WHERE account_id = ${q.accountId}
    ${q.status ? db`AND status = ${q.status}` : db``}
    ${afterCursor(db, 'payments', q.startingAfter, q.accountId)}
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
}

/** The `created` line's data, from the payment row (p): the price and the figure asked for. */
export const CREATED_LINE_DATA = `jsonb_build_object(
  'amount_atomic', p.amount_atomic::text, 'amount_requested_atomic', p.amount_requested_atomic::text)`

/**
 * The payment's timeline, oldest first. Its first line, `created`, is read from the payment row unless one
 * is stored: a creation does not store it, a top-up stores it before it changes the figure (books/payments.ts).
 */
export async function paymentTimeline(db: Sql | Tx, paymentId: string): Promise<TimelineRow[]> {
  return db<TimelineRow[]>`
    SELECT type, data, created_at FROM (
      SELECT 0::bigint AS n, 'created' AS type, ${db.unsafe(CREATED_LINE_DATA)} AS data, p.created_at
      FROM payments p
      WHERE p.id = ${paymentId}
        AND NOT EXISTS (SELECT 1 FROM payment_timeline t WHERE t.payment_id = p.id AND t.type = 'created')
      UNION ALL
      SELECT CASE WHEN type = 'created' THEN 0 ELSE id END, type, data, created_at
      FROM payment_timeline WHERE payment_id = ${paymentId}
    ) lines ORDER BY n`
}

/** Which payment a figure is bound to now (open, or closed within its hold): the watcher's match. */
export async function findPaymentsByFigure(db: Sql | Tx, amounts: bigint[]): Promise<Map<bigint, string>> {
  if (amounts.length === 0) return new Map()
  const rows = await db<{ amount_atomic: bigint; payment_id: string }[]>`
    SELECT amount_atomic, payment_id FROM checkout_amounts
    WHERE amount_atomic = ANY(${amounts.map(String)}::bigint[])
      AND (held_until IS NULL OR held_until > now())`
  return new Map(rows.map((r) => [r.amount_atomic, r.payment_id]))
}

export interface UnmatchedInflowRow {
  tx_hash: string
  payer: string
  amount_atomic: bigint
  block_number: bigint
  seen_at: Date
  /** What claimed the hash since it was seen (a metered call presenting it, a payment), or null. */
  claimed_by: string | null
}

/** Unmatched inflows, newest first; `open` only: those no proof has claimed since. */
export async function listUnmatchedInflows(
  db: Sql | Tx,
  q: { open: boolean; limit: number },
): Promise<UnmatchedInflowRow[]> {
  return db<UnmatchedInflowRow[]>`
    SELECT u.tx_hash, u.payer, u.amount_atomic, u.block_number, u.seen_at,
           c.target_type || ':' || c.target_id AS claimed_by
    FROM unmatched_inflows u LEFT JOIN claims c ON c.proof_key = 'tx:' || u.tx_hash
    ${q.open ? db`WHERE c.proof_key IS NULL` : db``}
    ORDER BY u.seen_at DESC, u.tx_hash LIMIT ${q.limit}`
}
