-- WebSocket sessions on an endpoint's metered URL: null (the default) refuses an upgrade; an object holds the
-- session terms ({"max_message_bytes": n, "per_message_atomic": "n"}). A jsonb column, not a kind: the same
-- upstream origin serves its HTTP calls and its sessions, priced by the same usage pricing.
ALTER TABLE endpoints ADD COLUMN websocket jsonb;
