-- A channel claim transaction's block, recorded with its receipt when it is marked done (recordChannelClaims):
-- the calls it covers show it on their receipts, those written after it too (settleCoveredChannelCalls reads
-- it here). Null for claims done before this column existed. The claims' own settlement_block, _index and
-- _count (migration 0038) now also hold, for upto permits and channel vouchers, the settling transaction's
-- block and the payment's place in it.
ALTER TABLE batch_claims ADD COLUMN block_number bigint CHECK (block_number >= 0);
