-- A signed-in call on a pass gets an x-receipt-id like any paid call; its receipt is its draw: what the
-- upstream answered, when, and (through the pass) the purchase whose settlement paid for it. Written once the
-- answer ended, never for a draw given back.
ALTER TABLE pass_draws ADD COLUMN receipt_id text;
ALTER TABLE pass_draws ADD COLUMN upstream_status integer;
ALTER TABLE pass_draws ADD COLUMN method text;
ALTER TABLE pass_draws ADD COLUMN served_at timestamptz;
CREATE UNIQUE INDEX pass_draws_receipt ON pass_draws (receipt_id) WHERE receipt_id IS NOT NULL;
