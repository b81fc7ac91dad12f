-- tollgate schema. Money is BIGINT USDC base units (6 decimals) everywhere; never numeric or float.

CREATE TABLE accounts (
  id              text PRIMARY KEY,
  wallet_address  text NOT NULL,
  business_name   text NOT NULL,
  mode            text NOT NULL CHECK (mode IN ('test', 'live')),
  created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  id          text PRIMARY KEY,
  account_id  text NOT NULL REFERENCES accounts(id),
  key_hash    bytea NOT NULL UNIQUE,
  hint        text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  -- A rolled key keeps working until expires_at (grace period); NULL = no expiry.
  expires_at  timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id);

CREATE TABLE idempotency_keys (
  account_id     text NOT NULL,
  key            text NOT NULL,
  request_hash   text NOT NULL,
  status_code    integer,
  response_body  text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, key)
);

CREATE TABLE endpoints (
  id                text PRIMARY KEY,
  account_id        text NOT NULL REFERENCES accounts(id),
  name              text,
  description       text,
  upstream_url      text NOT NULL,
  upstream_headers  jsonb NOT NULL DEFAULT '{}'::jsonb,
  price_atomic      bigint NOT NULL CHECK (price_atomic > 0),
  -- Quoted price holds: a proof ≥ quote_floor_atomic is accepted until quote_floor_until (lowest recent price).
  quote_floor_atomic bigint,
  quote_floor_until  timestamptz,
  timeout_ms        integer,
  status            text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
  version           integer NOT NULL DEFAULT 1,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  deleted_at        timestamptz
);
CREATE INDEX endpoints_account ON endpoints (account_id, created_at DESC, id DESC);

-- One row per payment proof ever presented and accepted: the primary key is what makes a proof pay once,
-- on any instance. proof_key is 'tx:<hash>' for a transaction hash or 'auth:<chain>:<token>:<from>:<nonce>'
-- for an EIP-3009 authorization.
CREATE TABLE claims (
  proof_key       text PRIMARY KEY,
  kind            text NOT NULL CHECK (kind IN ('tx', 'eip3009')),
  target_type     text NOT NULL CHECK (target_type IN ('call', 'payment')),
  target_id       text NOT NULL,
  account_id      text NOT NULL,
  payer           text NOT NULL,
  amount_atomic   bigint NOT NULL CHECK (amount_atomic >= 0),
  -- claimed → captured | refund_due → refunded (the payout batcher sends refunds).
  status          text NOT NULL CHECK (status IN ('claimed', 'captured', 'refund_due', 'refunded', 'applied')),
  -- An uncaptured proof may be retried on the same target until retry_until; lease_until marks the one
  -- request currently forwarding it, so a proof is never forwarded twice at once.
  retry_until     timestamptz,
  lease_until     timestamptz,
  attempts        integer NOT NULL DEFAULT 1,
  authorization_payload jsonb,
  settlement_tx   text,
  claimed_at      timestamptz NOT NULL DEFAULT now(),
  captured_at     timestamptz
);
CREATE INDEX claims_uncaptured ON claims (retry_until) WHERE status = 'claimed';
CREATE INDEX claims_unsettled ON claims (claimed_at) WHERE kind = 'eip3009' AND settlement_tx IS NULL;

CREATE TABLE calls (
  id                  text PRIMARY KEY,
  proof_key           text NOT NULL UNIQUE REFERENCES claims(proof_key),
  endpoint_id         text NOT NULL,
  account_id          text NOT NULL,
  payer               text NOT NULL,
  amount_atomic       bigint NOT NULL,
  owner_share_atomic  bigint NOT NULL,
  fee_atomic          bigint NOT NULL,
  upstream_status     integer NOT NULL,
  method              text NOT NULL,
  created_at          timestamptz NOT NULL DEFAULT now(),
  CHECK (owner_share_atomic + fee_atomic = amount_atomic)
);
CREATE INDEX calls_account ON calls (account_id, created_at DESC, id DESC);
CREATE INDEX calls_endpoint ON calls (endpoint_id, created_at DESC, id DESC);

CREATE TABLE payments (
  id                      text PRIMARY KEY,
  account_id              text NOT NULL REFERENCES accounts(id),
  amount_atomic           bigint NOT NULL CHECK (amount_atomic > 0),
  amount_received_atomic  bigint NOT NULL DEFAULT 0,
  description             text NOT NULL,
  metadata                jsonb NOT NULL DEFAULT '{}'::jsonb,
  status                  text NOT NULL CHECK (status IN ('pending', 'paid', 'expired', 'canceled')),
  success_url             text,
  expires_at              timestamptz NOT NULL,
  paid_at                 timestamptz,
  transaction             text,
  payer                   text,
  canceled_at             timestamptz,
  created_at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payments_account ON payments (account_id, created_at DESC, id DESC);
CREATE INDEX payments_pending_expiry ON payments (expires_at) WHERE status = 'pending';

CREATE TABLE payment_timeline (
  id          bigserial PRIMARY KEY,
  payment_id  text NOT NULL REFERENCES payments(id),
  type        text NOT NULL,
  data        jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_timeline_payment ON payment_timeline (payment_id, id);

CREATE TABLE payouts (
  id              text PRIMARY KEY,
  wallet          text NOT NULL,
  amount_atomic   bigint NOT NULL CHECK (amount_atomic > 0),
  kind            text NOT NULL DEFAULT 'payout' CHECK (kind IN ('payout', 'refund', 'mixed')),
  -- pending (recorded with its nonce, not yet broadcast) → submitted → confirmed | failed
  status          text NOT NULL CHECK (status IN ('pending', 'submitted', 'confirmed', 'failed')),
  nonce           bigint,
  tx_hash         text,
  entries_count   integer NOT NULL DEFAULT 0,
  attempts        integer NOT NULL DEFAULT 0,
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  submitted_at    timestamptz,
  confirmed_at    timestamptz
);
CREATE INDEX payouts_status ON payouts (status, created_at);

-- Double-entry-ish book: each captured amount is split into entries that sum to it exactly.
-- kind: owner_share (to an owner's wallet), fee (kept by the treasury), refund (back to a payer).
CREATE TABLE ledger_entries (
  id             bigserial PRIMARY KEY,
  account_id     text,
  kind           text NOT NULL CHECK (kind IN ('owner_share', 'fee', 'refund')),
  wallet         text,
  amount_atomic  bigint NOT NULL CHECK (amount_atomic >= 0),
  source_type    text NOT NULL CHECK (source_type IN ('call', 'payment', 'claim')),
  source_id      text NOT NULL,
  payout_id      text REFERENCES payouts(id),
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_unpaid ON ledger_entries (wallet) WHERE payout_id IS NULL AND kind <> 'fee';
CREATE INDEX ledger_account ON ledger_entries (account_id, kind);
CREATE INDEX ledger_source ON ledger_entries (source_type, source_id);

-- Transactional outbox: written in the same transaction as the state change it reports.
CREATE TABLE events (
  id          text PRIMARY KEY,
  account_id  text NOT NULL,
  type        text NOT NULL,
  data        jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  -- Set once fan-out to the account's webhooks has created delivery rows.
  dispatched_at timestamptz
);
CREATE INDEX events_account ON events (account_id, created_at DESC, id DESC);
CREATE INDEX events_undispatched ON events (created_at) WHERE dispatched_at IS NULL;

CREATE TABLE webhooks (
  id                          text PRIMARY KEY,
  account_id                  text NOT NULL REFERENCES accounts(id),
  url                         text NOT NULL,
  events                      text[] NOT NULL,
  secret                      text NOT NULL,
  previous_secret             text,
  previous_secret_expires_at  timestamptz,
  status                      text NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
  disabled_reason             text,
  failing_since               timestamptz,
  created_at                  timestamptz NOT NULL DEFAULT now(),
  deleted_at                  timestamptz
);
CREATE INDEX webhooks_account ON webhooks (account_id, created_at DESC, id DESC);

-- One row per (event, webhook): the unit of at-least-once delivery.
CREATE TABLE webhook_deliveries (
  id               text PRIMARY KEY,
  event_id         text NOT NULL REFERENCES events(id),
  webhook_id       text NOT NULL REFERENCES webhooks(id),
  status           text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts         integer NOT NULL DEFAULT 0,
  next_attempt_at  timestamptz NOT NULL DEFAULT now(),
  locked_until     timestamptz,
  delivered_at     timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at DESC);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);

CREATE TABLE webhook_attempts (
  id              bigserial PRIMARY KEY,
  delivery_id     text NOT NULL REFERENCES webhook_deliveries(id),
  webhook_id      text NOT NULL,
  event_id        text NOT NULL,
  attempted_at    timestamptz NOT NULL DEFAULT now(),
  status_code     integer,
  latency_ms      integer,
  error           text,
  next_attempt_at timestamptz
);
CREATE INDEX webhook_attempts_webhook ON webhook_attempts (webhook_id, id DESC);

-- Where the chain watcher has read up to (one row per network + token + treasury).
CREATE TABLE chain_cursors (
  name        text PRIMARY KEY,
  block       bigint NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now()
);
