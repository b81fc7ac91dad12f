-- MCP endpoints: an endpoint with an `mcp` document prices JSON-RPC `tools/call` by tool name (null: an
-- HTTP endpoint priced by its `pricing`). A call row records the tool a paid `tools/call` named.
ALTER TABLE endpoints ADD COLUMN mcp jsonb;
ALTER TABLE calls ADD COLUMN tool text;
CREATE INDEX calls_account_tool ON calls (account_id, tool, created_at DESC) WHERE tool IS NOT NULL;
