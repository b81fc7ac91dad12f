// THE money room's map: every state a money record may take and the one function that moves it there.
// Every INSERT/UPDATE/DELETE on claims, calls, ledger_entries, payouts, payout_accounts, payments, checkout
// figures, unmatched inflows and batch channels lives in src/books/ (test/books/money-room.test.ts scans src/
// for strays); reconcile reads this same table to know what a record in a given state must look like, and
// test/books/transition-table.unit.test.ts checks that each function named here exists in src/books/ and
// that its SQL names the state (or the `where` precondition) it starts from.

export type MoneyRecord =
  | 'claim'
  | 'call'
  | 'ledger_entry'
  | 'payout'
  | 'payment'
  | 'checkout_figure'
  | 'unmatched_inflow'
  | 'channel'
  | 'channel_op'
  | 'channel_claim'
  | 'refund'
  | 'pass'
  | 'facilitator_settlement'

export interface Transition {
  record: MoneyRecord
  /** null: the record is created by this transition. */
  from: string | null
  to: string
  /** The function in src/books/ that does it (its SQL, or that of the books functions it calls). */
  fn: string
  why: string
  /**
   * The precondition as it is written in the function's SQL, when the starting state is not a status value
   * of its own (a ledger entry is unpaid while its payout_id is NULL; a channel's state is its amounts).
   * A query parameter is written `?`.
   */
  where?: string
  /** This transition writes the record's call (reconcile expects exactly one call per claim reached so). */
  writesCall?: true
}

/** claim (each closed state) → pruned, by `fn`. */
function closedClaimPruned(fn: string, why: string): Transition[] {
  return (['captured', 'refunded', 'applied', 'void'] as const).map((from) => ({
    record: 'claim',
    from,
    to: 'pruned',
    fn,
    why,
  }))
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
    // The payer reservation, one for x402 exact and upto (both draw on the payer's USDC balance): migrations
    // 0045 and 0065, payer_reserved. An upto permit holds its maximum while claimed, its call's charge once
    // captured, what the chain moved once settled (until the balance read shows it), and nothing once
    // released (releaseClaim), voided (voidClaim) or failed (failUptoSettlement): no money moves then.
    record: 'claim',
    from: null,
    to: 'claimed',
    fn: 'claimProof',
    why: 'x402 exact authorization or upto permit: only if the payer balance as read covers its amount (upto: its maximum) on top of what its other unsettled authorizations and permits hold; else insufficient_funds',
    where: 'OVER (PARTITION BY lower(r.payer) ORDER BY r.i) <= r.balance - p.reserved',
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
    fn: 'releaseUnacknowledgedClaims',
    why: 'its claim statement failed unanswered (503, nothing forwarded) yet committed: freed for a retry',
  },
  {
    record: 'claim',
    from: 'claimed',
    to: 'claimed',
    fn: 'claimProof',
    why: 'retry: taken over only after a release, never because a lease ran out',
  },
  {
    record: 'claim',
    from: 'claimed',
    to: 'captured',
    fn: 'captureClaim',
    why: 'upstream answered < 500 (settled before the answer: with its settlement hash, before the broadcast); written by the capture batch statement (claimAndCapture) with its call row and, for a transaction hash, its share of the batch revenue entries',
    writesCall: true,
  },
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
    // Only a captured claim gets a settlement_tx (recordSettlementTx): its own hash, still unsettled, says so.
    where: 'settlement_tx = ? AND settled_at IS NULL',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'settleAuthorizations',
    why: 'x402 authorization used on chain: settled_at set and revenue booked in one transaction, naming the transaction that used it',
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
    why: 'upto settlement signed for the charge: its hash and the permit’s place in it recorded before broadcast',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'forgetUptoSettlementTx',
    why: 'upto settlement not broadcast, or lost unmined while its permit is unspent: sign again',
    // Only a captured claim gets a settlement_tx (recordUptoSettlementTx): its own hash, still unsettled, says so.
    where: 'settlement_tx = ? AND settled_at IS NULL',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'settleUptoClaims',
    why: 'upto permit settled on chain (or charged nothing): settled_atomic and the block set, revenue booked in one transaction',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'failUptoSettlement',
    why: 'upto permit expired unsent, reverted unspent or charged above its maximum: nothing booked',
  },
  // x402 batch-settlement (src/books/channels.ts): a voucher's call is written with its claim, already
  // captured (the instance holding the channel's lease accepted the voucher in memory and served the call);
  // the claim gets settlement_tx/settled_at (revenue booked) when the leader's claim transaction moved the
  // channel's vouchers to the treasury.
  {
    record: 'claim',
    from: null,
    to: 'captured',
    fn: 'writeChannelVouchers',
    why: 'a served batch voucher call, written with the voucher that paid it',
    writesCall: true,
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'recordChannelClaims',
    why: 'batch voucher claimed on chain: settled_at, the block and its channel’s place set, revenue booked in one transaction',
  },
  {
    record: 'claim',
    from: 'captured',
    to: 'captured',
    fn: 'settleCoveredChannelCalls',
    why: 'batch voucher call written after the claim that covered it: settled by that claim and booked',
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
  // x402 on the hosted checkout (payments room): held while it settles with the calls' authorizations.
  {
    record: 'claim',
    from: null,
    to: 'settling',
    fn: 'holdPaymentAuthorization',
    why: 'x402 authorization covering a pending payment: the payment waits for its settlement',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'settling',
    fn: 'recordSettlementTx',
    why: 'its settlement signed: hash recorded before broadcast (forgetSettlementTx undoes it)',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'applied',
    fn: 'applySettledAuthorizations',
    why: 'settled on chain while its payment is pending: paid through the same receive as a hash',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'refund_due',
    fn: 'applySettledAuthorizations',
    why: 'settled on chain after its payment closed (paid by another proof, expired, canceled): sent back',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'void',
    fn: 'failSettlement',
    why: 'its authorization expired unsent or reverted unused: no money moved, the payment stays open',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'void',
    fn: 'refundHeldProofs',
    why: 'its payment expired or was canceled before the authorization was sent: never settled',
  },
  // x402 facilitator (src/books/facilitator.ts): a merchant's middleware sent the authorization to
  // /api/v1/facilitator/settle; claimed like any proof, settled by the settlement batcher with the calls'.
  {
    record: 'claim',
    from: null,
    to: 'settling',
    fn: 'claimFacilitatorPayments',
    why: 'an exact or upto payload verified at the facilitator, covered by the payer’s balance less its reservation, with its settlement row (one per proof, ever)',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'applied',
    fn: 'settleAuthorizations',
    why: 'its authorization used on chain: settled and applied in one write, its settlement row and booking by applyFacilitatorSettlements in the same transaction',
  },
  // An upto permit settled through the facilitator waits in the upto settlement job as 'settling' (no call):
  // signed, recorded, sent and settled for the amount its claim holds; applied (and booked) when mined.
  {
    record: 'claim',
    from: 'settling',
    to: 'settling',
    fn: 'recordUptoSettlementTx',
    why: 'facilitator upto permit: its settlement transaction’s hash recorded before broadcast',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'applied',
    fn: 'settleUptoClaims',
    why: 'facilitator upto permit mined: settled_atomic set and applied in one write, booked by applyFacilitatorSettlements in the same transaction',
  },
  {
    record: 'claim',
    from: 'settling',
    to: 'settling',
    fn: 'failUptoSettlement',
    why: 'facilitator upto permit expired unsent or reverted unspent: settlement_error set, nothing booked',
  },
  {
    record: 'facilitator_settlement',
    from: null,
    to: 'pending',
    fn: 'claimFacilitatorPayments',
    why: 'verified and claimed: the merchant asked to settle it (payTo the treasury or its own wallet)',
  },
  {
    record: 'facilitator_settlement',
    from: 'pending',
    to: 'settled',
    fn: 'applyFacilitatorSettlements',
    why: 'its authorization used on chain: the transaction recorded, a treasury settlement booked',
    where: 'f.settled_at IS NULL',
  },
  // Retention (src/books/retention.ts): a closed claim goes once its proof is too old to be accepted again,
  // row by row or a whole day of proofs at a time (migration 0055: claims partitioned by the proof's day).
  ...closedClaimPruned(
    'pruneClaims',
    'older than the stored retention horizon every verifier refuses (a voucher: settled, below its channel total)',
  ),
  ...closedClaimPruned(
    'dropClaimDays',
    'its whole day is below both stored horizons and nothing in the day is still owed',
  ),
  // call: written once with its claim's capture; an x402 call is updated once more, when its settlement
  // books it (ledger_batch_id NULL → its settlement batch), and never again.
  {
    record: 'call',
    from: null,
    to: 'written',
    fn: 'captureClaim',
    why: 'the served call; a transaction-hash call names the capture batch that booked it (ledger_batch_id)',
  },
  {
    record: 'call',
    from: null,
    to: 'written',
    fn: 'writeChannelVouchers',
    why: 'the served call of a batch voucher',
  },
  {
    record: 'call',
    from: 'written',
    to: 'booked',
    fn: 'bookCallRevenue',
    why: 'a settled x402 call names the settlement batch that booked it (ledger_batch_id, negative)',
    where: 'c.ledger_batch_id IS NULL',
  },
  // ledger entry: appended; only payout_id moves.
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'claimAndCapture',
    why: "owner share + fee of a capture batch's transaction-hash calls: one entry per account and kind (owner share: per owner wallet), the sum of the calls that name the batch (migration 0050)",
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'bookCallRevenue',
    why: 'owner share + fee of the x402 calls one statement finds settled: one entry per account and kind (owner share: per owner wallet), the sum of the calls that name the settlement batch (settleAuthorizations, settleUptoClaims; batch vouchers in recordChannelClaims and settleCoveredChannelCalls)',
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'applyFacilitatorSettlements',
    why: 'owner share + fee of a facilitator settlement paid to the treasury, once its authorization is used',
  },
  { record: 'ledger_entry', from: null, to: 'unpaid', fn: 'markRefundDue', why: 'refund owed to a payer' },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'bookPaid',
    why: 'owner share + fee of a paid checkout payment, up to its requested figure',
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'scheduleRefund',
    why: 'a checkout surplus, a late transfer or a held proof owed back to its sender',
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'unusedCeilingRefunds',
    why: 'usage-priced call paid by a transaction for more than its charge: the unused part back to the payer, with the capture',
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'bookSettledCeilingRefunds',
    why: 'usage-priced call paid by an MPP charge (scheme mpp-charge, an EIP-3009 authorization) for its ceiling: the unused part back to the payer once the authorization settled (settleAuthorizations)',
  },
  {
    record: 'ledger_entry',
    from: 'unpaid',
    to: 'in_payout',
    fn: 'linkEntriesToPayouts',
    why: 'batched into a payout (recordPayouts)',
    where: 'payout_id IS NULL',
  },
  {
    record: 'ledger_entry',
    from: 'in_payout',
    to: 'unpaid',
    fn: 'unlinkEntries',
    why: 'its payout failed (failPayout)',
    where: 'WHERE payout_id = ?',
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'unpaid',
    fn: 'createRefund',
    why: "a merchant's refund: the payer's part (+), the merchant's debit and the fee given back (−); sum 0",
  },
  {
    record: 'ledger_entry',
    from: null,
    to: 'in_payout',
    fn: 'failRefunds',
    why: "a failed refund reversed: the payer's part inside its failed payout, debit and fee back to unpaid",
  },
  {
    record: 'ledger_entry',
    from: 'in_payout',
    to: 'archived',
    fn: 'archiveLedgerMonth',
    why: 'a closed month archived to a file: its entries carried forward as sums (archived_ledger_sums), its partition dropped',
    where: "e.kind <> 'fee' AND p.status IS DISTINCT FROM 'confirmed'",
  },
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
  // refund (src/books/refunds.ts): a merchant's refund of a paid payment or call, sent in a payout.
  {
    record: 'refund',
    from: null,
    to: 'pending',
    fn: 'createRefund',
    why: 'a paid payment, call or treasury facilitator settlement; amount ≤ refundable and the merchant’s unpaid balance covers its part: booked, waiting for a payout',
  },
  { record: 'refund', from: 'pending', to: 'paid', fn: 'confirmRefunds', why: 'its payout confirmed' },
  {
    record: 'refund',
    from: 'pending',
    to: 'failed',
    fn: 'failRefunds',
    why: 'its payout failed: reversed, the merchant’s part back in its balance',
  },
  // payment (src/books/payments.ts): each transition under the payment's row lock.
  {
    record: 'payment',
    from: null,
    to: 'pending',
    fn: 'createPayment',
    why: 'created with its figure reserved',
  },
  {
    record: 'payment',
    from: null,
    to: 'pending',
    fn: 'createPaymentsTogether',
    why: 'created with its figure reserved, beside others requested at once (one commit)',
  },
  {
    record: 'payment',
    from: 'pending',
    to: 'pending',
    fn: 'applyPaymentProof',
    why: 'underpaid: the proof is held (claim applied) and a top-up figure reserved',
  },
  {
    record: 'payment',
    from: 'pending',
    to: 'paid',
    fn: 'applyPaymentProof',
    why: 'paid in full: what it received up to its figure is booked, any surplus owed back',
  },
  {
    record: 'payment',
    from: 'pending',
    to: 'expired',
    fn: 'expireLocked',
    why: 'past expires_at (expireDuePayments, or a proof or cancel arriving late): held proofs refunded',
  },
  {
    record: 'payment',
    from: 'pending',
    to: 'expired',
    fn: 'expireDuePayments',
    why: 'the expiry sweeper: pending payments past expires_at, a batch at a time (through expireLocked)',
  },
  {
    record: 'payment',
    from: 'pending',
    to: 'canceled',
    fn: 'cancelPayment',
    why: 'canceled by the merchant: held proofs refunded',
  },
  // checkout figure: the amount that tells one payment's plain transfer from another's.
  {
    record: 'checkout_figure',
    from: null,
    to: 'open',
    fn: 'createPayment',
    why: 'reserved at creation, in the statement that inserts its payment',
  },
  {
    record: 'checkout_figure',
    from: null,
    to: 'open',
    fn: 'createPaymentsTogether',
    why: 'reserved at creation, in the statement that inserts its payment (and others)',
  },
  {
    record: 'checkout_figure',
    from: null,
    to: 'open',
    fn: 'reserveFigure',
    why: 'reserved for a top-up of an underpaid payment',
  },
  {
    record: 'checkout_figure',
    from: 'open',
    to: 'held',
    fn: 'holdFigures',
    why: 'its payment closed: kept 24 h so a late transfer still reaches it',
    where: 'WHERE payment_id = ?',
  },
  {
    record: 'unmatched_inflow',
    from: null,
    to: 'recorded',
    fn: 'recordUnmatchedInflows',
    why: 'a transfer to the treasury no figure or proof matched; never booked',
  },
  // channel (batch-settlement): its state is its amounts; each move states them in its WHERE.
  {
    record: 'channel',
    from: null,
    to: 'open',
    fn: 'requestChannelOp',
    why: 'first deposit requested: the channel exists with nothing in it',
  },
  {
    record: 'channel',
    from: 'open',
    to: 'open',
    fn: 'confirmDeposit',
    why: 'deposit confirmed on chain: its amount joins the balance, once',
    where: "kind = 'deposit' AND status = 'sent'",
  },
  {
    record: 'channel',
    from: 'open',
    to: 'open',
    fn: 'takeChannelLease',
    why: 'an instance leases the channel to accept vouchers in memory up to a ceiling (given back at once if a refund was queued meanwhile)',
    where:
      "c.lease_holder IS NULL OR c.lease_holder = ? OR (c.lease_until < now() AND (SELECT coalesce(min(backend_start), '-infinity') FROM pg_stat_activity WHERE backend_type = 'client backend') < now() - ? * interval '1 millisecond')",
  },
  {
    record: 'channel',
    from: 'open',
    to: 'open',
    fn: 'writeChannelVouchers',
    why: 'the highest accepted voucher written (charged moves up), within the lease',
    where: 'c.lease_holder = ? AND c.lease_epoch = m.epoch',
  },
  {
    record: 'channel',
    from: 'open',
    to: 'open',
    fn: 'recordChannelClaims',
    why: 'claim transaction mined: claimed moves up to at most charged',
    where: 't.total > c.claimed_atomic AND t.total <= c.charged_atomic',
  },
  {
    record: 'channel',
    from: 'open',
    to: 'open',
    fn: 'confirmRefund',
    why: 'cooperative refund mined: balance shrinks, never below charged',
    where: '>= c.charged_atomic',
  },
  // pass (src/books/passes.ts): bought by a captured call (its money is that call's), then drawn one use
  // per signed-in call. Its state is its uses and time left.
  {
    record: 'pass',
    from: null,
    to: 'open',
    fn: 'openPass',
    why: 'its purchase captured (claim captured, PASS call row): the pass the payer signs in to use',
  },
  {
    record: 'pass',
    from: 'open',
    to: 'open',
    fn: 'drawPassUse',
    why: 'a signed-in call, before the upstream: one use fewer, never below zero nor past its time (a counted pass picked under its lock; a pass of time only is read, not written)',
    where: 'uses_left > 0 AND expires_at > now()',
  },
  {
    record: 'pass',
    from: 'open',
    to: 'open',
    fn: 'drawTimePassUses',
    why: "the signed-in calls in flight together whose wallet holds a live pass of time only: each one's nonce and draw recorded in one statement, the pass read, not written (the others are left to drawPassUse)",
    where: 'uses_left IS NULL AND expires_at > now()',
  },
  {
    record: 'pass',
    from: 'open',
    to: 'open',
    fn: 'giveBackPassUse',
    why: 'the upstream certainly did not serve the call (unreachable, 5xx) or it was never forwarded',
    where: 'given_back = false',
  },
  {
    record: 'pass',
    from: 'open',
    to: 'open',
    fn: 'recordPassDrawServed',
    why: "a drawn use's call was served: its receipt is written on the draw (no use and no money moves)",
    where: 'given_back = false AND receipt_id IS NULL',
  },
  // channel op: a deposit or refund transaction the leader sends.
  { record: 'channel_op', from: null, to: 'pending', fn: 'requestChannelOp', why: 'deposit queued' },
  {
    record: 'channel_op',
    from: null,
    to: 'pending',
    fn: 'requestRefundOp',
    why: 'refund queued while no lease is live and the cumulative is the charged one',
  },
  { record: 'channel_op', from: 'pending', to: 'sent', fn: 'markChannelOpSent', why: 'broadcast' },
  { record: 'channel_op', from: 'pending', to: 'failed', fn: 'failChannelOp', why: 'could not be sent' },
  { record: 'channel_op', from: 'sent', to: 'failed', fn: 'failChannelOp', why: 'reverted' },
  { record: 'channel_op', from: 'sent', to: 'done', fn: 'confirmDeposit', why: 'deposit mined' },
  { record: 'channel_op', from: 'sent', to: 'done', fn: 'confirmRefund', why: 'refund mined' },
  // channel claim: one transaction claiming many channels' vouchers, recorded signed before its broadcast.
  {
    record: 'channel_claim',
    from: null,
    to: 'sent',
    fn: 'recordChannelClaimSent',
    why: 'signed, recorded before broadcast (a lost answer or a crash leaves a hash to look up)',
  },
  {
    record: 'channel_claim',
    from: 'sent',
    to: 'done',
    fn: 'recordChannelClaims',
    why: 'mined and succeeded: the vouchers it covered settled and booked in the same transaction',
  },
  {
    record: 'channel_claim',
    from: 'sent',
    to: 'failed',
    fn: 'failChannelClaim',
    why: 'reverted, or its nonce went to another transaction',
  },
]

/** The states a transition function may start from (its SQL precondition says the same). */
export function fromStates(record: MoneyRecord, fn: string): string[] {
  return TRANSITIONS.filter((t) => t.record === record && t.fn === fn && t.from !== null).map((t) => t.from!)
}

/** 'one': every way into this claim state captured a call; 'none': no way did; 'any': it depends. */
export type CallExpectation = 'one' | 'none' | 'any'

/**
 * Walks the claim transitions from creation and records, for each state, whether the paths into it went
 * through a transition that writes the call. Reconcile checks claims against calls with this: a claim in a 'one' state without
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
      const nextCaptured = captured || t.writesCall === true
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
