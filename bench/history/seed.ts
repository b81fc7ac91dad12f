// Seeds a tollgate database with a history of paid calls by SQL that leaves the state the write paths leave
// (captured tx claims, their calls, owner share + fee entries, confirmed payouts with their payout_accounts
// and payout.sent events, the running balances), in chunks of generate_series so memory stays bounded.
// The entries are booked as the capture statement books them (migration 0050): one owner share and one fee
// per capture batch of `callsPerBatch` calls, the calls sharing their batch's time and naming it; with
// callsPerBatch 0, a pair per call as before 0050 (x402 calls are still booked so).
// One busy account (the case: its every balance read used to sum all its entries).
//
// Fast enough for 50 M entries on two cores: the secondary indexes of the three big tables are dropped for
// the load and built again after it from their own definitions (one sort each instead of 25–50 M random
// inserts), two sessions load side by side (claims and calls in one, ledger entries in the other), and the
// seeding sessions skip what a seed does not need: synchronous commit (a failed seed is dropped and done
// again) and triggers (the balance triggers would redo per chunk what one pass at the end does; the
// foreign keys hold by construction). Then the tables are vacuumed and analysed, as autovacuum would leave
// a database that took this traffic.
import postgres from 'postgres'

export interface SeedTarget {
  accountId: string
  wallet: string
  endpointId: string
  payer: string
  treasury: string
}

/** Calls per confirmed payout (the owner shares of PER_PAYOUT calls are paid in one transaction). */
const PER_PAYOUT = 10_000
/** Calls per statement: large enough that per-statement work is nothing, small enough to keep in work_mem. */
const CHUNK = 1_000_000
const PRICE = 1_000
const OWNER = 950
const FEE = 50
/** Calls per capture batch when the caller does not say: a busy service's group commit (a divisor of PER_PAYOUT). */
const DEFAULT_CALLS_PER_BATCH = 10
/** The tables whose secondary indexes are dropped during the load (their rows are 99.99 % of the seed). */
const BIG_TABLES = ['claims', 'calls', 'ledger_entries']

const SESSION = {
  application_name: 'bench-history-seed',
  synchronous_commit: 'off',
  // The index builds sort in memory in one pass (the machine has the memory; a build is one session's).
  maintenance_work_mem: '1GB',
  work_mem: '256MB',
  // Two sessions build side by side on two cores: no parallel workers on top.
  max_parallel_maintenance_workers: '0',
}

type Db = postgres.Sql
/**
 * Calls lo..hi of `calls`, the history ending at `end` (ISO time); the first `payouts` × PER_PAYOUT are paid.
 * perBatch: calls per capture batch (0: entries per call).
 */
type Chunk = { lo: number; hi: number; calls: number; payouts: number; end: string; perBatch: number }

/**
 * Seeds `entries` ledger entries (entries / 2 paid calls) spread over the year before yesterday. `url` is the
 * database's; the seed opens its own sessions (superuser for session_replication_role; otherwise it disables
 * the tables' user triggers instead and the foreign keys are checked row by row, slower).
 */
export async function seedHistory(
  url: string,
  t: SeedTarget,
  o: { entries: number; callsPerBatch?: number; log(line: string): void },
): Promise<{ seconds: number }> {
  const calls = Math.floor(o.entries / 2)
  const perBatch = o.callsPerBatch ?? DEFAULT_CALLS_PER_BATCH
  // A batch never straddles a chunk or a payout (both are whole multiples of it).
  if (perBatch < 0 || (perBatch > 0 && PER_PAYOUT % perBatch !== 0)) {
    throw new Error(`callsPerBatch ${perBatch}: must divide ${PER_PAYOUT} (or be 0: entries per call)`)
  }
  const payouts = Math.floor(calls / PER_PAYOUT)
  const started = performance.now()
  const elapsed = () => `${Math.round((performance.now() - started) / 1000)} s`
  const { sessions, replica } = await openSessions(url)
  const [a, b] = sessions as [Db, Db]
  try {
    // Up to yesterday: nothing seeded is dated after the seed (a reused database tells later rows by that).
    const [{ end }] = (await a`SELECT (now() - interval '1 day')::text AS end`) as unknown as [
      { end: string },
    ]
    if (!replica)
      for (const table of ['ledger_entries', 'payouts'])
        await a.unsafe(`ALTER TABLE ${table} DISABLE TRIGGER USER`)
    const indexes = await dropSecondaryIndexes(a)
    o.log(`history: dropped ${indexes.length} secondary indexes for the load`)
    const chunks: Array<{ lo: number; hi: number }> = []
    for (let lo = 1; lo <= calls; lo += CHUNK) chunks.push({ lo, hi: Math.min(calls, lo + CHUNK - 1) })
    // Each table is written in call order by one session, so ids and times rise together as they do live.
    await Promise.all([
      (async () => {
        for (const c of chunks) {
          await seedPayouts(a, t, { ...c, calls, payouts, end, perBatch })
          await seedClaimsAndCalls(a, t, { ...c, calls, payouts, end, perBatch })
          o.log(
            `history: ${c.hi.toLocaleString('en')} of ${calls.toLocaleString('en')} claims and calls (${elapsed()})`,
          )
        }
      })(),
      (async () => {
        for (const c of chunks) {
          await seedEntries(b, t, { ...c, calls, payouts, end, perBatch })
          o.log(
            `history: entries of ${c.hi.toLocaleString('en')} of ${calls.toLocaleString('en')} calls (${elapsed()})`,
          )
        }
      })(),
    ])
    // Before the indexes: the vacuum then has only the primary keys to look at, and nothing is dead.
    await onBoth(sessions, BIG_TABLES, (db, table) => db.unsafe(`VACUUM ${table}`))
    o.log(`history: vacuumed (${elapsed()})`)
    await onBoth(
      sessions,
      // pg_get_indexdef names a partitioned table's index ON ONLY the parent: built so, it would be an
      // invalid index on no partition. Without ONLY it is built on every partition, as the migrations did.
      indexes.map((i) => i.def.replace(' ON ONLY ', ' ON ')),
      (db, def) => db.unsafe(def),
    )
    o.log(`history: ${indexes.length} indexes built (${elapsed()})`)
    if (!replica)
      for (const table of ['ledger_entries', 'payouts'])
        await a.unsafe(`ALTER TABLE ${table} ENABLE TRIGGER USER`)
    await fillBalances(a, t)
    await a`ANALYZE`
    o.log(`history: balances and statistics done (${elapsed()})`)
  } finally {
    await Promise.all(sessions.map((s) => s.end({ timeout: 5 })))
  }
  return { seconds: Math.round((performance.now() - started) / 1000) }
}

async function openSessions(url: string): Promise<{ sessions: Db[]; replica: boolean }> {
  const open = (replica: boolean) =>
    postgres(url, {
      max: 1,
      onnotice: () => {},
      // Replica role: no trigger fires in these sessions, the balance triggers and foreign-key checks included.
      connection: { ...SESSION, ...(replica ? { session_replication_role: 'replica' } : {}) },
    })
  const first = open(true)
  try {
    await first`SELECT 1`
    return { sessions: [first, open(true)], replica: true }
  } catch (err) {
    await first.end({ timeout: 1 })
    // Not a superuser: setting the replication role is refused.
    if ((err as { code?: string }).code !== '42501') throw err
    return { sessions: [open(false), open(false)], replica: false }
  }
}

/** Each item on whichever of the two sessions is free first, biggest first as listed. */
async function onBoth<T>(
  sessions: Db[],
  items: T[],
  fn: (db: Db, item: T) => Promise<unknown>,
): Promise<void> {
  const queue = [...items]
  await Promise.all(
    sessions.map(async (db) => {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) await fn(db, item)
    }),
  )
}

/** Drops the big tables' indexes that back no constraint; returns their definitions, biggest table first. */
async function dropSecondaryIndexes(db: Db): Promise<Array<{ name: string; def: string }>> {
  const rows = await db<{ name: string; def: string }[]>`
    SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
    FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
    WHERE t.relname = ANY(${BIG_TABLES}) AND t.relnamespace = 'public'::regnamespace
      AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
    ORDER BY array_position(${['ledger_entries', 'calls', 'claims']}::text[], t.relname::text), 1`
  for (const r of rows) await db.unsafe(`DROP INDEX ${r.name}`)
  return rows
}

/** Call i happens at this time: the year before `end`, in order (one `end` for every statement of the seed). */
function callTime(db: Db, c: { calls: number; end: string }) {
  return db`(${c.end}::timestamptz - interval '365 days' * (1 - i::float8 / ${c.calls}::float8))`
}

/** The capture batch of call i (0: none, booked per call), numbered from 1. */
function batchOf(db: Db, c: { perBatch: number }) {
  return c.perBatch === 0 ? db`NULL::bigint` : db`((i - 1) / ${c.perBatch}::bigint + 1)`
}

/** Call i is written at this time: its batch's (that of the batch's last call), or its own when per call. */
function writtenTime(db: Db, c: { calls: number; end: string; perBatch: number }) {
  if (c.perBatch === 0) return callTime(db, c)
  return db`(${c.end}::timestamptz - interval '365 days'
             * (1 - least(((i - 1) / ${c.perBatch}::bigint + 1) * ${c.perBatch}::bigint, ${c.calls}::bigint)::float8
                    / ${c.calls}::float8))`
}

/** The confirmed payouts whose last call falls in this chunk, their payout_accounts and payout.sent events. */
async function seedPayouts(db: Db, t: SeedTarget, c: Chunk) {
  await db`
    WITH p AS (
      INSERT INTO payouts (id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, entries_count,
                           attempts, created_at, submitted_at, confirmed_at)
      SELECT 'po_hist' || b, ${t.wallet}, ${OWNER * PER_PAYOUT}::bigint, 'payout', 'confirmed', ${t.treasury},
             1000000000 + b, '0x' || lpad(to_hex(b), 64, 'e'),
             ${c.perBatch === 0 ? PER_PAYOUT : PER_PAYOUT / c.perBatch}::int, 1, ts, ts, ts
      FROM (SELECT b, ${c.end}::timestamptz
                      - interval '365 days' * (1 - ((b + 1) * ${PER_PAYOUT}::int)::float8 / ${c.calls}::float8) AS ts
            FROM generate_series(0, ${c.payouts}::int - 1) b) s
      -- The payouts whose last call is in this chunk.
      WHERE (b + 1) * ${PER_PAYOUT}::bigint BETWEEN ${c.lo}::bigint AND ${c.hi}::bigint
      RETURNING id, amount_atomic, entries_count, created_at, confirmed_at
    ),
    pa AS (
      INSERT INTO payout_accounts (payout_id, account_id, owner_share_atomic, refund_atomic, entries_count,
                                   created_at)
      SELECT id, ${t.accountId}, amount_atomic, 0, entries_count, created_at FROM p
    )
    INSERT INTO events (id, account_id, type, data, created_at, dispatched_at)
    SELECT 'evt_hist' || substr(p.id, 8), ${t.accountId}, 'payout.sent',
           jsonb_build_object('id', p.id, 'object', 'payout'), p.confirmed_at, p.confirmed_at
    FROM p`
}

async function seedClaimsAndCalls(db: Db, t: SeedTarget, c: Chunk) {
  const at = callTime(db, c)
  await db`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                        retry_until, attempts, releases, claimed_at, captured_at, proof_at, horizon_at, call_id)
    SELECT 'tx:0x' || lpad(to_hex(i), 64, '0'), 'tx', 'call', ${t.endpointId}, ${t.accountId}, ${t.payer},
           ${PRICE}::bigint, 'captured', ${at} + interval '10 minutes', 1, 0, ${at}, ${at}, ${at}, ${at},
           'call_hist' || lpad(i::text, 14, '0')
    FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i`
  const written = writtenTime(db, c)
  // Zero-padded ids as long as the live ones (call_ and 18 characters): the primary key is filled in order,
  // at its right edge, like the proof keys. Each call's receipt id is the one derived from its id, stored as
  // '' as the live path stores it (migration 0059), its proof and payer packed (migrations 0060, 0062).
  await db`
    INSERT INTO calls (id, proof, endpoint_id, account_id, payer_address, amount_atomic, owner_share_atomic,
                       fee_atomic, upstream_status, method, created_at, receipt_id, ledger_batch_id,
                       body_sha256, body_bytes)
    SELECT 'call_hist' || lpad(i::text, 14, '0'), proof_packed('tx:0x' || lpad(to_hex(i), 64, '0')), ${t.endpointId},
           ${t.accountId}, payer_packed(${t.payer}), ${PRICE}::bigint, ${OWNER}::bigint, ${FEE}::bigint, 200, 'GET',
           ${written}, '', ${batchOf(db, c)},
           -- What the answer delivered, for its signed receipt, on the call row as the live path writes it
           -- for an answer that ended before its capture was sent (migration 0057).
           decode(md5(i::text) || md5((i + 1)::text), 'hex'), 17
    FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i`
}

/**
 * Each batch's owner share (linked to its payout if paid) and fee, next to each other as a capture writes
 * them, at the batch's time; with perBatch 0, each call's.
 */
async function seedEntries(db: Db, t: SeedTarget, c: Chunk) {
  if (c.perBatch > 0) {
    // Batch j holds calls (j - 1) × perBatch + 1 .. j × perBatch; i below is its last call.
    const at = callTime(db, c)
    await db`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, payout_id,
                                  created_at)
      SELECT ${t.accountId}, k.kind, k.wallet, k.amount * (i - (j - 1) * ${c.perBatch}::bigint), 'capture_batch',
             j::text, k.payout_id, ${at}
      FROM generate_series((${c.lo}::bigint - 1) / ${c.perBatch}::bigint + 1,
                           (${c.hi}::bigint - 1) / ${c.perBatch}::bigint + 1) j
      CROSS JOIN LATERAL (SELECT least(j * ${c.perBatch}::bigint, ${c.calls}::bigint) AS i) last
      CROSS JOIN LATERAL (VALUES
        ('owner_share', ${t.wallet}::text, ${OWNER}::bigint,
         CASE WHEN (i - 1) / ${PER_PAYOUT}::bigint < ${c.payouts}::bigint THEN 'po_hist' || ((i - 1) / ${PER_PAYOUT}::bigint) END),
        ('fee', NULL, ${FEE}::bigint, NULL)) k(kind, wallet, amount, payout_id)`
    return
  }
  const at = callTime(db, c)
  await db`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, payout_id,
                                created_at)
    SELECT ${t.accountId}, k.kind, k.wallet, k.amount, 'call', 'call_hist' || lpad(i::text, 14, '0'), k.payout_id, ${at}
    FROM generate_series(${c.lo}::bigint, ${c.hi}::bigint) i
    -- Lateral (it names i): for each call in turn, its two entries.
    CROSS JOIN LATERAL (VALUES
      ('owner_share', ${t.wallet}::text, ${OWNER}::bigint,
       CASE WHEN (i - 1) / ${PER_PAYOUT}::bigint < ${c.payouts}::bigint THEN 'po_hist' || ((i - 1) / ${PER_PAYOUT}::bigint) END),
      ('fee', NULL, ${FEE}::bigint, NULL)) k(kind, wallet, amount, payout_id)`
}

/** The running balances exactly as migration 0011 fills them: recomputed from the entries. */
async function fillBalances(db: Db, t: SeedTarget) {
  await db`DELETE FROM account_balances WHERE account_id = ${t.accountId}`
  await db`DELETE FROM wallet_balances WHERE wallet = ${t.wallet}`
  await db`
    INSERT INTO account_balances (account_id, owner_share_atomic, fees_atomic, refunds_atomic, paid_out_atomic,
                                  in_flight_atomic, refunded_atomic)
    SELECT account_id, owner_share_atomic, fees_atomic, refunds_atomic, paid_out_atomic, in_flight_atomic,
           refunded_atomic
    FROM account_balances_recomputed WHERE account_id = ${t.accountId}`
  await db`
    INSERT INTO wallet_balances (wallet, unpaid_atomic)
    SELECT wallet, unpaid_atomic FROM wallet_balances_recomputed WHERE wallet = ${t.wallet} AND unpaid_atomic <> 0`
}
