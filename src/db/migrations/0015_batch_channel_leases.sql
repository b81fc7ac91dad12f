-- x402 batch-settlement at proxy speed (issue 12, part 4): an instance takes a short lease on a channel
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
