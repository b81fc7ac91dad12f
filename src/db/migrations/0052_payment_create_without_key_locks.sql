-- Creating a payment is one statement that inserts the payment, its figure (checkout_amounts) and the first
-- line of its timeline. Each foreign key among those made PostgreSQL lock the referenced row FOR KEY SHARE:
-- the new payment twice, and the merchant's account row once per creation. Every concurrent creation of one
-- merchant locks that same account row, so they share a MultiXact that grows with each (an SLRU write and
-- WAL per lock): measured at 16 concurrent creations of one account on a PostgreSQL server, 1,574/s at
-- 360 µs of backend CPU each with the keys, 2,801/s at 280 µs without them.
--
-- What the keys guarded is guarded by the statements: accounts and payments are never deleted; a payment is
-- inserted only for the account its request authenticated; a figure or a timeline line is inserted only in
-- the statement that inserts its payment or under that payment's row lock (src/books/payments.ts,
-- src/books/refunds.ts). The keys of tables written rarely stay.
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_account_id_fkey;
ALTER TABLE checkout_amounts DROP CONSTRAINT IF EXISTS checkout_amounts_payment_id_fkey;
ALTER TABLE payment_timeline DROP CONSTRAINT IF EXISTS payment_timeline_payment_id_fkey;
