-- Nonces of verified Web Bot Auth / RFC 9421 signatures, each accepted once across every instance while the
-- signature is valid (its `expires`). Not money: a replayed signature is only treated as unsigned.
CREATE TABLE identity_nonces (
  -- signer key id and nonce: two agents may pick the same nonce, one agent may not reuse it.
  nonce_key  text PRIMARY KEY,
  expires_at timestamptz NOT NULL
);
CREATE INDEX identity_nonces_expiry ON identity_nonces (expires_at);
