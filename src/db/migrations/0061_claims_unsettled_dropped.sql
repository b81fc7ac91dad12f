-- claims_unsettled (claimed_at, of x402 authorizations without a settlement transaction) serves no query:
-- the settlement batcher finds its work by claims_to_settle (captured, unsent, not failed), retention by
-- the claimed_at BRIN and the day partitions, reconcile by claimed_at ranges. Each x402 claim paid for it
-- twice, an entry at its claim and another at its capture (a non-HOT update).
DROP INDEX claims_unsettled;
