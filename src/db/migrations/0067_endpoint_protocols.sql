-- The payment protocols an endpoint answers besides a transaction hash: x402 (PAYMENT-REQUIRED, X-PAYMENT,
-- PAYMENT-SIGNATURE) and MPP (WWW-Authenticate / Authorization: Payment). Both on unless the owner turns one off.
ALTER TABLE endpoints ADD COLUMN protocols text[] NOT NULL DEFAULT '{x402,mpp}';
