-- x402 batch-settlement: pay once into a channel, call many with cumulative vouchers.
-- An endpoint offers the scheme only when its owner turns it on.
ALTER TABLE endpoints ADD COLUMN batch_settlement boolean NOT NULL DEFAULT false;

-- A call paid by a voucher is a claim of kind 'batch' (proof key batch:<channel id>:<cumulative>): the
-- claims primary key is what makes a voucher increment serve once across instances.
ALTER TABLE claims DROP CONSTRAINT claims_kind_check;
ALTER TABLE claims ADD CONSTRAINT claims_kind_check CHECK (kind IN ('tx', 'eip3009', 'batch'));

-- One row per channel (id = the EIP-712 channel id, lower-case hex). balance: deposits confirmed on chain
-- minus refunds. charged: the cumulative amount accepted for calls (vouchers served or being served).
-- signed_max + signature: the highest voucher the payer signed (what a claim submits). claimed: the
-- totalClaimed tollgate's own claims reached on chain.
CREATE TABLE batch_channels (
  channel_id        text PRIMARY KEY,
  config            jsonb NOT NULL,
  payer             text NOT NULL,
  balance_atomic    bigint NOT NULL DEFAULT 0 CHECK (balance_atomic >= 0),
  charged_atomic    bigint NOT NULL DEFAULT 0 CHECK (charged_atomic >= 0),
  signed_max_atomic bigint NOT NULL DEFAULT 0,
  signature         text,
  claimed_atomic    bigint NOT NULL DEFAULT 0,
  refunded_atomic   bigint NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  CHECK (charged_atomic <= balance_atomic),
  CHECK (claimed_atomic <= charged_atomic)
);

-- Deposits and cooperative refunds are sent by the leader (treasury nonce discipline); the request that
-- asked for one waits for its row to be done. id: a deposit's ERC-3009 nonce (one deposit per
-- authorization, so a replayed deposit payload credits nothing twice), or a refund's own id.
CREATE TABLE batch_channel_ops (
  id             text PRIMARY KEY,
  channel_id     text NOT NULL REFERENCES batch_channels (channel_id),
  kind           text NOT NULL CHECK (kind IN ('deposit', 'refund')),
  amount_atomic  bigint NOT NULL CHECK (amount_atomic > 0),
  calldata       text NOT NULL,
  status         text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'done', 'failed')),
  tx_hash        text,
  error          text,
  done_atomic    bigint,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX batch_channel_ops_open ON batch_channel_ops (created_at) WHERE status IN ('pending', 'sent');

-- Claim transactions (one for many channels): what each covered, for reconcile and for the receipt wait.
CREATE TABLE batch_claims (
  id           text PRIMARY KEY,
  tx_hash      text,
  status       text NOT NULL DEFAULT 'sent' CHECK (status IN ('sent', 'done', 'failed')),
  entries      jsonb NOT NULL,
  total_atomic bigint NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
