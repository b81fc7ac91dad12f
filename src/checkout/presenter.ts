// The checkout's view of a payment: the API's payment object (one presenter, src/db/payment-presenter.ts) without the
// merchant's private metadata, plus what the page needs (merchant name, explorer link, return URLs resolved).
import { explorerTxUrl } from '../chain/networks.ts'
import { type PaymentView, presentPayment } from '../db/payment-presenter.ts'
import type { CheckoutPaymentRow } from '../db/payments.ts'
import { formatDollars } from '../money.ts'

export interface CheckoutView extends PaymentView {
  explorerUrl: string | null
  networkLabel: string
  /** Any network but Base mainnet: the page wears a "test mode" ribbon. */
  testMode: boolean
}

const NETWORK_LABELS: Record<string, string> = {
  base: 'Base',
  'base-sepolia': 'Base Sepolia (testnet)',
  local: 'Local test chain',
}

export function networkLabel(network: string): string {
  return NETWORK_LABELS[network] ?? network
}

/**
 * success_url / cancel_url placeholders, as Stripe Checkout's `{CHECKOUT_SESSION_ID}`: replaced by the
 * payment id, so the merchant's page knows which payment the customer comes back from.
 */
export function resolveReturnUrl(template: string | null, paymentId: string): string | null {
  if (!template) return null
  return template.replaceAll('{CHECKOUT_SESSION_ID}', paymentId).replaceAll('{PAYMENT_ID}', paymentId)
}

export function presentCheckout(p: CheckoutPaymentRow, view: CheckoutView) {
  const { metadata: _private, ...payment } = presentPayment(p, view)
  return {
    ...payment,
    business_name: p.business_name,
    success_url: resolveReturnUrl(p.success_url, p.id),
    cancel_url: resolveReturnUrl(p.cancel_url, p.id),
    transaction_url: p.transaction ? explorerTxUrl(view.explorerUrl, p.transaction) : null,
    test_mode: view.testMode,
  }
}

export type CheckoutObject = ReturnType<typeof presentCheckout>

/** EIP-681: a wallet that scans it proposes the USDC transfer of exactly the amount due to the treasury. */
export function eip681(view: PaymentView, dueAtomic: bigint): string {
  return `ethereum:${view.usdcAddress}@${view.chainId}/transfer?address=${view.treasury}&uint256=${dueAtomic}`
}

/** "25,000.000001": thousands separated, trailing zeros dropped. */
export function formatUsdc(atomic: bigint): string {
  const [whole, frac] = formatDollars(atomic).split('.')
  const grouped = whole!.replace(/\B(?=(\d{3})+(?!\d))/g, ',')
  return frac ? `${grouped}.${frac}` : grouped
}

/** The values page.html is filled with (escaped by the template, except the QR markup). */
export function pageValues(s: CheckoutObject, view: CheckoutView, qrSvg: string): Record<string, string> {
  const received = BigInt(s.amount_received_atomic)
  const due =
    s.status === 'paid'
      ? received
      : s.status === 'pending'
        ? BigInt(s.amount_due_atomic)
        : BigInt(s.amount_atomic)
  return {
    title: `Pay ${s.business_name}`,
    status: s.status,
    partial: String(received > 0n),
    test_mode: String(view.testMode),
    network_label: view.networkLabel,
    logo_url: s.logo_url ?? '',
    has_logo: String(s.logo_url !== null),
    initial: (s.business_name.trim()[0] ?? '·').toUpperCase(),
    business_name: s.business_name,
    description: s.description,
    due_label: {
      pending: received > 0n ? 'Left to pay' : 'Amount due',
      paid: 'Paid',
      expired: 'Expired',
      canceled: 'Canceled',
    }[s.status],
    due: formatUsdc(due),
    received: formatUsdc(received),
    eip681: s.status === 'pending' ? eip681(view, BigInt(s.amount_due_atomic)) : '',
    qr_svg: qrSvg,
    chain_id: String(s.chain_id),
    recipient: s.recipient,
    asset: s.asset,
    cancel_url: s.cancel_url ?? '',
    has_cancel: String(s.cancel_url !== null),
    success_url: s.success_url ?? '',
    has_success: String(s.success_url !== null),
    transaction: s.transaction ?? '',
    transaction_url: s.transaction_url ?? '',
    paid_at: s.paid_at ? new Date(s.paid_at).toUTCString() : '',
    gone_title: s.status === 'canceled' ? 'This payment was canceled' : 'This payment has expired',
  }
}
