-- Two things a paid call's row no longer pays for, measured by bench/history/storage-per-call.ts (100,000
-- calls, capture batches of 10, every index built).
--
-- 1. The calls' index of proof keys (a hash index, 47 B a call). Every way from a proof to its call starts at
--    its claim (its capture, its settlement, the pass it bought, reconcile), so the claim names the call its
--    capture wrote, and the way goes by the call's primary key. From a call to its claim is the claims'
--    primary key, as before. calls.proof_key stays: it is the call's proof (a transaction hash, on its
--    receipt) after its claim has left with its day.
ALTER TABLE claims ADD COLUMN call_id text;
UPDATE claims k SET call_id = c.id FROM calls c WHERE c.proof_key = k.proof_key AND k.call_id IS NULL;
DROP INDEX calls_proof_key;

-- 2. The receipt id, when it is the one derived from the call id (call_X has receipt rcpt_X, migration
--    0058; 20 B a call and more with real ids). It is stored as '' then. NULL still means the call has no
--    receipt (a pass's purchase), so no row written before needs rewriting. Every reader goes through
--    call_receipt_id, every writer through call_receipt_stored.
CREATE FUNCTION call_receipt_id(call_id text, stored text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN stored = '' THEN 'rcpt_' || substr(call_id, 6) ELSE stored END $$;
CREATE FUNCTION call_receipt_stored(call_id text, receipt_id text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN receipt_id = 'rcpt_' || substr(call_id, 6) THEN '' ELSE receipt_id END $$;
-- The receipt id's index keeps only the ids not derived from their call's ('' is not one).
DROP INDEX calls_receipt;
CREATE INDEX calls_receipt ON calls (receipt_id)
  WHERE receipt_id <> '' AND substr(receipt_id, 6) <> substr(id, 6);
