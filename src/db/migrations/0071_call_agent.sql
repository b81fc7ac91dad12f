-- Who called, on a paid call to an endpoint with identity rules: the verified signer (or "unsigned") and the
-- rule that priced the call, as JSON ({signer, keyid, failure, rule, action}). Null on every other call: a
-- null column costs a call row one bit of its null bitmap, so calls without identity rules stay the size
-- they were. Written once with the row (the capture), never updated.
ALTER TABLE calls ADD COLUMN agent jsonb;
