-- x402 upto's eip2612GasSponsoring (migration 0081): a sponsored permit's approval is checked against the
-- token's EIP-2612 nonce as read while the permit is verified, and claimed a moment later. A previous
-- sponsored permit of the payer settled in between (the settler marks it at once) used that very nonce: the
-- new approval can no longer be submitted, and the new permit would be settled on what is left of the
-- previous approval's allowance (its maximum less its charge), which need not cover the new charge. Seen in
-- the schemes chaos round: one served call of a sponsored payer unsettled (its payer moved 470 base units
-- less than charged). So a sponsored permit is refused (as 'sponsored': the payer signs again, and the client
-- reads the nonce afresh) when another sponsored permit of the payer, settled or in flight, already carries
-- an approval nonce at or above its own. Released claims (never served) and failed settlements do not count:
-- their approval may never have been used, and the chain's nonce, checked at verification, tells.
--
-- Asked only for a sponsored claim, through an index that holds sponsored permits only (none where no payer
-- uses the extension): one probe of the payer's approvals from that nonce up.
CREATE INDEX claims_payer_upto_approvals ON claims
  (lower(payer), ((authorization_payload->'permit2612'->>'nonce')::numeric))
  WHERE kind = 'upto' AND authorization_payload ? 'permit2612' AND settlement_error IS NULL;

CREATE OR REPLACE FUNCTION payer_upto_open(payer_l text, approval_nonce numeric) RETURNS text
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(3009, hashtext(payer_l));
  -- (Nested, so a claim without an approval never plans or runs the probe.)
  IF approval_nonce IS NOT NULL THEN
    IF EXISTS (
      SELECT 1 FROM claims k
      WHERE lower(k.payer) = payer_l AND k.kind = 'upto' AND k.authorization_payload ? 'permit2612'
        AND k.settlement_error IS NULL
        AND (k.authorization_payload->'permit2612'->>'nonce')::numeric >= approval_nonce
        AND (k.settled_at IS NOT NULL OR (k.status IN ('claimed', 'captured', 'settling')
             AND NOT (k.status = 'claimed' AND k.lease_until IS NULL AND k.releases = k.attempts)))
        AND k.horizon_at < 'infinity')
    THEN
      RETURN 'sponsored';
    END IF;
  END IF;
  IF EXISTS (
    SELECT 1 FROM claims k
    WHERE lower(k.payer) = payer_l AND k.kind = 'upto' AND k.settled_at IS NULL AND k.settlement_error IS NULL
      AND k.status IN ('claimed', 'captured', 'settling') AND k.authorization_payload ? 'permit2612'
      AND NOT (k.status = 'claimed' AND k.lease_until IS NULL AND k.releases = k.attempts)
      AND k.horizon_at < 'infinity'
      AND NOT (approval_nonce IS NOT NULL AND k.settlement_tx IS NOT NULL
               AND (k.authorization_payload->'permit2612'->>'nonce')::numeric < approval_nonce))
  THEN
    RETURN 'sponsored';
  END IF;
  -- Without an approval to place, "open" is all the rule needs to know (it refuses only beside 'sponsored').
  IF approval_nonce IS NULL THEN
    RETURN 'open';
  END IF;
  IF EXISTS (
    SELECT 1 FROM claims k
    WHERE lower(k.payer) = payer_l AND k.kind = 'upto'
      AND k.settled_at IS NULL AND k.settlement_error IS NULL AND k.status IN ('claimed', 'captured', 'settling')
      AND NOT (k.status = 'claimed' AND k.lease_until IS NULL AND k.releases = k.attempts)
      AND k.horizon_at < 'infinity'
      AND NOT (k.settlement_tx IS NOT NULL AND k.authorization_payload ? 'permit2612'
               AND (k.authorization_payload->'permit2612'->>'nonce')::numeric < approval_nonce))
  THEN
    RETURN 'open';
  END IF;
  RETURN 'none';
END $$;
