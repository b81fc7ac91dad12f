-- Passes ("pay once, access many"): an endpoint may sell a pass of N calls, T seconds, or both, at a price.
-- The purchase is an ordinary paid call (claim captured, call row with method PASS, owner share and fee in
-- the ledger); the pass row is opened from that captured claim, once (proof_key is unique). Later calls sign
-- in with the buyer's wallet (x402 `sign-in-with-x`) and draw one use in PostgreSQL, exactly across
-- instances: uses_left only moves down by a draw whose precondition is in its UPDATE, and back up by one when
-- the upstream certainly did not serve the call.
ALTER TABLE endpoints ADD COLUMN pass jsonb;

CREATE TABLE passes (
  id            text PRIMARY KEY,
  -- The purchase's claim (and call): one pass per paid purchase, whatever the retries.
  proof_key     text NOT NULL UNIQUE,
  call_id       text NOT NULL,
  endpoint_id   text NOT NULL,
  account_id    text NOT NULL,
  -- Lower-case 0x address: the wallet that paid, and the only one that may sign in to draw.
  payer         text NOT NULL,
  price_atomic  bigint NOT NULL CHECK (price_atomic > 0),
  -- NULL: a pass of time only (no count of calls).
  calls_total   integer CHECK (calls_total > 0),
  uses_left     integer CHECK (uses_left >= 0),
  -- 'infinity' for a pass of calls only.
  expires_at    timestamptz NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  CHECK ((calls_total IS NULL) = (uses_left IS NULL)),
  CHECK (uses_left IS NULL OR uses_left <= calls_total)
);
CREATE INDEX passes_holder ON passes (endpoint_id, payer, expires_at);

-- Sign-in messages used once (the spec's nonce uniqueness, across instances), with the random token of the
-- request that used it: a request whose draw statement failed in flight (the database restarted) asks
-- whether its own statement committed, and gives the use back if it did. A row can go once its message is
-- too old to be accepted anyway.
CREATE TABLE sign_in_nonces (
  nonce       text PRIMARY KEY,
  token       text NOT NULL,
  expires_at  timestamptz NOT NULL
);
CREATE INDEX sign_in_nonces_expiry ON sign_in_nonces (expires_at);

-- One row per use drawn, by its sign-in nonce: what a pass's count is made of (calls_total - uses_left =
-- draws not given back), checked by reconcile.
CREATE TABLE pass_draws (
  nonce       text PRIMARY KEY,
  pass_id     text NOT NULL REFERENCES passes(id),
  given_back  boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pass_draws_pass ON pass_draws (pass_id);
