-- x402 revenue booked per settlement statement, not per call, as transaction-hash revenue is per capture
-- statement since migration 0050. An x402 call (exact, upto, a batch voucher) is revenue only once its
-- settlement is confirmed, so it was booked then by a pair of entries of its own: ~430 bytes a call that
-- stayed online. Now the statement that books settled calls (bookCallRevenue) writes ONE owner share per
-- account and owner wallet and ONE fee per account, each the sum of the calls it covers, and marks each
-- call with the batch. The ledger grows with settlement batches, not with x402 calls.
--
-- The design, beside 0050's:
-- - A settlement batch takes its number from the same sequence, negated: a capture batch's number is
--   positive, a settlement batch's negative, so the sign says which booking a call had and the index below
--   holds only the calls booked at settlement (a transaction-hash call pays nothing for it).
-- - Its entries are source_type 'settlement_batch', source_id that (negative) number as text, as
--   calls.ledger_batch_id::text gives it.
-- - Unlike a capture batch, its calls and its entries do not share created_at: the calls were written when
--   served, the entries when the settlement was confirmed (always later: the booking reads committed calls).
--   So reconcile checks a settlement batch whole whenever its entries or any of its calls fall in the
--   range: the calls of a batch by calls_settlement_batch, its entries by ledger_source.
-- - Booking a call sets its ledger_batch_id once, NULL → the batch, under the precondition that it is
--   still NULL and the call has no entries of its own: the call row's only update.
-- - A month of calls can be archived before the month holding its settlement batch's entries (a call
--   served on the 31st, settled on the 1st). The sums of the archived calls per settlement batch and
--   account are carried in archived_batch_calls, so the batch still checks exactly.
-- - Calls booked before this migration keep their own entries (source_type 'call'); nothing is rewritten.
CREATE INDEX calls_settlement_batch ON calls (ledger_batch_id) WHERE ledger_batch_id < 0;

ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_source_type_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_source_type_check
  CHECK (source_type IN ('call', 'payment', 'claim', 'refund', 'capture_batch', 'settlement_batch')) NOT VALID;

CREATE TABLE archived_batch_calls (
  month               date NOT NULL,
  batch_id            bigint NOT NULL CHECK (batch_id < 0),
  account_id          text NOT NULL,
  calls               bigint NOT NULL,
  owner_share_atomic  bigint NOT NULL,
  fee_atomic          bigint NOT NULL,
  PRIMARY KEY (batch_id, account_id, month)
);
