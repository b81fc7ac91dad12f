-- What a paid answer delivered (SHA-256 of the body as sent, its length), for its signed final receipt.
-- Written with the discovery counts a few seconds after the answer ended; the call row is never updated.
CREATE TABLE call_deliveries (
  receipt_id  text PRIMARY KEY,
  body_sha256 text NOT NULL,
  body_bytes  bigint NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX call_deliveries_created ON call_deliveries USING brin (created_at);
