// The history bench's seeded database, kept between runs (`--keep`) so a measurement can be repeated without
// seeding 50 M entries again: named tollgate_history_<entries>, it carries a bench_history_seed row written
// only once its seed finished (a database without one is half-seeded and is seeded afresh), and a reused
// one is put back as its seed left it (a fresh dev chain replays the same transaction hashes, so the last
// run's paid calls, chain cursors and binding must go).
import postgres from 'postgres'

export interface SeedRecord {
  entries: number
  account_id: string
  /** The seeded account's API key in clear: a bench database only, made and read by this bench. */
  api_key: string
  endpoint_id: string
  seeded_at: Date
  seed_seconds: number
}

export function seededDatabaseName(entries: number): string {
  return `tollgate_history_${entries}`
}

export function databaseUrl(server: string, name: string): string {
  const url = new URL(server)
  url.pathname = `/${name}`
  return url.toString()
}

async function onServer<T>(server: string, fn: (admin: postgres.Sql) => Promise<T>): Promise<T> {
  const admin = postgres(server, { max: 1, onnotice: () => {} })
  try {
    return await fn(admin)
  } finally {
    await admin.end({ timeout: 5 })
  }
}

export async function recreateDatabase(server: string, name: string): Promise<void> {
  await onServer(server, async (admin) => {
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.unsafe(`CREATE DATABASE ${name}`)
  })
}

export async function dropDatabase(server: string, name: string): Promise<void> {
  await onServer(server, (admin) => admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(
    () => {},
  )
}

/** The record of a finished seed of `entries` in that database, or null (no database, or not finished). */
export async function findSeeded(server: string, name: string, entries: number): Promise<SeedRecord | null> {
  const exists = await onServer(server, (admin) => admin`SELECT 1 FROM pg_database WHERE datname = ${name}`)
  if (exists.length === 0) return null
  const db = postgres(databaseUrl(server, name), { max: 1, onnotice: () => {} })
  try {
    const [table] = await db`SELECT to_regclass('bench_history_seed') AS t`
    if (!table?.t) return null
    const [row] = await db<SeedRecord[]>`
      SELECT entries::int AS entries, account_id, api_key, endpoint_id, seeded_at, seed_seconds
      FROM bench_history_seed WHERE entries = ${entries}`
    return row ?? null
  } finally {
    await db.end({ timeout: 5 })
  }
}

export async function recordSeeded(url: string, r: SeedRecord): Promise<void> {
  const db = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await db`CREATE TABLE bench_history_seed (entries bigint, account_id text, api_key text, endpoint_id text,
                                             seeded_at timestamptz, seed_seconds integer)`
    await db`INSERT INTO bench_history_seed ${db([r])}`
  } finally {
    await db.end({ timeout: 5 })
  }
}

/**
 * Puts a reused database back as its seed left it, before tollgate starts on it: what later runs added
 * (every seeded row is dated before the seed finished) goes, the ledger's through its triggers so the
 * running balances follow; the chain binding and cursors go with the dev chain they were made on.
 */
export async function resetToSeeded(url: string, r: SeedRecord): Promise<void> {
  const db = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await db.begin(async (tx) => {
      for (const table of [
        'chain_binding',
        'chain_cursors',
        'watcher_cursors',
        'unmatched_inflows',
        'reconcile_checkpoints',
        'reconcile_balance_snapshots',
        'idempotency_keys',
      ])
        await tx.unsafe(`DELETE FROM ${table}`)
      await tx`DELETE FROM ledger_entries WHERE created_at > ${r.seeded_at}`
      await tx`DELETE FROM calls WHERE created_at > ${r.seeded_at}`
      await tx`DELETE FROM claims WHERE claimed_at > ${r.seeded_at}`
      await tx`DELETE FROM events WHERE created_at > ${r.seeded_at}`
      await tx`DELETE FROM payout_accounts WHERE created_at > ${r.seeded_at}`
      await tx`DELETE FROM payouts WHERE created_at > ${r.seeded_at}`
    })
  } finally {
    await db.end({ timeout: 5 })
  }
}
