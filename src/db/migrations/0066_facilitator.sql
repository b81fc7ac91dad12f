-- tollgate as an x402 facilitator (/api/v1/facilitator: verify, settle, supported; docs/facilitator.md).
-- A merchant running the published middleware sends tollgate an `exact` payload; its authorization is
-- claimed by the same claim as every proof (claims, same proof_key as when it pays a metered call), so a
-- payload settles once, here or on a metered URL, never both. The claim is 'settling' until the settlement
-- batcher's transaction uses it, then 'applied' (or 'void': expired or reverted, nothing moved).
--
-- facilitator_settlements keeps what the merchant asked for (one row per proof: a retry of /settle, on any
-- instance, finds it and answers the first outcome) and, for a payTo that is the treasury, what was booked.
CREATE TABLE facilitator_settlements (
  id                  text PRIMARY KEY,
  account_id          text NOT NULL REFERENCES accounts(id),
  proof_key           text NOT NULL UNIQUE,
  -- The payment-identifier extension's id, when the middleware sent one: one settlement per id and account.
  payment_identifier  text,
  -- 'treasury': the money comes to tollgate and is booked like a metered call (owner share to the account,
  -- paid out, refundable); 'merchant': it goes to the account's own wallet, tollgate only submits it.
  custody             text NOT NULL CHECK (custody IN ('treasury', 'merchant')),
  pay_to              text NOT NULL,
  payer               text NOT NULL,
  amount_atomic       bigint NOT NULL CHECK (amount_atomic > 0),
  owner_share_atomic  bigint NOT NULL,
  fee_atomic          bigint NOT NULL,
  network             text NOT NULL,
  x402_version        integer NOT NULL CHECK (x402_version IN (1, 2)),
  created_at          timestamptz NOT NULL DEFAULT now(),
  -- Set with the claim's settlement, in the batcher's transaction (applyFacilitatorSettlements).
  settled_at          timestamptz,
  settlement_tx       text,
  CHECK (owner_share_atomic + fee_atomic = CASE WHEN custody = 'treasury' THEN amount_atomic ELSE 0 END)
);
CREATE UNIQUE INDEX facilitator_settlements_payment_id
  ON facilitator_settlements (account_id, payment_identifier) WHERE payment_identifier IS NOT NULL;
CREATE INDEX facilitator_settlements_account ON facilitator_settlements (account_id, created_at DESC, id DESC);

-- A claim may now target a facilitator settlement. The check sits on the partitioned table and, merged, on
-- partitions made with LIKE … INCLUDING CONSTRAINTS (migration 0055): dropped everywhere, added once.
ALTER TABLE claims DROP CONSTRAINT IF EXISTS claims_target_type_check;
DO $$
DECLARE r record;
BEGIN
  FOR r IN
    SELECT c.conrelid::regclass::text AS tbl, c.conname
    FROM pg_constraint c
    WHERE c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%target_type%'
      AND c.conrelid IN (SELECT relid FROM pg_partition_tree('claims'))
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
  END LOOP;
END $$;
ALTER TABLE claims ADD CONSTRAINT claims_target_type_check
  CHECK (target_type IN ('call', 'payment', 'facilitator')) NOT VALID;

ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_source_type_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_source_type_check
  CHECK (source_type IN ('call', 'payment', 'claim', 'refund', 'capture_batch', 'settlement_batch',
                         'facilitator')) NOT VALID;
