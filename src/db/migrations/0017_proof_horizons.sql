-- Retention by a stored horizon. The prune job deletes a closed claim once its proof is older than the
-- horizon; without a record of that horizon, a proof whose claim was pruned under a short chain.max_proof_age_ms
-- (or claims_margin_ms 0) was accepted again under a longer one and served twice. Now the job announces the
-- time before which proofs may have lost their claim (refused_before, only ever raised) and every verifier
-- refuses older proofs whatever its configuration; deletes go only below a cutoff announced at least one
-- propagation delay earlier (prunable_before), so every instance's cached copy knew it first.
CREATE TABLE proof_horizons (
  -- 'tx': a transaction's block time; 'eip3009': an authorization's validBefore.
  kind             text PRIMARY KEY CHECK (kind IN ('tx', 'eip3009')),
  refused_before   timestamptz NOT NULL,
  prunable_before  timestamptz NOT NULL,
  -- When refused_before was last raised: prunable_before takes its value once this is old enough.
  announced_at     timestamptz NOT NULL,
  -- The largest age (maximum proof age plus margin) any prune run used: for the operator.
  max_age_ms       bigint NOT NULL
);

-- The time the proof itself carries (a transaction's block time), in the chain's clock: the prune compares
-- it with the horizon in that same clock, so a chain whose timestamps run ahead of the database's clock
-- cannot have a claim pruned that its verifier still accepts. NULL on rows written before this column.
ALTER TABLE claims ADD COLUMN proof_at timestamptz;
