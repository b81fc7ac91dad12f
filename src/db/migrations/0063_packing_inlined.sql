-- proof_packed and payer_packed as expressions the planner puts in place of the call. Declared STRICT
-- around a CASE, and proof_packed holding convert_to (STABLE inside an IMMUTABLE function), neither could be
-- inlined: each captured call ran them through the SQL-function executor, which plans their bodies again in
-- every statement and starts an executor per call. Same results: a NULL key or payer still gives NULL (the
-- CASE reaches no branch, or concatenates NULL), and the text of a key no shape matches is stored as its bytes
-- in the database's encoding (UTF-8), now by decode(…, 'escape') with its backslashes doubled, as convert_to
-- to UTF-8 gave them.
CREATE OR REPLACE FUNCTION proof_packed(key text) RETURNS bytea
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$
    SELECT CASE
      WHEN key ~ '^tx:0x[0-9a-f]{64}$' THEN '\x01'::bytea || decode(substr(key, 6), 'hex')
      WHEN key ~ '^auth:[1-9][0-9]{0,17}:0x[0-9a-f]{40}:0x[0-9a-f]{40}:0x[0-9a-f]{64}$'
        THEN '\x02'::bytea || int8send(split_part(key, ':', 2)::bigint)
             || decode(substr(split_part(key, ':', 3), 3), 'hex') || decode(substr(split_part(key, ':', 4), 3), 'hex')
             || decode(substr(split_part(key, ':', 5), 3), 'hex')
      WHEN key ~ '^upto:0x[0-9a-f]{40}:(0|[1-9][0-9]*)$'
        THEN '\x03'::bytea || decode(substr(key, 8, 40), 'hex') || decode(substr(key, 49), 'escape')
      ELSE '\x00'::bytea || decode(replace(key, '\', '\\'), 'escape')
    END
  $$;

CREATE OR REPLACE FUNCTION payer_packed(payer text) RETURNS bytea
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN payer ~ '^0x[0-9a-fA-F]{40}$' THEN decode(substr(payer, 3), 'hex') END $$;
