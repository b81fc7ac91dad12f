-- A call's payer, from now on stored as its address's 20 bytes (calls.payer_address) instead of as the
-- 42 characters of its hex text (calls.payer), measured by bench/history/storage-per-call.ts. The API shows
-- a payer in its EIP-55 checksummed form, which the bytes and the text both give.
--
-- Rows written before keep their text (no rewrite of the history); each row has exactly one of the two, and
-- a payer that is not an address's hex is kept as text. Every reader goes through call_payer (lower-case
-- hex for the bytes), every writer through payer_packed.
ALTER TABLE calls ADD COLUMN payer_address bytea;
ALTER TABLE calls ALTER COLUMN payer DROP NOT NULL;
ALTER TABLE calls ADD CONSTRAINT calls_payer_once CHECK ((payer IS NULL) <> (payer_address IS NULL));

-- The address's bytes, or NULL when the text is not one (then the text is stored).
CREATE FUNCTION payer_packed(payer text) RETURNS bytea
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$ SELECT CASE WHEN payer ~ '^0x[0-9a-fA-F]{40}$' THEN decode(substr(payer, 3), 'hex') END $$;

CREATE FUNCTION call_payer(stored text, address bytea) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT coalesce(stored, '0x' || encode(address, 'hex')) $$;
