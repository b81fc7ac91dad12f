-- An x402 `upto` permit settled through the facilitator (/api/v1/facilitator/settle) is claimed 'settling'
-- (target_type 'facilitator', no call) for the amount the merchant's middleware settles it for, and waits in
-- the upto settlement job like a captured call's permit. Until mined it holds that amount against the
-- payer's balance, as a captured permit holds its call's charge: payer_reserved adds it. Once settled it is
-- counted by settled_atomic as every upto permit. Everything else is as migration 0065 defines it.

CREATE OR REPLACE FUNCTION payer_reserved(payer_l text, since_block bigint) RETURNS bigint
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
    -- upto, settled through the facilitator and not mined yet: the amount the merchant settles for.
    + (SELECT coalesce(sum(amount_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'upto' AND settled_at IS NULL AND settlement_error IS NULL
         AND status = 'settling')
    + (SELECT coalesce(sum(settled_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'upto' AND settled_at IS NOT NULL
         AND settlement_block > since_block)
    + (SELECT coalesce(sum(settled_atomic), 0) FROM claims
       WHERE lower(payer) = payer_l AND kind = 'upto' AND settled_at IS NOT NULL
         AND settlement_block IS NULL AND settled_at > now() - interval '2 minutes')
  INTO reserved;
  RETURN reserved;
END $$;
