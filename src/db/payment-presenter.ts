// The one presenter of a payment: the object of the API and of the webhook events (books/payments.ts writes
// it into them); the checkout adds its page fields to it.
import { toDollars } from '../money.ts'
import { amountDue, amountSurplus, effectiveStatus, type PaymentRow, type TimelineRow } from './payments.ts'

/** What the payment object needs besides the row: where it is paid and how to reach it. */
export interface PaymentView {
  publicUrl: string
  network: string
  chainId: number
  treasury: string
  usdcAddress: string
}

/** The payment object of the API, of the webhook events and (with the page's fields added) of the checkout. */
export function presentPayment(p: PaymentRow, view: PaymentView) {
  const status = effectiveStatus(p)
  const due = status === 'pending' ? amountDue(p) : 0n
  return {
    id: p.id,
    object: 'payment',
    status,
    amount: toDollars(p.amount_atomic),
    amount_atomic: p.amount_atomic.toString(),
    /** The exact figure a plain transfer must carry to be matched to this payment (price + offset). */
    amount_requested: toDollars(p.amount_requested_atomic),
    amount_requested_atomic: p.amount_requested_atomic.toString(),
    amount_received: toDollars(p.amount_received_atomic),
    amount_received_atomic: p.amount_received_atomic.toString(),
    amount_due: toDollars(due),
    amount_due_atomic: due.toString(),
    /** Received beyond the requested figure: scheduled for refund to the payer. */
    amount_surplus_atomic: amountSurplus(p).toString(),
    currency: 'USDC',
    description: p.description,
    metadata: p.metadata,
    recipient: view.treasury,
    network: view.network,
    chain_id: view.chainId,
    asset: view.usdcAddress,
    payment_url: `${view.publicUrl}/pay/${p.id}`,
    success_url: p.success_url,
    cancel_url: p.cancel_url,
    logo_url: p.logo_url,
    created_at: p.created_at.toISOString(),
    expires_at: p.expires_at.toISOString(),
    paid_at: p.paid_at?.toISOString() ?? null,
    canceled_at: p.canceled_at?.toISOString() ?? null,
    transaction: p.transaction,
    payer: p.payer,
  }
}

export type PaymentObject = ReturnType<typeof presentPayment>

export function presentTimeline(rows: TimelineRow[]) {
  return rows.map((t) => ({ type: t.type, created_at: t.created_at.toISOString(), ...t.data }))
}
