-- x402 `upto`: a Permit2 witness transfer signed for a maximum, settled after the call for its charge. Its
-- claim is of kind 'upto' (proof key upto:<payer>:<Permit2 nonce>, the pair Permit2 spends once), keeps the
-- signed permit in authorization_payload, and amount_atomic is the signed maximum; the charge is the call's
-- amount_atomic. settled_atomic: what the chain moved for it (the batcher's UptoSettled log), so reconcile
-- can hold settled = booked and charged <= signed.
ALTER TABLE claims DROP CONSTRAINT claims_kind_check;
ALTER TABLE claims ADD CONSTRAINT claims_kind_check CHECK (kind IN ('tx', 'eip3009', 'batch', 'upto'));
ALTER TABLE claims ADD COLUMN settled_atomic bigint CHECK (settled_atomic >= 0);

-- The upto settlement job's backlog, soonest deadline first (its own predicate: one index, no scan).
CREATE INDEX claims_upto_backlog ON claims (((authorization_payload->>'deadline')::numeric))
  WHERE kind = 'upto' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL;
