-- What paid traffic observed per verified signer on an endpoint with identity rules, by hour: the listing's
-- observed figures split by who called. `signer` is a name the operator configured or "unsigned", so a
-- caller cannot grow this table by naming itself. Endpoints without rules write nothing here.
CREATE TABLE endpoint_agent_hourly (
  endpoint_id text NOT NULL,
  signer      text NOT NULL,
  hour        timestamptz NOT NULL,
  paid_calls  bigint NOT NULL DEFAULT 0,
  succeeded   bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (endpoint_id, hour, signer)
);
