-- x402 exact: what a payer's served-but-unsettled authorizations hold of its balance, summed per payer by the
-- claim statement (src/books/claims.ts, claimAndCapture). The function takes the payer's advisory lock first
-- and only then sums (a VOLATILE function's query takes a fresh snapshot under READ COMMITTED): a claim of
-- the same payer in flight on another instance holds that lock until it commits, so its row is in the sum.

-- Unsettled authorizations of a payer (claimed, captured, or a checkout's settling), the rows the sum reads.
CREATE INDEX claims_eip3009_reserved ON claims (lower(payer))
  WHERE kind = 'eip3009' AND settled_at IS NULL AND settlement_error IS NULL
    AND status IN ('claimed', 'captured', 'settling');

-- Settled authorizations by the block that mined them: those mined after a balance read are still counted
-- against it (the read does not reflect them yet). Nulls (used another way, no block known) by settled_at.
CREATE INDEX claims_eip3009_settled_block ON claims (lower(payer), settlement_block, settled_at)
  WHERE kind = 'eip3009' AND settled_at IS NOT NULL;

-- What a balance read at block `since_block` must still cover for `payer` (lower-case): unsettled
-- authorizations (a released claim is not held: its retry claims again, and is counted then) and those
-- settled in a later block, or with no block known within the last two minutes (a balance read is used
-- for seconds at most, src/chain/check-authorization.ts). With since_block NULL (a claim that brings no
-- balance read: checkout) it only takes the lock and answers NULL. Read-only; the lock is released at commit.
CREATE FUNCTION eip3009_reserved(payer_l text, since_block bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  reserved bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(3009, hashtext(payer_l));
  IF since_block IS NULL THEN
    RETURN NULL;
  END IF;
  -- One query (one snapshot, taken now that the lock is held), each sum on its own partial index.
  SELECT
    (SELECT coalesce(sum(amount_atomic), 0) FROM claims
     WHERE lower(payer) = payer_l AND kind = 'eip3009' AND settled_at IS NULL AND settlement_error IS NULL
       AND status IN ('claimed', 'captured', 'settling')
       AND NOT (status = 'claimed' AND lease_until IS NULL AND releases = attempts))
    + (SELECT coalesce(sum(amount_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'eip3009' AND settled_at IS NOT NULL
         AND settlement_block > since_block)
    + (SELECT coalesce(sum(amount_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'eip3009' AND settled_at IS NOT NULL
         AND settlement_block IS NULL AND settled_at > now() - interval '2 minutes')
  INTO reserved;
  RETURN reserved;
END $$;
