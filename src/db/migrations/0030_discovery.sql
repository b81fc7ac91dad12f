-- Discovery: an endpoint the owner lists appears in the bazaar extension of its 402, in /.well-known/x402.json
-- and in /discovery/resources; `discovery` holds what the owner declared (service name, tags, icon, schemas).
ALTER TABLE endpoints
  ADD COLUMN listed    boolean NOT NULL DEFAULT false,
  ADD COLUMN discovery jsonb;
-- The public listing pages through listed endpoints only: a partial index keeps it independent of the rest.
CREATE INDEX endpoints_listed ON endpoints (created_at, id)
  WHERE listed AND deleted_at IS NULL AND status = 'active';

-- What paid traffic observed, per endpoint per hour, added to by each instance's periodic flush: a listing
-- read sums at most 168 rows per endpoint however long the call history is. latency_buckets counts upstream
-- latencies in fixed buckets (src/discovery/observed.ts), from which p50 and p99 are read.
CREATE TABLE endpoint_hourly (
  endpoint_id     text NOT NULL,
  hour            timestamptz NOT NULL,
  paid_calls      bigint NOT NULL DEFAULT 0,
  succeeded       bigint NOT NULL DEFAULT 0,
  unserved        bigint NOT NULL DEFAULT 0,
  latency_buckets bigint[] NOT NULL,
  PRIMARY KEY (endpoint_id, hour)
);

-- Paid calls per payer per endpoint per day: repeat payers over 7 days are the payers with 2 or more calls.
CREATE TABLE endpoint_payer_days (
  endpoint_id text NOT NULL,
  day         date NOT NULL,
  payer       text NOT NULL,
  calls       bigint NOT NULL,
  PRIMARY KEY (endpoint_id, day, payer)
);
