-- A call's proof, from now on stored packed (calls.proof) instead of as its key's text (calls.proof_key): the
-- hex of a key is written as the bytes it spells. Measured by bench/history/storage-per-call.ts: a
-- transaction hash's key is 70 B as text, 34 packed; an x402 authorization's (auth:chain:token:payer:nonce)
-- ~163 B as text, 82 packed.
--
-- Rows written before keep their text (no rewrite of the history); each row has exactly one of the two.
-- Every reader goes through call_proof_key, every writer through proof_packed. A key that is not exactly
-- one of the packed shapes (lower-case hex: every key the service makes) is kept as its text's bytes, so
-- packing never changes a key: proof_key_of(proof_packed(k)) = k for every k.
ALTER TABLE calls ADD COLUMN proof bytea;
ALTER TABLE calls ALTER COLUMN proof_key DROP NOT NULL;
ALTER TABLE calls ADD CONSTRAINT calls_proof_once CHECK ((proof_key IS NULL) <> (proof IS NULL));

-- Tags: 1 a transaction hash (32 bytes); 2 an x402 authorization (chain id as 8 bytes, token, payer, nonce);
-- 3 an upto permit (payer, then its decimal nonce as text); 0 any other key, as its UTF-8 text.
CREATE FUNCTION proof_packed(key text) RETURNS bytea
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$
    SELECT CASE
      WHEN key ~ '^tx:0x[0-9a-f]{64}$' THEN '\x01'::bytea || decode(substr(key, 6), 'hex')
      WHEN key ~ '^auth:[1-9][0-9]{0,17}:0x[0-9a-f]{40}:0x[0-9a-f]{40}:0x[0-9a-f]{64}$'
        THEN '\x02'::bytea || int8send(split_part(key, ':', 2)::bigint)
             || decode(substr(split_part(key, ':', 3), 3), 'hex') || decode(substr(split_part(key, ':', 4), 3), 'hex')
             || decode(substr(split_part(key, ':', 5), 3), 'hex')
      WHEN key ~ '^upto:0x[0-9a-f]{40}:(0|[1-9][0-9]*)$'
        THEN '\x03'::bytea || decode(substr(key, 8, 40), 'hex') || convert_to(substr(key, 49), 'UTF8')
      ELSE '\x00'::bytea || convert_to(key, 'UTF8')
    END
  $$;

CREATE FUNCTION proof_key_of(packed bytea) RETURNS text
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$
    SELECT CASE get_byte(packed, 0)
      WHEN 1 THEN 'tx:0x' || encode(substr(packed, 2), 'hex')
      WHEN 2 THEN 'auth:' || ('x' || encode(substr(packed, 2, 8), 'hex'))::bit(64)::bigint
                  || ':0x' || encode(substr(packed, 10, 20), 'hex') || ':0x' || encode(substr(packed, 30, 20), 'hex')
                  || ':0x' || encode(substr(packed, 50, 32), 'hex')
      WHEN 3 THEN 'upto:0x' || encode(substr(packed, 2, 20), 'hex') || ':' || convert_from(substr(packed, 22), 'UTF8')
      ELSE convert_from(substr(packed, 2), 'UTF8')
    END
  $$;

-- A call's proof key, whichever way its row holds it.
CREATE FUNCTION call_proof_key(stored text, packed bytea) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT coalesce(stored, proof_key_of(packed)) $$;
