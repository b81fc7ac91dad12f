-- The facilitator's discovery catalog: a v2 payment settled through /api/v1/facilitator/settle whose payload
-- carries the x402 `bazaar` extension lists its resource in /discovery/resources, as the CDP facilitator's
-- catalog does. One row per (account, resource URL), refreshed by each payment that names it (the latest
-- requirements and extension win); listed once one of its settlements is mined (settled_at), with figures
-- read from the settlements that name it (facilitator_settlements.resource_url).
ALTER TABLE facilitator_settlements ADD COLUMN resource_url text;
CREATE INDEX facilitator_settlements_resource
  ON facilitator_settlements (account_id, resource_url, created_at) WHERE resource_url IS NOT NULL;

CREATE TABLE facilitator_resources (
  account_id    text NOT NULL REFERENCES accounts(id),
  resource_url  text NOT NULL,
  -- The bazaar info's input type: an HTTP resource or an MCP tool.
  type          text NOT NULL CHECK (type IN ('http', 'mcp')),
  x402_version  integer NOT NULL,
  -- The requirements the payment was settled against, as the middleware sent them.
  accepts       jsonb NOT NULL,
  -- The payload's extensions as a catalog echoes them: {"bazaar": {info, schema}}.
  extensions    jsonb NOT NULL,
  description   text,
  mime_type     text,
  service_name  text,
  tags          jsonb,
  icon_url      text,
  -- The requirements' amount: the listing's price filters.
  price_atomic  bigint NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, resource_url)
);
