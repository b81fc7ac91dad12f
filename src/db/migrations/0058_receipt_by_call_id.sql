-- A paid call's id shares its receipt id's random part (call_X has receipt rcpt_X, src/data-plane/metered.ts),
-- so its receipt is found by the call's primary key, and the receipt id's own index keeps only the calls
-- written before (or by a path that names its receipt otherwise): 41 B a call less
-- (bench/history/storage-per-call.ts). src/db/calls.ts, findReceipt, asks both ways.
DROP INDEX calls_receipt;
CREATE INDEX calls_receipt ON calls (receipt_id)
  WHERE receipt_id IS NOT NULL AND substr(receipt_id, 6) <> substr(id, 6);
