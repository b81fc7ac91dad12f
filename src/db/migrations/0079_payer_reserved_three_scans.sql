-- payer_reserved (0065, 0070, 0077, 0078) is what an x402 payer's unsettled payments hold, summed in every
-- claim of an authorization or permit and in every facilitator /verify. It summed eight subqueries, each an
-- index scan on every partition of claims (the days, claims_vouchers, claims_default): 48 index descents a
-- call, most of them finding nothing, about 400 µs of the backend a facilitator settlement at 600/s
-- (pg_stat_statements, track = all), a third of PostgreSQL's CPU a settlement.
--
-- Now three scans, the same sums: the payments not settled (both kinds, every state that holds money) on
-- one index, and the settled ones whose balance read may not show them yet, by block and by time, on
-- another. What each holds is unchanged (migration 0065's list):
-- * exact (eip3009), claimed (not released), captured or settling: its amount;
-- * upto claimed (not released): its maximum; captured: its call's charge (the maximum if the call row
--   cannot be found); settling (through the facilitator): the amount the merchant settles for;
-- * settled after the balance's block, or with no block for two minutes: exact its amount, upto what the
--   chain moved (settled_atomic).
-- And none of them reads claims_vouchers: x402 claims never have an infinite horizon (claim_horizon_at caps
-- theirs at year 9999), so `horizon_at < 'infinity'` prunes it when the plan is made.
--
-- The five indexes the eight sums used are replaced by two covering both kinds, on the same rows: a claim
-- was in exactly one of them before and is in exactly one now, so writes maintain as many indexes as before.

CREATE INDEX claims_payer_unsettled ON claims (lower(payer))
  WHERE kind IN ('eip3009', 'upto') AND settled_at IS NULL AND settlement_error IS NULL
    AND status IN ('claimed', 'captured', 'settling');

CREATE INDEX claims_payer_settled_block ON claims (lower(payer), settlement_block, settled_at)
  WHERE kind IN ('eip3009', 'upto') AND settled_at IS NOT NULL;

CREATE OR REPLACE FUNCTION payer_reserved(payer_l text, since_block bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
-- As 0077: one generic plan a connection (a custom plan prunes nothing here and cost more than the sums).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  reserved bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(3009, hashtext(payer_l));
  IF since_block IS NULL THEN
    RETURN NULL;
  END IF;
  -- One query (one snapshot, taken now that the lock is held), three scans of the payer's rows.
  SELECT
    -- Not settled: what settlement may still take. A released claim (no lease, as many releases as
    -- attempts) holds nothing: its retry claims again. A captured permit's call is looked up only for it
    -- (the CASE evaluates the subquery for those rows alone).
    (SELECT coalesce(sum(CASE WHEN k.kind = 'upto' AND k.status = 'captured'
                              THEN coalesce((SELECT c.amount_atomic FROM calls c WHERE c.id = k.call_id),
                                            k.amount_atomic)
                              ELSE k.amount_atomic END), 0)
     FROM claims k
     WHERE lower(k.payer) = payer_l AND k.kind IN ('eip3009', 'upto') AND k.settled_at IS NULL
       AND k.settlement_error IS NULL AND k.status IN ('claimed', 'captured', 'settling')
       AND NOT (k.status = 'claimed' AND k.lease_until IS NULL AND k.releases = k.attempts)
       AND k.horizon_at < 'infinity')
    -- Settled after the block the balance was read at: the balance may not show it yet.
    + (SELECT coalesce(sum(CASE WHEN kind = 'eip3009' THEN amount_atomic ELSE settled_atomic END), 0)
       FROM claims
       WHERE lower(payer) = payer_l AND kind IN ('eip3009', 'upto') AND settled_at IS NOT NULL
         AND settlement_block > since_block AND horizon_at < 'infinity')
    -- Settled with no block known (a zero charge sends nothing): held for two minutes.
    + (SELECT coalesce(sum(CASE WHEN kind = 'eip3009' THEN amount_atomic ELSE settled_atomic END), 0)
       FROM claims
       WHERE lower(payer) = payer_l AND kind IN ('eip3009', 'upto') AND settled_at IS NOT NULL
         AND settlement_block IS NULL AND settled_at > now() - interval '2 minutes'
         AND horizon_at < 'infinity')
  INTO reserved;
  RETURN reserved;
END $$;

DROP INDEX claims_eip3009_reserved;
DROP INDEX claims_eip3009_settled_block;
DROP INDEX claims_upto_reserved;
DROP INDEX claims_upto_settling;
DROP INDEX claims_upto_settled_block;
