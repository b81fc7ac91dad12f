-- Revenue booked per capture batch, not per call: the capture statement (claimAndCapture, src/books/claims.ts,
-- one statement per batch of the batch writer) books the owner share and the fee of its transaction-hash
-- calls as ONE ledger entry per account and kind (an owner share per account and owner wallet: a wallet
-- changed while a capture waited in memory gets its own entry, so no call's money goes to another wallet),
-- whose amount is the sum of the calls it covers. Two entries per paid call (~432 bytes of the ~1.6 GB per
-- million calls online, bench/history) become two per account per batch; the ledger grows with batches.
--
-- The design:
-- - ledger_batch_ids gives each capture statement that books revenue one number (taken once per statement;
--   a statement that books nothing takes none; gaps are harmless).
-- - Its entries are source_type 'capture_batch', source_id that number (as text, like every source_id).
-- - Each call it booked carries the number in calls.ledger_batch_id. So the entries of a call are those of
--   its batch with its account_id (kind owner_share, fee), and the calls of an entry are those of its
--   batch and account. Call rows and entries of one statement share created_at (now(): the transaction's
--   start), so they sit in the same month partition, are archived together, and a created_at range holds
--   a batch whole or not at all; calls_account (account_id, created_at) finds an entry's calls without an
--   index of its own (which would cost the call rows a good part of what this saves).
-- - What a call booked is its own owner_share_atomic and fee_atomic (CHECK: they add up to its amount);
--   reconcile checks, per batch, account and kind, that the sum over its calls equals its entry, to the
--   base unit (src/control-plane/jobs/reconcile-batches.ts).
-- - A call with ledger_batch_id NULL is booked as before, by entries of its own (source_type 'call',
--   source_id its id): x402 calls (booked when their settlement is confirmed, bookCallRevenue) and every
--   call captured before this migration (left as they are: nothing here rewrites history).
-- - Everything per call stays per call: the unused part of a prepaid ceiling (a 'refund' entry of the
--   call), a merchant's refund of one call (its own reversing entries, source 'refund'), a claim refunded
--   at the end of its window (source 'claim').
CREATE SEQUENCE ledger_batch_ids;
ALTER TABLE calls ADD COLUMN ledger_batch_id bigint;

-- The new source type. NOT VALID: every existing row already passed the narrower check of 0027, so the scan
-- of the whole ledger that validating would cost proves nothing; new rows (and partitions) are checked.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_source_type_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_source_type_check
  CHECK (source_type IN ('call', 'payment', 'claim', 'refund', 'capture_batch')) NOT VALID;
