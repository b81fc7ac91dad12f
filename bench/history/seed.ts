// Seeds a tollgate database with a history of paid calls by SQL that leaves the state the write paths leave
// (captured tx claims, their calls, owner share + fee entries, confirmed payouts with their payout_accounts
// and payout.sent events, the running balances), in chunks of generate_series so memory and WAL stay bounded.
// One busy account (the case: its every balance read used to sum all its entries).
import type { Sql } from '../../src/db/sql.ts'

export interface SeedTarget {
  accountId: string
  wallet: string
  endpointId: string
  payer: string
  treasury: string
}

/** Calls per confirmed payout (the owner shares of PER_PAYOUT calls are paid in one transaction). */
const PER_PAYOUT = 10_000
const CHUNK = 500_000
const PRICE = 1_000
const OWNER = 950
const FEE = 50

/** Seeds `entries` ledger entries (entries / 2 paid calls) spread over the year before yesterday. */
export async function seedHistory(
  sql: Sql,
  t: SeedTarget,
  o: { entries: number; log(line: string): void },
): Promise<void> {
  const calls = Math.floor(o.entries / 2)
  const payouts = Math.floor(calls / PER_PAYOUT)
  // The balance triggers would redo per chunk what one pass at the end does; the end state is the same.
  await sql`ALTER TABLE ledger_entries DISABLE TRIGGER USER`
  await sql`ALTER TABLE payouts DISABLE TRIGGER USER`
  const started = performance.now()
  try {
    for (let lo = 1; lo <= calls; lo += CHUNK) {
      const hi = Math.min(calls, lo + CHUNK - 1)
      await seedChunk(sql, t, { lo, hi, calls, payouts })
      const s = Math.round((performance.now() - started) / 1000)
      o.log(`history: ${hi.toLocaleString('en')} of ${calls.toLocaleString('en')} calls seeded (${s} s)`)
    }
  } finally {
    await sql`ALTER TABLE ledger_entries ENABLE TRIGGER USER`
    await sql`ALTER TABLE payouts ENABLE TRIGGER USER`
  }
  // The running balances exactly as the migration fills them: recomputed from the entries.
  await sql`DELETE FROM account_balances WHERE account_id = ${t.accountId}`
  await sql`DELETE FROM wallet_balances WHERE wallet = ${t.wallet}`
  await sql`
    INSERT INTO account_balances (account_id, owner_share_atomic, fees_atomic, refunds_atomic, paid_out_atomic,
                                  in_flight_atomic, refunded_atomic)
    SELECT account_id, owner_share_atomic, fees_atomic, refunds_atomic, paid_out_atomic, in_flight_atomic,
           refunded_atomic
    FROM account_balances_recomputed WHERE account_id = ${t.accountId}`
  await sql`
    INSERT INTO wallet_balances (wallet, unpaid_atomic)
    SELECT wallet, unpaid_atomic FROM wallet_balances_recomputed WHERE wallet = ${t.wallet}`
  await sql`ANALYZE`
  o.log(`history: balances and statistics done (${Math.round((performance.now() - started) / 1000)} s)`)
}

async function seedChunk(
  sql: Sql,
  t: SeedTarget,
  c: { lo: number; hi: number; calls: number; payouts: number },
): Promise<void> {
  // Call i happens at `at(i)`: the year before yesterday, in order; its payout (if paid) is i / PER_PAYOUT.
  const at = sql`(now() - interval '1 day' - interval '365 days' * (1 - i::float8 / ${c.calls}::float8))`
  const paid = sql`(i - 1) / ${PER_PAYOUT}::bigint < ${c.payouts}::bigint`
  await sql.begin(async (tx) => {
    await tx`
      INSERT INTO payouts (id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, entries_count,
                           attempts, created_at, submitted_at, confirmed_at)
      SELECT 'po_hist' || b, ${t.wallet}, ${OWNER * PER_PAYOUT}::bigint, 'payout', 'confirmed', ${t.treasury},
             1000000000 + b, '0x' || lpad(to_hex(b), 64, 'e'), ${PER_PAYOUT}::int, 1, ts, ts, ts
      FROM (SELECT b, now() - interval '1 day' - interval '365 days' * (1 - ((b + 1) * ${PER_PAYOUT}::int)::float8 / ${c.calls}::float8) AS ts
            FROM generate_series((${c.lo}::int - 1) / ${PER_PAYOUT}::int, (${c.hi}::int - 1) / ${PER_PAYOUT}::int) b) s
      WHERE b < ${c.payouts}::int AND b * ${PER_PAYOUT}::int + 1 >= ${c.lo}::int`
    await tx`
      INSERT INTO payout_accounts (payout_id, account_id, owner_share_atomic, refund_atomic, entries_count,
                                   created_at)
      SELECT id, ${t.accountId}, amount_atomic, 0, entries_count, created_at FROM payouts
      WHERE id LIKE 'po_hist%' AND NOT EXISTS (SELECT 1 FROM payout_accounts pa WHERE pa.payout_id = payouts.id)`
    await tx`
      INSERT INTO events (id, account_id, type, data, created_at, dispatched_at)
      SELECT 'evt_hist' || substr(p.id, 8), ${t.accountId}, 'payout.sent', jsonb_build_object('id', p.id, 'object', 'payout'),
             p.confirmed_at, p.confirmed_at
      FROM payouts p WHERE p.id LIKE 'po_hist%'
        AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = 'evt_hist' || substr(p.id, 8))`
    await tx`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          retry_until, attempts, releases, claimed_at, captured_at)
      SELECT 'tx:0x' || lpad(to_hex(i), 64, '0'), 'tx', 'call', ${t.endpointId}, ${t.accountId}, ${t.payer},
             ${PRICE}::bigint, 'captured', ${at} + interval '10 minutes', 1, 0, ${at}, ${at}
      FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i`
    await tx`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, created_at)
      SELECT 'call_hist' || i, 'tx:0x' || lpad(to_hex(i), 64, '0'), ${t.endpointId}, ${t.accountId}, ${t.payer},
             ${PRICE}::bigint, ${OWNER}::bigint, ${FEE}::bigint, 200, 'GET', ${at}
      FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i`
    await tx`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, payout_id,
                                  created_at)
      SELECT ${t.accountId}, 'owner_share', ${t.wallet}, ${OWNER}::bigint, 'call', 'call_hist' || i,
             CASE WHEN ${paid} THEN 'po_hist' || ((i - 1) / ${PER_PAYOUT}::bigint) END, ${at}
      FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i
      UNION ALL
      SELECT ${t.accountId}, 'fee', NULL, ${FEE}::bigint, 'call', 'call_hist' || i, NULL, ${at}
      FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i`
  })
}
