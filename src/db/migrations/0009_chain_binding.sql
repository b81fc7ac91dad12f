-- The chain a database was made on. Proofs, claims and payouts only mean something on that chain: a
-- database pointed at another one (a fresh dev chain reproduces old transaction hashes) is refused at start.
CREATE TABLE IF NOT EXISTS chain_binding (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  chain_id integer NOT NULL,
  usdc_address text NOT NULL,
  genesis_hash text NOT NULL,
  bound_at timestamptz NOT NULL DEFAULT now()
);
