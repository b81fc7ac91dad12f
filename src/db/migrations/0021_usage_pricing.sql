-- Pricing models (fixed, rules, usage) and what a usage-priced call measured. An endpoint's `pricing` null
-- is one fixed price (price_atomic); otherwise price_atomic holds the rules' default or the usage ceiling.
ALTER TABLE endpoints ADD COLUMN pricing jsonb;

-- The call row records how it was priced and what was measured: amount_atomic is the charge; a prepaid
-- ceiling's unused part (refund_atomic) is owed back to the payer and paid in the next payout batch.
ALTER TABLE calls
  ADD COLUMN pricing_model  text NOT NULL DEFAULT 'fixed',
  ADD COLUMN usage_unit     text,
  ADD COLUMN usage          jsonb,
  ADD COLUMN ceiling_atomic bigint,
  ADD COLUMN refund_atomic  bigint NOT NULL DEFAULT 0,
  ADD COLUMN scheme         text,
  ADD COLUMN receipt_id     text,
  ADD CONSTRAINT calls_charge_within_ceiling CHECK (ceiling_atomic IS NULL OR amount_atomic <= ceiling_atomic),
  ADD CONSTRAINT calls_refund_nonnegative CHECK (refund_atomic >= 0);
CREATE UNIQUE INDEX calls_receipt ON calls (receipt_id) WHERE receipt_id IS NOT NULL;
