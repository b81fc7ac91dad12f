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
-- claims call it; its scan is payer_reserved's first, on claims_payer_unsettled (migration 0079).
--
-- approval_nonce: the token's EIP-2612 nonce of the payer as the chain shows it now (the new sponsored
-- permit's approval, checked equal to it), or NULL. A sponsored permit whose approval nonce is below it, and
-- whose settlement transaction tollgate sent, was settled by that transaction (the approval and the transfer
-- go together, or neither does): only the booking is behind (the settler marks its block a moment after the
-- answer). It holds no allowance any more and is not counted, so a payer paying one call after another with
-- approvals is not refused while the previous settlement is being booked.
CREATE OR REPLACE FUNCTION payer_upto_open(payer_l text, approval_nonce numeric) RETURNS text
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  open_count bigint;
  sponsored boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(3009, hashtext(payer_l));
  SELECT count(*), coalesce(bool_or(k.authorization_payload ? 'permit2612'), false)
  INTO open_count, sponsored
  FROM claims k
  WHERE lower(k.payer) = payer_l AND k.kind IN ('eip3009', 'upto') AND k.kind = 'upto'
    AND k.settled_at IS NULL AND k.settlement_error IS NULL AND k.status IN ('claimed', 'captured', 'settling')
    AND NOT (k.status = 'claimed' AND k.lease_until IS NULL AND k.releases = k.attempts)
    AND k.horizon_at < 'infinity'
    AND NOT (approval_nonce IS NOT NULL AND k.settlement_tx IS NOT NULL
             AND (k.authorization_payload->'permit2612'->>'nonce')::numeric < approval_nonce);
  RETURN CASE WHEN sponsored THEN 'sponsored' WHEN open_count > 0 THEN 'open' ELSE 'none' END;
END $$;
