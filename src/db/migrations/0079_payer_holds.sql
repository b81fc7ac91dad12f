-- The payer reservation's unsettled part kept as a running total per payer, not summed on every claim.
--
-- payer_reserved (0065, 0070, 0077, 0078) runs in every x402 exact or upto claim and every facilitator
-- /verify. Its sums of a payer's authorizations and permits in flight (claimed, captured, settling) read every
-- such row of the payer: with the facilitator bench's 8 payers holding hundreds in flight each, the two calls
-- a settlement cost ~590 µs of the ~1,300 µs of PostgreSQL CPU a settlement (pg_stat_statements, 600/s), and
-- grew with the backlog. Those parts are now a total per payer, kept by triggers on claims, so a claim reads
-- one row whatever the payer's backlog.
--
-- * What a claim holds, claim_holds below, is exactly what those sums counted: an exact authorization its
--   amount while claimed (not released), captured or settling; an upto permit its maximum while claimed (not
--   released), the amount it settles for while settling through the facilitator; nothing once settled,
--   failed (settlement_error) or in any other state. A captured upto permit holds its call's charge, which the
--   claim row does not carry: that sum stays a read (few rows: upto settles within a block or two).
-- * The triggers append each change of a claim's hold (insert, update, delete) to payer_hold_changes, in the
--   transaction that makes it: no row lock is taken, so settlements that touch many payers in any order never
--   wait on each other or on a claim. payer_reserved, holding the payer's advisory lock, folds the payer's
--   changes into payer_holds and reads the total plus any change committed since its fold: that is the hold
--   as of its last snapshot, the one its other sums read, so the reservation is what the sums gave.
-- * A row moved from claims_default into a day partition made later (claims_day_partition) leaves the
--   partitioned table for a moment (the new table has no triggers until attached): the move adds back what
--   the delete took. Retention drops a day only when nothing in it holds (src/books/retention.ts). A TRUNCATE
--   fires no row trigger: truncate payer_holds and payer_hold_changes with claims.
-- * reconcile compares payer_holds plus the pending changes with claim_holds summed over claims
--   (src/control-plane/jobs/reconcile-holds.ts).
-- Issue 54's rule holds: a transaction-hash claim (the paid path) fails the triggers' WHEN on its kind and
-- calls nothing.

CREATE FUNCTION claim_holds(kind text, status text, settled_at timestamptz, settlement_error text,
                            lease_until timestamptz, releases integer, attempts integer, amount bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN settled_at IS NOT NULL OR settlement_error IS NOT NULL THEN 0
    -- Released: its retry claims again.
    WHEN status = 'claimed' AND lease_until IS NULL AND releases = attempts THEN 0
    WHEN kind = 'eip3009' AND status IN ('claimed', 'captured', 'settling') THEN amount
    WHEN kind = 'upto' AND status IN ('claimed', 'settling') THEN amount
    ELSE 0
  END
$$;

CREATE TABLE payer_holds (
  payer_l     text PRIMARY KEY,
  held_atomic bigint NOT NULL
);

CREATE TABLE payer_hold_changes (
  payer_l      text NOT NULL,
  delta_atomic bigint NOT NULL
);
CREATE INDEX payer_hold_changes_payer ON payer_hold_changes (payer_l);

CREATE FUNCTION claims_hold_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  was bigint := 0;
  now_held bigint := 0;
BEGIN
  IF TG_OP <> 'INSERT' THEN
    was := claim_holds(OLD.kind, OLD.status, OLD.settled_at, OLD.settlement_error, OLD.lease_until,
                       OLD.releases, OLD.attempts, OLD.amount_atomic);
  END IF;
  IF TG_OP <> 'DELETE' THEN
    now_held := claim_holds(NEW.kind, NEW.status, NEW.settled_at, NEW.settlement_error, NEW.lease_until,
                            NEW.releases, NEW.attempts, NEW.amount_atomic);
  END IF;
  IF TG_OP = 'UPDATE' AND lower(OLD.payer) = lower(NEW.payer) THEN
    INSERT INTO payer_hold_changes (payer_l, delta_atomic) VALUES (lower(NEW.payer), now_held - was);
  ELSE
    IF was <> 0 THEN
      INSERT INTO payer_hold_changes (payer_l, delta_atomic) VALUES (lower(OLD.payer), -was);
    END IF;
    IF now_held <> 0 THEN
      INSERT INTO payer_hold_changes (payer_l, delta_atomic) VALUES (lower(NEW.payer), now_held);
    END IF;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER claims_hold_inserted AFTER INSERT ON claims FOR EACH ROW
  WHEN (NEW.kind IN ('eip3009', 'upto')
        AND claim_holds(NEW.kind, NEW.status, NEW.settled_at, NEW.settlement_error, NEW.lease_until,
                        NEW.releases, NEW.attempts, NEW.amount_atomic) <> 0)
  EXECUTE FUNCTION claims_hold_changed();

CREATE TRIGGER claims_hold_updated AFTER UPDATE ON claims FOR EACH ROW
  WHEN ((OLD.kind IN ('eip3009', 'upto') OR NEW.kind IN ('eip3009', 'upto'))
        AND (claim_holds(OLD.kind, OLD.status, OLD.settled_at, OLD.settlement_error, OLD.lease_until,
                         OLD.releases, OLD.attempts, OLD.amount_atomic)
               <> claim_holds(NEW.kind, NEW.status, NEW.settled_at, NEW.settlement_error, NEW.lease_until,
                              NEW.releases, NEW.attempts, NEW.amount_atomic)
             OR lower(OLD.payer) <> lower(NEW.payer)))
  EXECUTE FUNCTION claims_hold_changed();

CREATE TRIGGER claims_hold_deleted AFTER DELETE ON claims FOR EACH ROW
  WHEN (OLD.kind IN ('eip3009', 'upto')
        AND claim_holds(OLD.kind, OLD.status, OLD.settled_at, OLD.settlement_error, OLD.lease_until,
                        OLD.releases, OLD.attempts, OLD.amount_atomic) <> 0)
  EXECUTE FUNCTION claims_hold_changed();

-- What the claims hold now (the migration runs in one transaction: claims are locked by the triggers'
-- creation until it commits, so no change falls between this sum and the triggers).
INSERT INTO payer_holds (payer_l, held_atomic)
SELECT lower(payer), sum(claim_holds(kind, status, settled_at, settlement_error, lease_until, releases,
                                     attempts, amount_atomic))
FROM claims WHERE kind IN ('eip3009', 'upto')
GROUP BY lower(payer)
HAVING sum(claim_holds(kind, status, settled_at, settlement_error, lease_until, releases, attempts,
                       amount_atomic)) <> 0;

-- As migration 0055's, with the moved rows' holds added back (see above).
CREATE OR REPLACE FUNCTION claims_day_partition(day date) RETURNS boolean
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
    'WITH moved AS (DELETE FROM claims_default WHERE horizon_at >= %L AND horizon_at < %L RETURNING *),'
    ' kept AS (INSERT INTO %I SELECT * FROM moved)'
    ' INSERT INTO payer_hold_changes (payer_l, delta_atomic)'
    ' SELECT lower(payer), h FROM (SELECT payer, claim_holds(kind, status, settled_at, settlement_error,'
    '   lease_until, releases, attempts, amount_atomic) AS h FROM moved) m WHERE h <> 0',
    lo, hi, part);
  -- The check lets ATTACH skip its validation scan of the new partition.
  EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (horizon_at >= %L AND horizon_at < %L)',
    part, part || '_range', lo, hi);
  EXECUTE format('ALTER TABLE claims ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
  EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
  RETURN true;
END $$;

-- As migration 0070's, the in-flight sums replaced by the payer's total (above). Same lock, same answer.
CREATE OR REPLACE FUNCTION payer_reserved(payer_l text, since_block bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  reserved bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(3009, hashtext(payer_l));
  IF since_block IS NULL THEN
    RETURN NULL;
  END IF;
  -- The changes committed so far, into the total (every fold of this payer holds its lock).
  WITH folded AS (
    DELETE FROM payer_hold_changes c WHERE c.payer_l = payer_reserved.payer_l RETURNING c.delta_atomic
  )
  INSERT INTO payer_holds AS h (payer_l, held_atomic)
  SELECT payer_reserved.payer_l, sum(delta_atomic) FROM folded HAVING count(*) > 0
  -- (By its constraint's name: a column named payer_l here would be ambiguous with the argument.)
  ON CONFLICT ON CONSTRAINT payer_holds_pkey DO UPDATE SET held_atomic = h.held_atomic + EXCLUDED.held_atomic;
  -- One query (one snapshot): the total, the changes committed since the fold (almost always none), and
  -- what the claim rows alone cannot say, each sum on its own partial index.
  SELECT
    coalesce((SELECT held_atomic FROM payer_holds h WHERE h.payer_l = payer_reserved.payer_l), 0)
    + coalesce((SELECT sum(delta_atomic) FROM payer_hold_changes c WHERE c.payer_l = payer_reserved.payer_l), 0)
    + (SELECT coalesce(sum(amount_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'eip3009' AND settled_at IS NOT NULL
         AND settlement_block > since_block)
    + (SELECT coalesce(sum(amount_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'eip3009' AND settled_at IS NOT NULL
         AND settlement_block IS NULL AND settled_at > now() - interval '2 minutes')
    -- upto, served and not settled yet: the call's charge (the maximum if its call row cannot be found).
    + (SELECT coalesce(sum(coalesce(c.amount_atomic, k.amount_atomic)), 0) FROM claims k
       LEFT JOIN calls c ON c.id = k.call_id
       WHERE lower(k.payer) = payer_l AND k.kind = 'upto' AND k.settled_at IS NULL
         AND k.settlement_error IS NULL AND k.status = 'captured')
    + (SELECT coalesce(sum(settled_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'upto' AND settled_at IS NOT NULL
         AND settlement_block > since_block)
    + (SELECT coalesce(sum(settled_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'upto' AND settled_at IS NOT NULL
         AND settlement_block IS NULL AND settled_at > now() - interval '2 minutes')
  INTO reserved;
  RETURN reserved;
END $$;
ALTER FUNCTION payer_reserved(text, bigint) SET plan_cache_mode = force_generic_plan;
