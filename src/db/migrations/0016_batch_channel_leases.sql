-- x402 batch-settlement at proxy speed: an instance takes a short lease on a channel
-- and accepts its vouchers in memory, within a reserved cumulative ceiling, persisting the highest accepted
-- voucher in group-committed writes (src/books/channels.ts, src/data-plane/voucher-leases.ts).
-- lease_holder + lease_epoch: who may accept vouchers now (the epoch fences a holder whose lease was taken
-- over: its late writes are refused). lease_until: database time. lease_ceiling: the highest cumulative
-- the holder may accept before writing again (charged + the reservation, at most the balance).
-- lease_wanted: another instance asked for the channel; the holder lets it go once its calls are written.
ALTER TABLE batch_channels
  ADD COLUMN lease_holder         text,
  ADD COLUMN lease_epoch          bigint NOT NULL DEFAULT 0,
  ADD COLUMN lease_until          timestamptz,
  ADD COLUMN lease_ceiling_atomic bigint NOT NULL DEFAULT 0,
  ADD COLUMN lease_wanted         boolean NOT NULL DEFAULT false;

-- The served calls of each channel not yet claimed on chain, by channel and cumulative: what the claim job
-- reads (the highest per channel) and marks settled. Without it both scanned every batch claim ever
-- written, per channel (seconds at 100 k calls, holding an embedded database's one session).
CREATE INDEX claims_batch_unsettled ON claims ((split_part(proof_key, ':', 2)), (split_part(proof_key, ':', 3)::bigint))
  WHERE kind = 'batch' AND status = 'captured' AND settled_at IS NULL;
