-- Webhooks: one delivery row per (event, webhook), so a fan-out or a redelivery racing another
-- instance can never create a second row; attempts are read per delivery for GET /webhooks/:id/deliveries.
CREATE UNIQUE INDEX webhook_deliveries_event_webhook ON webhook_deliveries (event_id, webhook_id);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
