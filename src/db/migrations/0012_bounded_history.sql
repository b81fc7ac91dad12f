-- Bounded history: the retention job prunes idempotency keys after 24 h, webhook deliveries,
-- attempts and dispatched events after their retention, and claims once their proof is too old to be
-- accepted again; these indexes let each prune (and each reconcile range query) find its rows without a scan.

-- A claim may go while its call stays (calls are the owner's history): the call no longer points at a row.
-- Proof uniqueness does not rest on this key: the claim's primary key holds while a proof can be accepted,
-- the verifier refuses it after (too old), and calls.proof_key stays UNIQUE besides.
ALTER TABLE calls DROP CONSTRAINT IF EXISTS calls_proof_key_fkey;

CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (created_at) WHERE status <> 'pending';
CREATE INDEX events_dispatched ON events (created_at) WHERE dispatched_at IS NOT NULL;

-- Range reads over the money tables (reconcile by time, the claims prune): BRIN, a few pages per table and
-- next to nothing on the hot path's inserts, since these rows are written in time order.
CREATE INDEX claims_claimed_brin ON claims USING brin (claimed_at);
CREATE INDEX calls_created_brin ON calls USING brin (created_at);

-- Reconcile at scale: every query of a ranged or incremental run is served by an index. The chain's hashes
-- and addresses are compared lower-cased, so the indexes are on the same expressions.
CREATE INDEX claims_settlement_tx_lower ON claims (lower(settlement_tx)) WHERE settlement_tx IS NOT NULL;
CREATE INDEX payouts_tx_hash_lower ON payouts (lower(tx_hash));
CREATE INDEX payouts_confirmed ON payouts (confirmed_at) WHERE status = 'confirmed';
CREATE INDEX payouts_created ON payouts (created_at);
CREATE INDEX payouts_failed ON payouts (failed_at) WHERE failed_at IS NOT NULL;

-- Where the last clean reconcile got to: `npm run reconcile` checks what is new since (less a look-back for
-- claims that can still move), `--full` checks everything. One row per treasury + token.
CREATE TABLE reconcile_checkpoints (
  name              text PRIMARY KEY,
  -- The run covered claims, calls and payouts up to this time, and chain blocks up to to_block.
  to_time           timestamptz NOT NULL,
  to_block          bigint NOT NULL,
  -- The balance snapshots below cover the entries up to this id and the payouts confirmed before
  -- payouts_confirmed_before; the next incremental run adds only what came after.
  ledger_entry_id   bigint NOT NULL,
  payouts_confirmed_before timestamptz NOT NULL DEFAULT '1970-01-01T00:00:00Z',
  full_run          boolean NOT NULL,
  ran_at            timestamptz NOT NULL DEFAULT now()
);

-- Per account, the running totals recomputed from the entries as of the checkpoint (never copied from the
-- stored balances): an incremental reconcile checks stored = snapshot + what the entries added since, so its
-- cost follows what is new, not the account's history. The append-only totals cover entries up to
-- ledger_entry_id; paid out and refunded cover payouts confirmed before payouts_confirmed_before (a
-- confirmed payout's entries never change again). In flight is always recomputed (open payouts are few).
CREATE TABLE reconcile_balance_snapshots (
  account_id          text PRIMARY KEY,
  owner_share_atomic  bigint NOT NULL,
  fees_atomic         bigint NOT NULL,
  refunds_atomic      bigint NOT NULL,
  paid_out_atomic     bigint NOT NULL,
  refunded_atomic     bigint NOT NULL
);

-- The payout batcher locks the oldest payable entries (ORDER BY id LIMIT n): with the unpaid entries indexed
-- by wallet, the planner walked the primary key through every paid entry first (1.5 s at 2 M entries, in the
-- history bench). Indexed by id with the batcher's own predicate, the walk starts at the first unpaid one.
-- It replaces ledger_unpaid: what is owed per wallet is read from wallet_balances now.
DROP INDEX IF EXISTS ledger_unpaid;
CREATE INDEX ledger_payable ON ledger_entries (id)
  WHERE payout_id IS NULL AND kind IN ('owner_share', 'refund') AND wallet IS NOT NULL;

-- The settlement backlog (intake throttle, every second on every instance; readiness; gauges) reads the
-- captured x402 claims not settled yet: without an index of its own predicate that was a scan of every
-- claim ever made, once a second (found by the history bench's sequential-scan count).
CREATE INDEX claims_settlement_backlog ON claims (captured_at)
  WHERE kind = 'eip3009' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL;
