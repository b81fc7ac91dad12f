-- Payouts: a payout row is written with its treasury, nonce, signed transaction and hash BEFORE it
-- is broadcast, so a restart can ask the chain what became of it instead of sending again.
ALTER TABLE payouts ADD COLUMN treasury text;
ALTER TABLE payouts ADD COLUMN raw_tx text;
-- Hashes of earlier signings of the same nonce (a fee bump); at most one of them can ever be mined.
ALTER TABLE payouts ADD COLUMN previous_tx_hashes text[] NOT NULL DEFAULT '{}';
ALTER TABLE payouts ADD COLUMN block_number bigint;
ALTER TABLE payouts ADD COLUMN failed_at timestamptz;
-- A failed payout's wallet waits until retry_at before its entries are batched again (backoff).
ALTER TABLE payouts ADD COLUMN retry_at timestamptz;

-- One transaction per treasury nonce: two batchers can never record two payouts on the same nonce.
CREATE UNIQUE INDEX payouts_treasury_nonce ON payouts (treasury, nonce);
CREATE INDEX payouts_open ON payouts (treasury, nonce) WHERE status IN ('pending', 'submitted');
CREATE INDEX payouts_wallet ON payouts (wallet, created_at DESC);
CREATE INDEX payouts_tx_hash ON payouts (tx_hash);

-- Which accounts a payout pays (owner shares) or refunds for; kept when a failed payout's entries are
-- unlinked for a retry, so an account still sees its failed payouts.
CREATE TABLE payout_accounts (
  payout_id           text NOT NULL REFERENCES payouts(id),
  account_id          text NOT NULL,
  owner_share_atomic  bigint NOT NULL DEFAULT 0,
  refund_atomic       bigint NOT NULL DEFAULT 0,
  entries_count       integer NOT NULL,
  PRIMARY KEY (account_id, payout_id)
);
CREATE INDEX payout_accounts_payout ON payout_accounts (payout_id);
