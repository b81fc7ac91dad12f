-- One payer reservation for every x402 payment drawn on the payer's USDC balance after the call: exact
-- authorizations (migration 0045) and, now, upto permits. Both move the same tokens from the same wallet, so
-- they are summed together, under the same advisory lock, by the same claim statement
-- (src/books/claims.ts, claimAndCapture). Before, an upto permit was checked against the balance read alone:
-- two permits of one payer whose maxima together exceeded it were both served (on one instance, the second
-- arriving after the first read came back; on two instances, always), and one settlement reverted unpaid.
--
-- What an upto permit holds, by its claim's state:
-- * claimed (its call in flight): its signed maximum, what settlement may take at most;
-- * captured, not settled: its call's charge (calls.amount_atomic), what settlement will take;
-- * settled: what the chain moved (settled_atomic), while its block is after the balance read, or for
--   two minutes when no block is known (a zero charge sends nothing), as an exact authorization;
-- * released (the upstream failed), voided, or failed to settle (settlement_error): nothing. No money moves.

-- Unsettled upto permits of a payer (claimed or captured), the rows the sum reads.
CREATE INDEX claims_upto_reserved ON claims (lower(payer))
  WHERE kind = 'upto' AND settled_at IS NULL AND settlement_error IS NULL AND status IN ('claimed', 'captured');

-- Settled upto permits by the block that mined them (as claims_eip3009_settled_block for exact).
CREATE INDEX claims_upto_settled_block ON claims (lower(payer), settlement_block, settled_at)
  WHERE kind = 'upto' AND settled_at IS NOT NULL;

-- What a balance read at block `since_block` must still cover for `payer` (lower-case): eip3009_reserved's
-- sum (migration 0045) plus the payer's upto permits as above. Same lock (3009, hashtext(payer)) as before,
-- so a checkout's hold (holdPaymentAuthorization) and a claim of either scheme on any instance serialize.
-- With since_block NULL it only takes the lock and answers NULL. Read-only; the lock is released at commit.
CREATE FUNCTION payer_reserved(payer_l text, since_block bigint) RETURNS bigint
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
    -- upto, its call in flight: the maximum (a released claim is not held: its retry claims again).
    + (SELECT coalesce(sum(amount_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'upto' AND settled_at IS NULL AND settlement_error IS NULL
         AND status = 'claimed' AND NOT (lease_until IS NULL AND releases = attempts))
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

-- Nothing calls the exact-only sum any more.
DROP FUNCTION eip3009_reserved(text, bigint);
