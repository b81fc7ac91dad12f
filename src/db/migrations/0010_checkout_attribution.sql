-- Checkout attribution: a plain USDC transfer to the treasury is matched to a payment by its exact
-- amount. Each payment asks for its price plus a small offset (amount_requested_atomic), and that figure is
-- reserved in checkout_amounts (one row per figure: the primary key makes it unique). While the payment is
-- open held_until is NULL; when it closes (paid, expired, canceled) the figure stays bound to it until
-- held_until, so a late or repeated transfer of it still reaches that payment (and is refunded) instead of
-- paying someone else's order. A figure is reused only after its hold.
ALTER TABLE payments ADD COLUMN amount_requested_atomic bigint;
UPDATE payments SET amount_requested_atomic = amount_atomic;
ALTER TABLE payments ALTER COLUMN amount_requested_atomic SET NOT NULL;
ALTER TABLE payments ADD CONSTRAINT payments_requested_covers_amount CHECK (amount_requested_atomic >= amount_atomic);
ALTER TABLE payments ADD COLUMN cancel_url text;
ALTER TABLE payments ADD COLUMN logo_url text;

CREATE TABLE checkout_amounts (
  amount_atomic  bigint PRIMARY KEY CHECK (amount_atomic > 0),
  payment_id     text NOT NULL REFERENCES payments(id),
  reserved_at    timestamptz NOT NULL DEFAULT now(),
  held_until     timestamptz
);
CREATE INDEX checkout_amounts_payment ON checkout_amounts (payment_id);

-- Transfers to the treasury that no payment's figure matched and no proof had claimed when the watcher saw
-- them. Never silently kept: the operator lists them (a later claim of the same hash, e.g. a metered call
-- presenting it, resolves the row), and the reconcile counts them.
CREATE TABLE unmatched_inflows (
  tx_hash        text PRIMARY KEY,
  payer          text NOT NULL,
  amount_atomic  bigint NOT NULL CHECK (amount_atomic > 0),
  block_number   bigint NOT NULL,
  seen_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX unmatched_inflows_seen ON unmatched_inflows (seen_at DESC);

-- Where the treasury watcher stopped, so transfers sent while no instance ran are matched after a restart.
CREATE TABLE watcher_cursors (
  name        text PRIMARY KEY,
  next_block  bigint NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now()
);
