-- History that stays small: the three tables that grow per paid call (calls, ledger_entries,
-- call_deliveries) become range-partitioned by month on created_at (UTC months), so an old month leaves the
-- database whole (archived, then detached and dropped: src/books/archive.ts) instead of row by row, and the
-- list and reconcile reads of a time range touch only the partitions it covers.
--
-- Each table is converted in place: renamed, a partitioned parent created with its columns, defaults and
-- checks, one partition per month from its oldest row to two months ahead plus a default partition (an
-- insert never fails for want of a partition; the leader's `partitions` job moves such rows into their
-- month), the rows copied, the old table dropped, then keys and indexes built on the parent.
--
-- A unique index of a partitioned table must contain the partition key, so:
-- - calls: primary key (id, created_at). id is 128 random bits (src/ids.ts), never reused. The former
--   UNIQUE (proof_key) is a plain index now: one call per proof is kept by the claim, which has one row per
--   proof (claims.proof_key is the primary key of an unpartitioned table) and writes its call only in the
--   statement that moves it claimed → captured (or inserts it, for a voucher), exactly once. Its ledger
--   entries rested on that alone already. receipt_id (random) likewise is a plain index.
-- - ledger_entries: primary key (id, created_at); id comes from one sequence.
-- - call_deliveries: primary key (receipt_id, created_at); created_at is the delivery time recorded in
--   memory when the answer was delivered, so a retried flush carries the same pair to the same partition
--   and ON CONFLICT (receipt_id, created_at) still makes it a no-op.

-- Creates the month partition of `parent` holding [month, month + 1 month) in UTC, if missing, moving any
-- rows of that month out of the default partition first (attaching would fail on them). Returns whether it
-- created one. Used here and by the partitions job (src/db/partitions.ts).
CREATE FUNCTION history_month_partition(parent text, month date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  m date := date_trunc('month', month)::date;
  part text := parent || '_' || to_char(m, 'YYYY_MM');
  lo timestamptz := m::timestamp AT TIME ZONE 'UTC';
  hi timestamptz := (m + interval '1 month')::timestamp AT TIME ZONE 'UTC';
BEGIN
  IF to_regclass(part) IS NOT NULL THEN
    RETURN false;
  END IF;
  EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part, parent);
  -- Rows of that month that landed in the default partition move into the new one (a statement on the
  -- partitions themselves: the parent's statement triggers, the running balances, do not fire, and the
  -- rows stay the same rows, so no balance moves).
  EXECUTE format(
    'WITH moved AS (DELETE FROM %I WHERE created_at >= %L AND created_at < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
    parent || '_default', lo, hi, part);
  -- The check lets ATTACH skip its validation scan of the new partition.
  EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L)',
    part, part || '_range', lo, hi);
  EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, part, lo, hi);
  EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
  RETURN true;
END $$;

-- Month partitions from the oldest row of `old_table` (or now) to two months ahead, and the default one.
CREATE FUNCTION history_partitions_for(parent text, old_table text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  first_month date;
  m date;
BEGIN
  EXECUTE format('SELECT date_trunc(''month'', min(created_at) AT TIME ZONE ''UTC'')::date FROM %I', old_table)
    INTO first_month;
  first_month := least(coalesce(first_month, current_date), date_trunc('month', now() AT TIME ZONE 'UTC')::date);
  EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', parent || '_default', parent);
  m := first_month;
  WHILE m <= (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '2 months')::date LOOP
    PERFORM history_month_partition(parent, m);
    m := (m + interval '1 month')::date;
  END LOOP;
END $$;

-- The balance views read ledger_entries; dropped and made again below (account_balances_recomputed then
-- also counts the archived months' sums).
DROP VIEW account_balances_recomputed;
DROP VIEW wallet_balances_recomputed;

-- calls ---------------------------------------------------------------------------------------------------
ALTER TABLE calls RENAME TO calls_unpartitioned;
CREATE TABLE calls (LIKE calls_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (created_at);
SELECT history_partitions_for('calls', 'calls_unpartitioned');
INSERT INTO calls SELECT * FROM calls_unpartitioned;
DROP TABLE calls_unpartitioned;
ALTER TABLE calls ADD CONSTRAINT calls_pkey PRIMARY KEY (id, created_at);
CREATE INDEX calls_proof_key ON calls (proof_key);
CREATE INDEX calls_receipt ON calls (receipt_id) WHERE receipt_id IS NOT NULL;
CREATE INDEX calls_account ON calls (account_id, created_at DESC, id DESC);
CREATE INDEX calls_endpoint ON calls (endpoint_id, created_at DESC, id DESC);
CREATE INDEX calls_account_tool ON calls (account_id, tool, created_at DESC) WHERE tool IS NOT NULL;
CREATE INDEX calls_created_brin ON calls USING brin (created_at);

-- ledger_entries ------------------------------------------------------------------------------------------
-- The id sequence outlives the old table (dropping a table drops the sequences it owns).
ALTER SEQUENCE ledger_entries_id_seq OWNED BY NONE;
ALTER TABLE ledger_entries RENAME TO ledger_entries_unpartitioned;
CREATE TABLE ledger_entries (LIKE ledger_entries_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (created_at);
SELECT history_partitions_for('ledger_entries', 'ledger_entries_unpartitioned');
-- Copied into the new table before its triggers exist: the running balances already count these rows.
INSERT INTO ledger_entries SELECT * FROM ledger_entries_unpartitioned;
DROP TABLE ledger_entries_unpartitioned;
ALTER SEQUENCE ledger_entries_id_seq OWNED BY ledger_entries.id;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (id, created_at);
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_payout_id_fkey
  FOREIGN KEY (payout_id) REFERENCES payouts(id);
CREATE INDEX ledger_account ON ledger_entries (account_id, kind);
CREATE INDEX ledger_source ON ledger_entries (source_type, source_id);
CREATE INDEX ledger_payout ON ledger_entries (payout_id) WHERE payout_id IS NOT NULL;
CREATE INDEX ledger_payable ON ledger_entries (id)
  WHERE payout_id IS NULL AND kind IN ('owner_share', 'refund') AND wallet IS NOT NULL;
CREATE INDEX ledger_created_brin ON ledger_entries USING brin (created_at);
-- Statement triggers on the parent see the rows of every partition a statement touched.
CREATE TRIGGER ledger_entries_balances_insert AFTER INSERT ON ledger_entries
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_balances_insert();
CREATE TRIGGER ledger_entries_balances_update AFTER UPDATE ON ledger_entries
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_balances_update();
CREATE TRIGGER ledger_entries_balances_delete AFTER DELETE ON ledger_entries
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_balances_delete();

-- call_deliveries -----------------------------------------------------------------------------------------
ALTER TABLE call_deliveries RENAME TO call_deliveries_unpartitioned;
CREATE TABLE call_deliveries (LIKE call_deliveries_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (created_at);
SELECT history_partitions_for('call_deliveries', 'call_deliveries_unpartitioned');
INSERT INTO call_deliveries SELECT * FROM call_deliveries_unpartitioned;
DROP TABLE call_deliveries_unpartitioned;
ALTER TABLE call_deliveries ADD CONSTRAINT call_deliveries_pkey PRIMARY KEY (receipt_id, created_at);
CREATE INDEX call_deliveries_created ON call_deliveries USING brin (created_at);

DROP FUNCTION history_partitions_for(text, text);

-- Archived months ------------------------------------------------------------------------------------------
-- What an archived month of the ledger summed to, per account, kind and payout (src/books/archive.ts writes
-- it in the transaction that drops the month): the balances recomputed for reconcile count these sums in
-- place of the entries that left, so archiving moves no balance. Every archived entry was paid by a
-- confirmed payout (or is a fee): nothing unpaid is ever archived.
CREATE TABLE archived_ledger_sums (
  month          date NOT NULL,
  account_id     text,
  kind           text NOT NULL,
  wallet         text,
  payout_id      text REFERENCES payouts(id),
  entries        bigint NOT NULL,
  amount_atomic  bigint NOT NULL
);
CREATE INDEX archived_ledger_sums_account ON archived_ledger_sums (account_id);
CREATE INDEX archived_ledger_sums_payout ON archived_ledger_sums (payout_id) WHERE payout_id IS NOT NULL;

-- One row per archived month of each table: where its file went and what it held.
CREATE TABLE archived_months (
  table_name   text NOT NULL,
  month        date NOT NULL,
  rows         bigint NOT NULL,
  sha256       text NOT NULL,
  file         text NOT NULL,
  archived_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (table_name, month)
);

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
  FROM (SELECT account_id, kind, amount_atomic, payout_id FROM ledger_entries
        UNION ALL
        SELECT account_id, kind, amount_atomic, payout_id FROM archived_ledger_sums) e
  LEFT JOIN payouts p ON p.id = e.payout_id
  WHERE e.account_id IS NOT NULL
  GROUP BY e.account_id;

CREATE VIEW wallet_balances_recomputed AS
  SELECT e.wallet, sum(e.amount_atomic)::bigint AS unpaid_atomic
  FROM ledger_entries e
  WHERE e.payout_id IS NULL AND e.kind IN ('owner_share', 'refund') AND e.wallet IS NOT NULL
  GROUP BY e.wallet;
