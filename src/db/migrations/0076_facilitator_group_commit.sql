-- A facilitator settlement the claiming process sends itself, in its own settlement group commit
-- (control-plane/facilitator-settler.ts): the leader's settlement batch leaves its claim alone for a few
-- seconds, the time that process takes to record its transaction on it. Without one (no settler slot, no
-- gas), the leader's next batch sends it at once, as before.
ALTER TABLE facilitator_settlements ADD COLUMN group_commit boolean NOT NULL DEFAULT false;
