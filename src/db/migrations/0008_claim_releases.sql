-- A proof serves at most once: a claim may be taken over by a retry only after the request that
-- held it recorded an explicit release (its upstream attempt failed). `releases` counts those; a claim
-- whose lease ran out without one is in doubt (its process died mid-call) and is refunded at the end of its
-- window instead. Invariant, checked by reconcile: attempts = releases or attempts = releases + 1.
ALTER TABLE claims ADD COLUMN releases integer NOT NULL DEFAULT 0;
-- Claims released under the old rule (lease cleared) count as released once per attempt.
UPDATE claims SET releases = attempts WHERE status = 'claimed' AND lease_until IS NULL;
