-- Claims leave the database a day at a time instead of row by row. A claim row is what makes a proof pay
-- once until the stored horizon refuses that proof (src/books/retention.ts), so a claim can go only once its
-- proof's own time is below the horizon. Deleting such rows one by one did not keep pace with 10,000 paid
-- calls a second: each batch scanned the dead rows the previous ones left. Partitioned by the proof's own
-- time, a whole day of claims goes at once (DROP of its partition) once the day is below every horizon.
--
-- The partition key, horizon_at, is a function of the proof alone, so a replay of a proof always computes
-- the same value and meets its first claim on the one unique key (proof_key, horizon_at):
-- - tx: the transaction's block time (claims.proof_at), from the chain;
-- - eip3009: the authorization's signed validBefore; upto: the permit's signed deadline (seconds, capped at
--   the last second of year 9999 so any uint256 converts, the same way for every replay);
-- - batch (channel vouchers): 'infinity'. A voucher is refused below its channel's charged cumulative, not by
--   a time, so vouchers keep their own partition and go row by row as before.
-- There is no column default on purpose: a writer that forgot the key would get a fresh value per attempt
-- and a replay would not meet its first claim. claim_horizon_at below is the one definition every writer
-- uses.
--
-- Partitions: one per UTC day (claims_dYYYYMMDD), made ahead by the leader's partitions job; claims_vouchers
-- for 'infinity'; claims_default for anything else (a proof time outside the days made: a far validBefore,
-- a clock far off). Uniqueness does not depend on which partition a row is in (the key is the same
-- everywhere), so rows may move from the default partition into a day made later.

CREATE FUNCTION claim_horizon_at(kind text, proof_at timestamptz, auth jsonb) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
  SELECT CASE kind
    WHEN 'tx' THEN proof_at
    -- (least() would turn a missing field into the cap: NULL stays NULL, and the NOT NULL key refuses it.)
    WHEN 'eip3009' THEN to_timestamp(nullif(least(coalesce((auth->>'validBefore')::numeric, -1), 253402300799), -1))
    WHEN 'upto' THEN to_timestamp(nullif(least(coalesce((auth->>'deadline')::numeric, -1), 253402300799), -1))
    WHEN 'batch' THEN 'infinity'::timestamptz
  END
$$;

-- Creates the day partition of claims holding [day, day + 1) in UTC, if missing, moving the rows of that day
-- out of the default partition first (attaching would fail on them). Returns whether it created one.
CREATE FUNCTION claims_day_partition(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  part text := 'claims_d' || to_char(day, 'YYYYMMDD');
  lo timestamptz := day::timestamp AT TIME ZONE 'UTC';
  hi timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
  IF to_regclass(part) IS NOT NULL THEN
    RETURN false;
  END IF;
  EXECUTE format('CREATE TABLE %I (LIKE claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
  EXECUTE format(
    'WITH moved AS (DELETE FROM claims_default WHERE horizon_at >= %L AND horizon_at < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
    lo, hi, part);
  -- The check lets ATTACH skip its validation scan of the new partition.
  EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (horizon_at >= %L AND horizon_at < %L)',
    part, part || '_range', lo, hi);
  EXECUTE format('ALTER TABLE claims ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
  EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
  RETURN true;
END $$;

ALTER TABLE claims RENAME TO claims_unpartitioned;
ALTER TABLE claims_unpartitioned RENAME CONSTRAINT claims_pkey TO claims_unpartitioned_pkey;
ALTER TABLE claims_unpartitioned ADD COLUMN horizon_at timestamptz;
-- Rows from before proof_at was stored (migration 0017) have no block time: their claim time stands in.
UPDATE claims_unpartitioned
   SET horizon_at = coalesce(claim_horizon_at(kind, proof_at, authorization_payload), claimed_at);
ALTER TABLE claims_unpartitioned ALTER COLUMN horizon_at SET NOT NULL;

CREATE TABLE claims (LIKE claims_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (horizon_at);
CREATE TABLE claims_default PARTITION OF claims DEFAULT;
CREATE TABLE claims_vouchers PARTITION OF claims FOR VALUES FROM ('infinity') TO (MAXVALUE);
DO $$
DECLARE
  d date;
BEGIN
  -- The days of the rows kept, and the two before today (a week back at most: older proofs are below any
  -- horizon and wait in the default partition for the row prune), to tomorrow. Each partition a statement
  -- on claims may touch costs it executor start-up, so the partitions job keeps one day ahead, not more.
  d := greatest(
    least(coalesce((SELECT min(horizon_at) FROM claims_unpartitioned WHERE horizon_at < 'infinity')::date,
                   current_date), current_date - 2),
    current_date - 7);
  WHILE d <= current_date + 1 LOOP
    PERFORM claims_day_partition(d);
    d := d + 1;
  END LOOP;
END $$;
INSERT INTO claims SELECT * FROM claims_unpartitioned;
DROP TABLE claims_unpartitioned;

ALTER TABLE claims ADD CONSTRAINT claims_pkey PRIMARY KEY (proof_key, horizon_at);
CREATE INDEX claims_batch_unsettled ON claims ((split_part(proof_key, ':', 2)), ((split_part(proof_key, ':', 3))::bigint))
  WHERE kind = 'batch' AND status = 'captured' AND settled_at IS NULL;
CREATE INDEX claims_claimed_brin ON claims USING brin (claimed_at);
CREATE INDEX claims_eip3009_reserved ON claims (lower(payer))
  WHERE kind = 'eip3009' AND settled_at IS NULL AND settlement_error IS NULL
    AND status IN ('claimed', 'captured', 'settling');
CREATE INDEX claims_eip3009_settled_block ON claims (lower(payer), settlement_block, settled_at)
  WHERE kind = 'eip3009' AND settled_at IS NOT NULL;
CREATE INDEX claims_settlement_backlog ON claims (captured_at)
  WHERE kind = 'eip3009' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL;
CREATE INDEX claims_settlement_tx_lower ON claims (lower(settlement_tx)) WHERE settlement_tx IS NOT NULL;
CREATE INDEX claims_settling ON claims (claimed_at) WHERE status = 'settling';
CREATE INDEX claims_to_settle ON claims (captured_at)
  WHERE kind = 'eip3009' AND status = 'captured' AND settlement_tx IS NULL AND settlement_error IS NULL;
CREATE INDEX claims_uncaptured ON claims (retry_until) WHERE status = 'claimed';
CREATE INDEX claims_unsettled ON claims (claimed_at) WHERE kind = 'eip3009' AND settlement_tx IS NULL;
CREATE INDEX claims_upto_backlog ON claims (((authorization_payload->>'deadline')::numeric))
  WHERE kind = 'upto' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL;
-- For the day drop's check that nothing in the day is still owed a refund (src/books/retention.ts).
CREATE INDEX claims_refund_due ON claims (claimed_at) WHERE status = 'refund_due';
