-- Running balances: GET /account and the payout batcher read one row instead of summing every
-- ledger entry an account ever had. The entries stay the source of truth; reconcile recomputes these rows
-- from them and reports any drift.
--
-- Why triggers, not UPDATEs in each books/ statement: every transition that moves money already writes
-- ledger_entries (append, link to a payout, unlink) or payouts.status, and a balance depends on both (an
-- owner share is "in flight" or "paid out" by its payout's status). Statement-level AFTER triggers on those
-- two tables see every such change, in the same statement and transaction, whoever writes it — a new
-- transition cannot forget its balance. They aggregate the statement's rows first (transition tables), so
-- the hot path's batched capture does ONE upsert per account it touches, not one per entry; rows are
-- upserted in key order, so two concurrent statements lock shared rows in the same order (no deadlock).
--
-- Why slots: with one row per account, every capture statement of a busy account waits for the previous
-- one's commit (its row lock is held through the WAL flush), which serialised the workers' batch writers:
-- measured with bench/history/trigger-cost.ts (4 writers, 4 captures a statement, one account) the
-- captures/s halved. So each account (and wallet) has up to SLOTS rows, one picked by the writing session
-- (backend pid): concurrent writers land on different rows, and a read sums at most SLOTS rows through the
-- primary key — a constant, whatever the history.

-- Stored totals per account, split over slots (a slot's part may be negative: a payout confirmed by another
-- session than the one that captured; the sum over an account's slots is ≥ 0 when the books are right).
--   owner_share, fees, refunds: every entry of that kind
--   paid_out / in_flight: owner shares whose payout is confirmed / pending or submitted
--   refunded: refunds whose payout is confirmed
-- captured = owner_share + fees; pending = owner_share − paid_out; refunds_pending = refunds − refunded.
CREATE TABLE account_balances (
  account_id          text NOT NULL,
  slot                smallint NOT NULL DEFAULT 0,
  owner_share_atomic  bigint NOT NULL DEFAULT 0,
  fees_atomic         bigint NOT NULL DEFAULT 0,
  refunds_atomic      bigint NOT NULL DEFAULT 0,
  paid_out_atomic     bigint NOT NULL DEFAULT 0,
  in_flight_atomic    bigint NOT NULL DEFAULT 0,
  refunded_atomic     bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (account_id, slot)
);

-- What each wallet is owed and not yet in a payout (unpaid owner shares and refunds): the payout batcher's
-- "is any wallet over the threshold" reads this instead of grouping every unpaid entry.
CREATE TABLE wallet_balances (
  wallet         text NOT NULL,
  slot           smallint NOT NULL DEFAULT 0,
  unpaid_atomic  bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (wallet, slot)
);

-- The slot of the writing session (8 per account: far more than the worker processes of one instance).
CREATE FUNCTION balance_slot() RETURNS smallint LANGUAGE sql STABLE AS $$ SELECT (pg_backend_pid() % 8)::smallint $$;

-- One row per account / wallet: what GET /account and the payout batcher read.
CREATE VIEW account_balance_totals AS
  SELECT account_id, sum(owner_share_atomic)::bigint AS owner_share_atomic, sum(fees_atomic)::bigint AS fees_atomic,
         sum(refunds_atomic)::bigint AS refunds_atomic, sum(paid_out_atomic)::bigint AS paid_out_atomic,
         sum(in_flight_atomic)::bigint AS in_flight_atomic, sum(refunded_atomic)::bigint AS refunded_atomic
  FROM account_balances GROUP BY account_id;
CREATE VIEW wallet_balance_totals AS
  SELECT wallet, sum(unpaid_atomic)::bigint AS unpaid_atomic FROM wallet_balances GROUP BY wallet;

-- Entries of one payout (confirm, fail, unlink, reconcile, the payouts trigger below): without it each of
-- those scanned the whole ledger. Partial: a fresh (unpaid) entry on the hot path adds no index tuple.
CREATE INDEX ledger_payout ON ledger_entries (payout_id) WHERE payout_id IS NOT NULL;

-- One ledger entry's effect (amount signed: + for a row that appears, − for one that goes), with the status
-- of the payout it is linked to (NULL if none).
CREATE TYPE balance_delta AS (
  account_id     text,
  wallet         text,
  kind           text,
  amount_atomic  bigint,
  linked         boolean,
  payout_status  text
);

-- The one definition of what an entry adds to the balances; the triggers only say which rows changed.
-- plpgsql, not sql: its statements' plans are cached per session (a multi-statement sql function is planned
-- again at every call, which measured as most of the trigger's cost on the hot path).
CREATE FUNCTION apply_balance_deltas(d balance_delta[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO account_balances AS b (account_id, slot, owner_share_atomic, fees_atomic, refunds_atomic,
                                     paid_out_atomic, in_flight_atomic, refunded_atomic)
  SELECT account_id, balance_slot(), owner_share, fees, refunds, paid_out, in_flight, refunded FROM (
    SELECT x.account_id,
           coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'owner_share'), 0)::bigint AS owner_share,
           coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'fee'), 0)::bigint AS fees,
           coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'refund'), 0)::bigint AS refunds,
           coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'owner_share' AND x.payout_status = 'confirmed'), 0)::bigint
             AS paid_out,
           coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'owner_share' AND x.payout_status IN ('pending', 'submitted')), 0)::bigint
             AS in_flight,
           coalesce(sum(x.amount_atomic) FILTER (WHERE x.kind = 'refund' AND x.payout_status = 'confirmed'), 0)::bigint
             AS refunded
    FROM unnest(d) x WHERE x.account_id IS NOT NULL GROUP BY x.account_id
  ) s
  -- A change that nets to nothing (a payout pending → submitted) takes no row lock.
  WHERE (owner_share, fees, refunds, paid_out, in_flight, refunded) <> (0, 0, 0, 0, 0, 0)
  ORDER BY account_id
  ON CONFLICT (account_id, slot) DO UPDATE SET
    owner_share_atomic = b.owner_share_atomic + EXCLUDED.owner_share_atomic,
    fees_atomic = b.fees_atomic + EXCLUDED.fees_atomic,
    refunds_atomic = b.refunds_atomic + EXCLUDED.refunds_atomic,
    paid_out_atomic = b.paid_out_atomic + EXCLUDED.paid_out_atomic,
    in_flight_atomic = b.in_flight_atomic + EXCLUDED.in_flight_atomic,
    refunded_atomic = b.refunded_atomic + EXCLUDED.refunded_atomic;

  INSERT INTO wallet_balances AS w (wallet, slot, unpaid_atomic)
  SELECT x.wallet, balance_slot(), sum(x.amount_atomic)::bigint FROM unnest(d) x
  WHERE x.wallet IS NOT NULL AND x.kind IN ('owner_share', 'refund') AND NOT x.linked
  GROUP BY x.wallet HAVING sum(x.amount_atomic) <> 0
  ORDER BY x.wallet
  ON CONFLICT (wallet, slot) DO UPDATE SET unpaid_atomic = w.unpaid_atomic + EXCLUDED.unpaid_atomic;
END $$;

CREATE FUNCTION ledger_entries_balances_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM apply_balance_deltas(ARRAY(
    SELECT ROW(n.account_id, n.wallet, n.kind, n.amount_atomic, n.payout_id IS NOT NULL, p.status)::balance_delta
    FROM new_rows n LEFT JOIN payouts p ON p.id = n.payout_id));
  RETURN NULL;
END $$;

-- Entries only ever move in or out of a payout (payout_id); the old row goes, the new row comes.
CREATE FUNCTION ledger_entries_balances_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM apply_balance_deltas(ARRAY(
    SELECT ROW(n.account_id, n.wallet, n.kind, n.amount_atomic, n.payout_id IS NOT NULL, p.status)::balance_delta
    FROM new_rows n LEFT JOIN payouts p ON p.id = n.payout_id
    UNION ALL
    SELECT ROW(o.account_id, o.wallet, o.kind, -o.amount_atomic, o.payout_id IS NOT NULL, p.status)::balance_delta
    FROM old_rows o LEFT JOIN payouts p ON p.id = o.payout_id));
  RETURN NULL;
END $$;

-- Entries are never deleted; if one ever is, the balances still follow.
CREATE FUNCTION ledger_entries_balances_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM apply_balance_deltas(ARRAY(
    SELECT ROW(o.account_id, o.wallet, o.kind, -o.amount_atomic, o.payout_id IS NOT NULL, p.status)::balance_delta
    FROM old_rows o LEFT JOIN payouts p ON p.id = o.payout_id));
  RETURN NULL;
END $$;

-- A payout's status change moves its linked entries between in flight, paid out and neither.
CREATE FUNCTION payouts_balances_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM apply_balance_deltas(ARRAY(
    SELECT ROW(e.account_id, e.wallet, e.kind, e.amount_atomic, true, n.status)::balance_delta
    FROM new_rows n JOIN old_rows o ON o.id = n.id AND o.status IS DISTINCT FROM n.status
    JOIN ledger_entries e ON e.payout_id = n.id
    UNION ALL
    SELECT ROW(e.account_id, e.wallet, e.kind, -e.amount_atomic, true, o.status)::balance_delta
    FROM new_rows n JOIN old_rows o ON o.id = n.id AND o.status IS DISTINCT FROM n.status
    JOIN ledger_entries e ON e.payout_id = n.id));
  RETURN NULL;
END $$;

CREATE TRIGGER ledger_entries_balances_insert AFTER INSERT ON ledger_entries
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_balances_insert();
CREATE TRIGGER ledger_entries_balances_update AFTER UPDATE ON ledger_entries
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_balances_update();
CREATE TRIGGER ledger_entries_balances_delete AFTER DELETE ON ledger_entries
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_balances_delete();
CREATE TRIGGER payouts_balances_update AFTER UPDATE ON payouts
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION payouts_balances_update();

-- The balances recomputed from the entries: the migration fills the stored rows from these, and reconcile
-- compares the stored rows against them (a scan of the ledger: the full reconcile, or a few accounts).
CREATE VIEW account_balances_recomputed AS
  SELECT e.account_id,
         coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0)::bigint AS owner_share_atomic,
         coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0)::bigint AS fees_atomic,
         coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund'), 0)::bigint AS refunds_atomic,
         coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status = 'confirmed'), 0)::bigint
           AS paid_out_atomic,
         coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status IN ('pending', 'submitted')), 0)::bigint
           AS in_flight_atomic,
         coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND p.status = 'confirmed'), 0)::bigint
           AS refunded_atomic
  FROM ledger_entries e LEFT JOIN payouts p ON p.id = e.payout_id
  WHERE e.account_id IS NOT NULL
  GROUP BY e.account_id;

CREATE VIEW wallet_balances_recomputed AS
  SELECT e.wallet, sum(e.amount_atomic)::bigint AS unpaid_atomic
  FROM ledger_entries e
  WHERE e.payout_id IS NULL AND e.kind IN ('owner_share', 'refund') AND e.wallet IS NOT NULL
  GROUP BY e.wallet;

-- Existing books: the balances as the entries say they are now.
INSERT INTO account_balances (account_id, owner_share_atomic, fees_atomic, refunds_atomic, paid_out_atomic,
                              in_flight_atomic, refunded_atomic)
  SELECT account_id, owner_share_atomic, fees_atomic, refunds_atomic, paid_out_atomic, in_flight_atomic,
         refunded_atomic
  FROM account_balances_recomputed;
INSERT INTO wallet_balances (wallet, unpaid_atomic)
  SELECT wallet, unpaid_atomic FROM wallet_balances_recomputed WHERE unpaid_atomic <> 0;

-- A ranged reconcile finds the entries created since its start through this: a BRIN index is a few pages
-- for the whole (append-only, time-ordered) ledger and costs the hot path's inserts next to nothing.
CREATE INDEX ledger_created_brin ON ledger_entries USING brin (created_at);
