-- Paid answers kept for the x402 `payment-identifier` extension: a client that lost the answer to a paid call
-- retries with the same identifier and the same payment and gets the stored answer instead of a refusal. A
-- row is reserved before the payment is claimed (so the same identifier with another payment is refused, on
-- any instance), filled once the answer is complete, and lives for a short TTL. Not money: the claim and the
-- call rows stay the only record of what was paid.
CREATE TABLE paid_answers (
  payment_id     text PRIMARY KEY,
  -- SHA-256 of the scheme payload (signature and authorization): "the same payment".
  payment_digest text NOT NULL,
  endpoint_id    text NOT NULL,
  -- pending: the call is in flight · stored: status/headers/body kept · not_stored: the answer was over the
  -- size bounds (or the total budget) · lost: the outcome is unknown (the upstream broke off).
  state          text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'stored', 'not_stored', 'lost')),
  status         integer,
  headers        jsonb,
  body           bytea,
  bytes          integer NOT NULL DEFAULT 0,
  expires_at     timestamptz NOT NULL
);
CREATE INDEX paid_answers_expiry ON paid_answers (expires_at);
