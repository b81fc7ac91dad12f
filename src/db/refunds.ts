// Refund reads and the refund's public shape (the API's and the refund.* events' data). Every change of a
// refund lives in src/books/refunds.ts.
import { toDollars } from '../money.ts'
import type { Sql, Tx } from './sql.ts'

export type RefundStatus = 'pending' | 'paid' | 'failed'

export interface RefundRow {
  id: string
  account_id: string
  payment_id: string | null
  call_id: string | null
  settlement_id: string | null
  wallet: string
  amount_atomic: bigint
  owner_debit_atomic: bigint
  fee_returned_atomic: bigint
  reason: string | null
  status: RefundStatus
  payout_id: string | null
  transaction: string | null
  failure_reason: string | null
  created_at: Date
  paid_at: Date | null
  failed_at: Date | null
}

export const REFUND_COLUMNS =
  'id, account_id, payment_id, call_id, settlement_id, wallet, amount_atomic, owner_debit_atomic, fee_returned_atomic, reason, status, payout_id, transaction, failure_reason, created_at, paid_at, failed_at'

export function presentRefund(r: RefundRow) {
  return {
    id: r.id,
    object: 'refund',
    status: r.status,
    payment_id: r.payment_id,
    call_id: r.call_id,
    settlement_id: r.settlement_id,
    amount: toDollars(r.amount_atomic),
    amount_atomic: r.amount_atomic.toString(),
    owner_debit_atomic: r.owner_debit_atomic.toString(),
    fee_returned_atomic: r.fee_returned_atomic.toString(),
    currency: 'USDC',
    wallet: r.wallet,
    reason: r.reason,
    payout_id: r.payout_id,
    transaction: r.transaction,
    failure_reason: r.failure_reason,
    created_at: r.created_at.toISOString(),
    paid_at: r.paid_at?.toISOString() ?? null,
    failed_at: r.failed_at?.toISOString() ?? null,
  }
}

export async function findRefund(db: Sql | Tx, accountId: string, id: string): Promise<RefundRow | null> {
  const [row] = await db<RefundRow[]>`
    SELECT ${db.unsafe(REFUND_COLUMNS)} FROM refunds WHERE id = ${id} AND account_id = ${accountId}`
  return row ?? null
}

/**
 * An account's refunds, newest first, optionally of one payment, call or facilitator settlement (keyset pages
 * on created_at, id).
 */
export async function listRefunds(
  db: Sql | Tx,
  q: {
    accountId: string
    paymentId: string | null
    callId: string | null
    settlementId: string | null
    status: RefundStatus | null
    limit: number
    startingAfter: string | null
  },
): Promise<RefundRow[]> {
  return db<RefundRow[]>`
    SELECT ${db.unsafe(REFUND_COLUMNS)} FROM refunds
    WHERE account_id = ${q.accountId}
    ${q.paymentId ? db`AND payment_id = ${q.paymentId}` : db``}
    ${q.callId ? db`AND call_id = ${q.callId}` : db``}
    ${q.settlementId ? db`AND settlement_id = ${q.settlementId}` : db``}
    ${q.status ? db`AND status = ${q.status}` : db``}
    ${
      q.startingAfter
        ? db`AND (created_at, id) < (SELECT created_at, id FROM refunds
                                     WHERE id = ${q.startingAfter} AND account_id = ${q.accountId})`
        : db``
    }
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
}
