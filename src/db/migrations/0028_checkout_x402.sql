-- x402 on the hosted checkout: an EIP-3009 authorization presented for a payment is claimed as 'settling'
-- (the payment stays pending), settled on chain by the settlement batcher with the metered calls', and only
-- then applied to the payment — 'applied' (it paid) or 'refund_due' (the payment closed meanwhile: the money
-- arrived, so it goes back). An authorization never sent (settlement failed, or the payment closed first)
-- ends 'void': no money moved.
ALTER TABLE claims DROP CONSTRAINT claims_status_check;
ALTER TABLE claims ADD CONSTRAINT claims_status_check
  CHECK (status IN ('claimed', 'captured', 'refund_due', 'refunded', 'applied', 'void', 'settling'));
-- The settlement batcher's lists read these beside the captured calls' own partial indexes; a settling
-- claim leaves the state within one settlement run, so this index stays a handful of rows.
CREATE INDEX claims_settling ON claims (claimed_at) WHERE status = 'settling';
