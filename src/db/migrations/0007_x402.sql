-- x402 "exact" payments: an EIP-3009 authorization is claimed (its nonce is the proof), the call is served,
-- and the authorization is settled on chain later. One that never reaches capture is never settled: no money
-- moved, so it is 'void' rather than refunded.
ALTER TABLE claims DROP CONSTRAINT claims_status_check;
ALTER TABLE claims ADD CONSTRAINT claims_status_check
  CHECK (status IN ('claimed', 'captured', 'refund_due', 'refunded', 'applied', 'void'));
ALTER TABLE claims ADD COLUMN settled_at timestamptz;
ALTER TABLE claims ADD COLUMN settlement_error text;
CREATE INDEX claims_to_settle ON claims (captured_at)
  WHERE kind = 'eip3009' AND status = 'captured' AND settlement_tx IS NULL AND settlement_error IS NULL;
