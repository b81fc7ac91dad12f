-- A WebSocket session's call row is the one place its charge is reported (its usage document's "session":
-- who ended it, its whole charge across its payments, its top-ups' rows), and its `session.closed` webhook
-- event is written with that row, in the same commit (the outbox rule of src/db/events.ts): a trigger,
-- because the two statements that write calls (claimAndCapture, and a channel's writeChannelVouchers for a
-- voucher session) both may write a session's row. Its WHEN is read before any call: every other call row
-- costs one test of its status.
CREATE FUNCTION session_closed_event() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  evt text := 'evt_' || substr(NEW.id, 6);
  s jsonb := NEW.usage -> 'session';
BEGIN
  INSERT INTO events (id, account_id, type, data)
  VALUES (evt, NEW.account_id, 'session.closed', jsonb_build_object(
    'id', NEW.id,
    'object', 'session',
    'call_id', NEW.id,
    'receipt_id', call_receipt_id(NEW.id, NEW.receipt_id),
    'endpoint_id', NEW.endpoint_id,
    'scheme', NEW.scheme,
    'ended_by', s ->> 'ended_by',
    'duration_ms', NEW.usage -> 'quantities' -> 'duration_ms',
    'charge_atomic', s ->> 'charge_atomic',
    'payments', s -> 'payments',
    'top_up_call_ids', coalesce(s -> 'top_up_call_ids', '[]'::jsonb),
    'usage', jsonb_build_object('unit', NEW.usage_unit, 'quantities', NEW.usage -> 'quantities',
                                'source', NEW.usage -> 'source', 'fallback', NEW.usage -> 'fallback'),
    'created_at', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
  ON CONFLICT (id) DO NOTHING;
  PERFORM pg_notify('tollgate_event_created', evt);
  RETURN NULL;
END $$;

CREATE TRIGGER calls_session_closed AFTER INSERT ON calls
  FOR EACH ROW WHEN (NEW.upstream_status = 101 AND NEW.usage -> 'session' ? 'ended_by')
  EXECUTE FUNCTION session_closed_event();
