-- payer_reserved (0065, 0070) sums an x402 payer's unsettled payments in every claim and every facilitator
-- /verify. Its sum of upto permits settled through the facilitator and not mined yet (status 'settling') had
-- no index by payer: it walked claims_settling (every 'settling' claim of every payer and kind, the
-- facilitator's exact authorizations in flight included) and filtered by payer. With 4,000 such claims in
-- flight that sum took 0.72 ms of the function's 1.2 (EXPLAIN ANALYZE, warm), and it grew with every payer's
-- backlog. The payer's own rows, as the other sums read theirs:
CREATE INDEX claims_upto_settling ON claims (lower(payer))
  WHERE kind = 'upto' AND status = 'settling' AND settled_at IS NULL AND settlement_error IS NULL;
