-- One durable row per paid call, with smaller keys on it. Measured by bench/history/storage-per-call.ts
-- (100,000 calls, capture batches of 10, every index built): calls 620 B a call and call_deliveries 187 B
-- before this migration.
--
-- What a paid answer delivered (SHA-256 of the body as sent, its length), which its signed final receipt
-- attests, is written on the call row by the capture itself when the answer ended before the capture's
-- statement was sent: for an answer of a few kilobytes that is nearly always, the capture waiting for the
-- writer's next statement while the body goes out. A longer answer's delivery is still written a few
-- seconds later into call_deliveries, which stays for it (the call row is never updated: an UPDATE here
-- would leave a dead row version and new entries in every index, per call). A receipt reads the call row
-- first. The digest is stored as its 32 bytes (the hex text was 65).
ALTER TABLE calls ADD COLUMN body_sha256 bytea, ADD COLUMN body_bytes bigint;
ALTER TABLE calls ADD CONSTRAINT calls_delivery_whole
  CHECK ((body_sha256 IS NULL) = (body_bytes IS NULL) AND (body_sha256 IS NULL OR length(body_sha256) = 32));

-- The listing indexes end at created_at: the calls of one capture statement share it (now() of their
-- transaction), so with the id gone their keys are equal and deduplicated into one index entry
-- (68 B a call each at batches of 10, 12 B without the id). The lists still page by (created_at, id):
-- the index finds the rows up to the cursor's time, and the few rows of one time are sorted by id.
DROP INDEX calls_account;
CREATE INDEX calls_account ON calls (account_id, created_at DESC);
DROP INDEX calls_endpoint;
CREATE INDEX calls_endpoint ON calls (endpoint_id, created_at DESC);

-- A call is found by its proof only by equality (its claim, its settlement): a hash index keeps the
-- proof's 4-byte hash, not its text (96 B a call as a B-tree of the ~70-character keys, 46 B as a hash).
DROP INDEX calls_proof_key;
CREATE INDEX calls_proof_key ON calls USING hash (proof_key);
