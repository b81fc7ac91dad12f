-- GET /payouts reads an account's payouts newest first. payout_accounts had no time of its own, so the read
-- joined every payout of the account and sorted them all before taking a page (the history bench: 2.7× the
-- empty database at 1 M entries, growing with the number of payouts). With the payout's created_at copied
-- onto its payout_accounts rows, a page is an index walk that stops after `limit` rows.
--
-- The copy never goes stale: a payout's created_at is set once, when it is recorded, in the same statement
-- group that writes its payout_accounts rows (recordPayouts, src/books/payouts.ts), and nothing updates it.
-- No default: a writer that forgets it fails loudly instead of filing the payout at the wrong time.
ALTER TABLE payout_accounts ADD COLUMN created_at timestamptz;
UPDATE payout_accounts pa SET created_at = p.created_at FROM payouts p WHERE p.id = pa.payout_id;
ALTER TABLE payout_accounts ALTER COLUMN created_at SET NOT NULL;
CREATE INDEX payout_accounts_account_created ON payout_accounts (account_id, created_at DESC, payout_id DESC);
