// THE money room's map: every state a money record may take and the one function that moves it there.
// Every INSERT/UPDATE/DELETE on claims, calls, ledger_entries, payouts and payout_accounts lives in src/books/
// (test/books/money-room.test.ts scans src/ for strays), and reconcile reads this same table to know what a
// record in a given state must look like.

export type MoneyRecord = 'claim' | 'call' | 'ledger_entry' | 'payout'

export interface Transition {
  record: MoneyRecord
  /** null: the record is created by this transition. */
  from: string | null
  to: string
  /** The function in src/books/ (or, until they move here, the file named in `owner`) that does it. */
  fn: string
  why: string
}

export const TRANSITIONS: readonly Transition[] = [
  // claim: one per proof, ever (its primary key is what makes a proof pay once).
  {
    record: 'claim',
    from: null,
    to: 'claimed',
    fn: 'claimProof',
    why: 'verified proof, before the upstream',
  },
  {
    record: 'claim',
    from: 'claimed',
    to: 'claimed',
    fn: 'releaseClaim',
    why: 'the upstream failed (unreachable, timeout, 5xx): the payer may retry within the window',
  },
  {
    record: 'claim',
    from: 'claimed',
    to: 'claimed',
    fn: 'claimProof',
    why: 'retry: taken over only after a release, never because a lease ran out',
  },
  { record: 'claim', from: 'claimed', to: 'captured', fn: 'captureClaim', why: 'upstream answered < 500' },
  {
    record: 'claim',
    from: 'claimed',
    to: 'refund_due',
    fn: 'markRefundDue',
    why: 'transaction proof never captured (failed or in doubt) by the end of its window',
  },
  {
    record: 'claim',
    from: 'refund_due',
    to: 'refunded',
    fn: 'markRefunded',
    why: 'its refund payout confirmed',
  },
  {
    record: 'claim',
    from: 'claimed',
    to: 'void',
    fn: 'voidClaim',
    why: 'x402 authorization or upto permit never captured: never settled, no money moved',
  },
  // x402 settlement (src/books/settlement.ts): the claim stays 'captured' (its call was served); the
  // settlement columns move: settlement_tx recorded/forgotten, then settled_at (revenue booked) or
  // settlement_error ('expired' | 'reverted': nothing booked, ever).
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'recordSettlementTx',
    why: 'x402 settlement signed: its hash recorded before broadcast',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'forgetSettlementTx',
    why: 'x402 settlement not broadcast, or lost unmined while its authorization is unused: sign again',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'settleAuthorizations',
    why: 'x402 authorization used on chain: settled_at set and revenue booked in one transaction',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'failSettlement',
    why: 'x402 authorization expired unsent or reverted unused: settlement_error set, nothing booked',
  },
  // x402 upto settlement (src/books/upto-settlement.ts): as above, for the call's charge (at most the signed
  // maximum); settled_atomic records what the chain moved, and the revenue is booked with it.
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'recordUptoSettlementTx',
    why: 'upto settlement signed for the charge: its hash recorded before broadcast',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'forgetUptoSettlementTx',
    why: 'upto settlement not broadcast, or lost unmined while its permit is unspent: sign again',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'settleUptoClaims',
    why: 'upto permit settled on chain (or charged nothing): settled_atomic set and revenue booked in one transaction',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'failUptoSettlement',
    why: 'upto permit expired unsent, reverted unspent or charged above its maximum: nothing booked',
  },
  // x402 batch-settlement (src/books/channels.ts): a voucher's call is claimed and captured like any other;
  // its claim stays 'captured' and gets settlement_tx/settled_at (revenue booked) when the leader's claim
  // transaction moved the channel's vouchers to the treasury.
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'recordChannelClaims',
    why: 'batch voucher claimed on chain: settled_at set and revenue booked in one transaction',
  },
  {
    record: 'claim',
    from: null,
    to: 'applied',
    fn: 'applyPaymentProof',
    why: 'checkout payment (payments room)',
  },
  {
    record: 'claim',
    from: null,
    to: 'refund_due',
    fn: 'applyPaymentProof',
    why: 'a proof for a payment that can no longer take it (payments room)',
  },
  {
    record: 'claim',
    from: 'applied',
    to: 'refund_due',
    fn: 'refundHeldProofs',
    why: 'proofs held by a payment that expired or was canceled unpaid (payments room)',
  },
  // Retention (src/books/retention.ts): a closed claim goes once its proof is too old to be accepted again.
  ...(['captured', 'refunded', 'applied', 'void'] as const).map(
    (from): Transition => ({
      record: 'claim',
      from,
      to: 'pruned',
      fn: 'pruneClaims',
      why: 'older than the maximum proof age (the verifier refuses it): the row is no longer needed',
    }),
  ),
  // call: written once with its claim's capture, never updated.
  { record: 'call', from: null, to: 'written', fn: 'captureClaim', why: 'the served call' },
  // ledger entry: appended; only payout_id moves.
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'bookCallRevenue',
    why: 'owner share + fee of a call (tx proofs at capture, x402 in settleAuthorizations and settleUptoClaims, batch vouchers in recordChannelClaims)',
  },
  { record: 'ledger_entry', from: null, to: 'unpaid', fn: 'markRefundDue', why: 'refund owed to a payer' },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'unusedCeilingRefunds',
    why: 'usage-priced call paid by a transaction for more than its charge: the unused part back to the payer, with the capture',
  },
  {
    record: 'ledger_entry',
    from: 'unpaid',
    to: 'in_payout',
    fn: 'recordPayouts',
    why: 'batched into a payout',
  },
  { record: 'ledger_entry', from: 'in_payout', to: 'unpaid', fn: 'failPayout', why: 'its payout failed' },
  // payout: recorded with its nonce and signed bytes before broadcast.
  { record: 'payout', from: null, to: 'pending', fn: 'recordPayouts', why: 'recorded before broadcast' },
  {
    record: 'payout',
    from: 'pending',
    to: 'submitted',
    fn: 'markPayoutSubmitted',
    why: 'broadcast accepted',
  },
  {
    record: 'payout',
    from: 'pending',
    to: 'confirmed',
    fn: 'confirmPayout',
    why: 'mined (found after a crash)',
  },
  { record: 'payout', from: 'submitted', to: 'confirmed', fn: 'confirmPayout', why: 'mined' },
  { record: 'payout', from: 'pending', to: 'failed', fn: 'failPayout', why: 'reverted or nonce taken' },
  { record: 'payout', from: 'submitted', to: 'failed', fn: 'failPayout', why: 'reverted or nonce taken' },
]

/** The states a transition function may start from (its SQL precondition says the same). */
export function fromStates(record: MoneyRecord, fn: string): string[] {
  return TRANSITIONS.filter((t) => t.record === record && t.fn === fn && t.from !== null).map((t) => t.from!)
}

/** 'one': every way into this claim state captured a call; 'none': no way did; 'any': it depends. */
export type CallExpectation = 'one' | 'none' | 'any'

/**
 * Walks the claim transitions from creation and records, for each state, whether the paths into it went
 * through captureClaim. Reconcile checks claims against calls with this: a claim in a 'one' state without
 * its call, or in a 'none' state with one, is a difference.
 */
export function claimCallExpectations(): Map<string, CallExpectation> {
  const claims = TRANSITIONS.filter((t) => t.record === 'claim')
  const seen = new Set<string>()
  const reached = new Map<string, Set<boolean>>()
  const queue: Array<[string | null, boolean]> = [[null, false]]
  while (queue.length > 0) {
    const [state, captured] = queue.shift()!
    for (const t of claims) {
      if (t.from !== state) continue
      const nextCaptured = captured || t.fn === 'captureClaim'
      const key = `${t.to}:${nextCaptured}`
      if (seen.has(key)) continue
      seen.add(key)
      const set = reached.get(t.to) ?? new Set<boolean>()
      set.add(nextCaptured)
      reached.set(t.to, set)
      queue.push([t.to, nextCaptured])
    }
  }
  const out = new Map<string, CallExpectation>()
  for (const [state, set] of reached) out.set(state, set.size === 2 ? 'any' : set.has(true) ? 'one' : 'none')
  return out
}

/** Why a transition did not apply: the record is missing, or it is not in a state the move starts from. */
export type Refusal = {
  ok: false
  reason: 'not_found' | 'wrong_state' | 'retry_window_open' | 'lease_held' | 'not_held'
  /** The record's state when refused (null when not found). */
  status: string | null
}

export type Applied<T = object> = ({ ok: true } & T) | Refusal
