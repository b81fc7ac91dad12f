// Whether an amount pays a quote now: shared by the schemes that take a payment for a stated amount.
import type { Quote } from './scheme.ts'

/** The least a payment must carry now: the price (or ceiling), or the quoted floor while it holds. */
export function minimumAccepted(quote: Quote, nowMs: number): bigint {
  if (quote.floorAtomic !== null && nowMs < quote.floorUntilMs && quote.floorAtomic < quote.amountAtomic) {
    return quote.floorAtomic
  }
  return quote.amountAtomic
}

/**
 * Whether an x402 `exact` amount pays this quote now: exactly the price, or exactly the quoted floor while
 * it holds (a client may hold a 402 from before a price rise). `exact` never takes more.
 */
export function exactAmountAccepted(quote: Quote, amountAtomic: bigint, nowMs: number): boolean {
  if (amountAtomic === quote.amountAtomic) return true
  return quote.floorAtomic !== null && nowMs < quote.floorUntilMs && amountAtomic === quote.floorAtomic
}
