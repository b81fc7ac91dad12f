-- Paid MCP tools in discovery. The tools an MCP server listed (name, description, input schema), as the last
-- complete `tools/list` answer that passed through tollgate for a listed endpoint showed them: the listing
-- and the bazaar extension of each tool's 402 describe a tool with them. Kept apart from `endpoints` so that
-- the server's answer never bumps the owner's `updated_at`.
CREATE TABLE mcp_tool_catalogs (
  endpoint_id text PRIMARY KEY,
  -- [{name, description?, input_schema}], bounded by src/mcp/tool-catalog.ts
  tools       jsonb NOT NULL,
  seen_at     timestamptz NOT NULL
);

-- What paid traffic observed per MCP tool, as endpoint_hourly and endpoint_payer_days do per endpoint (an
-- MCP endpoint's paid calls are counted in both). `tool` is a name the merchant priced or the server
-- listed, else "other": a client cannot grow these tables by naming tools.
CREATE TABLE tool_hourly (
  endpoint_id     text NOT NULL,
  tool            text NOT NULL,
  hour            timestamptz NOT NULL,
  paid_calls      bigint NOT NULL DEFAULT 0,
  succeeded       bigint NOT NULL DEFAULT 0,
  unserved        bigint NOT NULL DEFAULT 0,
  latency_buckets bigint[] NOT NULL,
  PRIMARY KEY (endpoint_id, tool, hour)
);

CREATE TABLE tool_payer_days (
  endpoint_id text NOT NULL,
  tool        text NOT NULL,
  day         date NOT NULL,
  payer       text NOT NULL,
  calls       bigint NOT NULL,
  PRIMARY KEY (endpoint_id, tool, day, payer)
);

-- Not MCP: the one statement that wrote a claim (or took it over), named by a token the batch writer gives
-- it. A claim statement that fails without an answer may have committed; its request was answered 503 and
-- forwarded nothing, so the writer releases that attempt by its token once the database answers again
-- (releaseUnacknowledgedClaims) instead of leaving the proof held by nobody until its window ends.
ALTER TABLE claims ADD COLUMN attempt_token text;
