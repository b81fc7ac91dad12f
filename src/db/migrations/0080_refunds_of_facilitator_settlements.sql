-- A merchant's refund of a payment it settled through the facilitator to the treasury (POST /api/v1/refunds
-- with settlement_id): booked as every refund is (migration 0027: the payer's part, the merchant's debit,
-- the fee given back), against what the settlement booked (its owner share and fee, source_type
-- 'facilitator'). A settlement paid to the merchant's own wallet booked nothing and is not refundable here:
-- tollgate never held that money.
ALTER TABLE refunds ADD COLUMN settlement_id text REFERENCES facilitator_settlements(id);
-- Exactly one source, of three now.
ALTER TABLE refunds DROP CONSTRAINT refunds_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_one_source CHECK (num_nonnulls(payment_id, call_id, settlement_id) = 1);
-- What is already refunded of one settlement (the refundable check reads these under the settlement's lock).
CREATE INDEX refunds_settlement ON refunds (settlement_id) WHERE settlement_id IS NOT NULL;
