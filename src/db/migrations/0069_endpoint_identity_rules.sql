-- Per-endpoint identity rules (docs/agent-identity.md): which verified agent, or unsigned caller, gets which
-- price. null: none, and the metered path reads no signature header.
ALTER TABLE endpoints ADD COLUMN identity_rules jsonb;
