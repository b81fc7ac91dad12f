-- Refunds a merchant asks for (POST /api/v1/refunds): an amount of a paid payment or of a paid metered call,
-- sent back to the address that paid it in the next payout batch, from the merchant's unpaid balance.
--
-- A refund is booked as ledger entries with source_type 'refund' (source_id = the refund's id):
--   refund       +amount   to the payer's wallet (payable: the payout batcher sends it)
--   owner_share  −debit    on the merchant's wallet (nets against its unpaid owner shares in the same batch)
--   fee          −(amount − debit)   the service's fee on the refunded part is given back
-- The three sum to zero: a refund moves money from the merchant (and the fee) to the payer, nothing else.
-- So entries of a refund may be negative; every other entry stays ≥ 0.
ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_amount_atomic_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_amount_atomic_check
  CHECK (amount_atomic >= 0 OR source_type = 'refund');
ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_source_type_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_source_type_check
  CHECK (source_type IN ('call', 'payment', 'claim', 'refund'));

CREATE TABLE refunds (
  id                   text PRIMARY KEY,
  account_id           text NOT NULL REFERENCES accounts(id),
  -- Exactly one of the two: what is refunded.
  payment_id           text REFERENCES payments(id),
  call_id              text,
  -- Where the money goes: the payer of the refunded payment's completing proof, or of the call.
  wallet               text NOT NULL,
  amount_atomic        bigint NOT NULL CHECK (amount_atomic > 0),
  -- The merchant's part (owner share given back) and the service's (fee given back); they sum to amount.
  owner_debit_atomic   bigint NOT NULL CHECK (owner_debit_atomic >= 0),
  fee_returned_atomic  bigint NOT NULL CHECK (fee_returned_atomic >= 0),
  reason               text,
  -- pending (booked, waiting for its payout) → paid (payout confirmed) | failed (payout failed; reversed)
  status               text NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
  payout_id            text REFERENCES payouts(id),
  transaction          text,
  failure_reason       text,
  created_at           timestamptz NOT NULL DEFAULT now(),
  paid_at              timestamptz,
  failed_at            timestamptz,
  CHECK ((payment_id IS NULL) <> (call_id IS NULL)),
  CHECK (owner_debit_atomic + fee_returned_atomic = amount_atomic)
);
CREATE INDEX refunds_account ON refunds (account_id, created_at DESC, id DESC);
-- What is already refunded of one payment or call (the refundable check reads these under its lock).
CREATE INDEX refunds_payment ON refunds (payment_id) WHERE payment_id IS NOT NULL;
CREATE INDEX refunds_call ON refunds (call_id) WHERE call_id IS NOT NULL;
CREATE INDEX refunds_pending ON refunds (created_at) WHERE status = 'pending';
