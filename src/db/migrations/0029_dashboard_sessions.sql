-- Dashboard sign-in: an API key is exchanged for a session whose token lives only in an HttpOnly cookie.
-- Only the SHA-256 of the token is stored (a database read does not hand out sessions). A session is
-- tied to the key it was opened with: it ends with that key (rolled, grace period over), at expires_at,
-- or when revoked (logout).
CREATE TABLE dashboard_sessions (
  token_hash   bytea PRIMARY KEY,
  account_id   text NOT NULL REFERENCES accounts(id),
  key_id       text NOT NULL REFERENCES api_keys(id),
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  revoked_at   timestamptz,
  user_agent   text
);
-- An account's ended sessions are pruned when it signs in again (see pruneEndedSessions).
CREATE INDEX dashboard_sessions_account ON dashboard_sessions (account_id);
