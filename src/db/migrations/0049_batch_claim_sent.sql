-- A channel claim transaction is signed locally and recorded ('sent', with its signed bytes and nonce)
-- before it is broadcast, as settlements and payouts are: a crash or a lost answer after the broadcast
-- leaves a hash to look up, never a claim made on chain and missing from the books.
ALTER TABLE batch_claims ADD COLUMN raw_tx text, ADD COLUMN nonce bigint;
CREATE INDEX batch_claims_sent ON batch_claims (created_at) WHERE status = 'sent';
