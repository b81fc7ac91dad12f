-- x402 upto's eip2612GasSponsoring: a payer that never approved Permit2 signs the token's EIP-2612 approval
-- beside its upto permit (stored in the claim's authorization_payload as permit2612), and the settlement
-- submits it first. The approval *sets* Permit2's allowance to that one permit's maximum, so it cannot share:
-- * a sponsored permit is claimed only while the payer has no other upto permit unsettled (their settlement
--   counts on the allowance it overwrites);
-- * while it is unsettled, no other upto permit of the payer is claimed (the allowance it would count on is
--   the one the sponsored permit spends, or the one it is about to overwrite).
-- Either would let a served call's settlement fail for want of allowance: a call left unpaid. The claim
-- statement asks this under the payer's lock (the reservation's, migration 0045, here taken again: advisory
-- locks nest within a transaction), with a fresh snapshot, as payer_reserved sums: 'none' (no upto permit
-- unsettled), 'open' (some, none sponsored), 'sponsored' (a sponsored one among them). Only batches with upto
-- claims call it.
--
-- approval_nonce: the token's EIP-2612 nonce of the payer as the chain shows it now (the new sponsored
-- permit's approval, checked equal to it), or NULL. A sponsored permit whose approval nonce is below it, and
-- whose settlement transaction tollgate sent, was settled by that transaction (the approval and the transfer
-- go together, or neither does): only the booking is behind (the settler marks its block a moment after the
-- answer). It holds no allowance any more and is not counted, so a payer paying one call after another with
-- approvals is not refused while the previous settlement is being booked.
--
-- What it costs a batch of upto claims that carries no approval (all of them but a payer's sponsored ones): one
-- probe of the index below, which holds only the sponsored permits not settled yet (a handful at most, and
-- none where no payer uses the extension). Whether any other permit is open is asked only for a sponsored
-- claim (approval_nonce given), and stops at the first row of claims_payer_unsettled that counts.
CREATE INDEX claims_payer_upto_sponsored ON claims (lower(payer))
  WHERE kind = 'upto' AND settled_at IS NULL AND settlement_error IS NULL
    AND status IN ('claimed', 'captured', 'settling') AND authorization_payload ? 'permit2612';

CREATE OR REPLACE FUNCTION payer_upto_open(payer_l text, approval_nonce numeric) RETURNS text
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(3009, hashtext(payer_l));
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
    WHERE lower(k.payer) = payer_l AND k.kind IN ('eip3009', 'upto') AND k.kind = 'upto'
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
