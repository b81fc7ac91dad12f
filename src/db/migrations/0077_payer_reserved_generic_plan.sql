-- payer_reserved (0065, 0070) runs in every /verify and every claim of an x402 authorization or permit,
-- metered or facilitated. Its one query sums eight subqueries over every day partition of claims; PL/pgSQL
-- planned it again for each call's arguments (a custom plan, which prunes nothing: the partitions are by day,
-- not by payer), and that planning cost more than the sums themselves (about a third of the database's CPU
-- per facilitator settlement under load, by perf). A generic plan is made once per connection and reused;
-- the indexes it uses are the same.
ALTER FUNCTION payer_reserved(text, bigint) SET plan_cache_mode = force_generic_plan;
