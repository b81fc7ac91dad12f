// The month partitions of the per-call history (migration 0041): which exist, and making the ones needed.
// A partition holds one UTC month [first day, first day of the next month) of its table's created_at.
import { underLockTimeout } from './lock-timeout.ts'
import type { Sql, Tx } from './sql.ts'

/** The tables partitioned by month on created_at. */
export const PARTITIONED_TABLES = ['calls', 'ledger_entries', 'call_deliveries'] as const
export type PartitionedTable = (typeof PARTITIONED_TABLES)[number]

/** Months made ahead of the current one, so the first insert of a month never lands in the default partition. */
export const MONTHS_AHEAD = 2

export interface MonthPartition {
  table: PartitionedTable
  /** The partition's own table, e.g. calls_2026_11. */
  name: string
  /** 'YYYY-MM' */
  month: string
}

/** 'YYYY-MM' of a time, in UTC. */
export function monthOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 7)
}

/** The first instant of a 'YYYY-MM' month (UTC), and of the one after it. */
export function monthBounds(month: string): { from: Date; to: Date } {
  const [y, m] = month.split('-').map(Number) as [number, number]
  return { from: new Date(Date.UTC(y, m - 1, 1)), to: new Date(Date.UTC(y, m, 1)) }
}

/** `month` moved by `n` months ('2026-11', 2 → '2027-01'). */
export function addMonths(month: string, n: number): string {
  const { from } = monthBounds(month)
  return monthOf(Date.UTC(from.getUTCFullYear(), from.getUTCMonth() + n, 1))
}

/** The month partitions of `table` (the default one left out), oldest first. */
export async function monthPartitions(db: Sql | Tx, table: PartitionedTable): Promise<MonthPartition[]> {
  const rows = await db<{ name: string }[]>`
    SELECT c.relname AS name FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = ${table}::regclass AND c.relname ~ '_[0-9]{4}_[0-9]{2}$'
    ORDER BY c.relname`
  return rows.map((r) => ({ table, name: r.name, month: r.name.slice(-7).replace('_', '-') }))
}

/** Rows waiting in a table's default partition (none once the partitions job has run). */
export async function defaultPartitionRows(db: Sql | Tx, table: PartitionedTable): Promise<number> {
  const [row] = await db<{ n: number }[]>`SELECT count(*)::int AS n FROM ${db(`${table}_default`)}`
  return row!.n
}

/**
 * Creates the partitions of the current month and the next MONTHS_AHEAD, and of every month that has rows
 * in a default partition (those rows move into it; migration 0041's history_month_partition). Returns the
 * partitions it created. Idempotent; one transaction per partition, so a failure leaves the others made.
 */
export async function ensurePartitions(sql: Sql, q: { nowMs: number }): Promise<string[]> {
  const created: string[] = []
  const current = monthOf(q.nowMs)
  for (const table of PARTITIONED_TABLES) {
    const stray = await sql<{ month: string }[]>`
      SELECT DISTINCT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM') AS month
      FROM ${sql(`${table}_default`)}`
    const months = new Set([...Array.from({ length: MONTHS_AHEAD + 1 }, (_, i) => addMonths(current, i))])
    for (const s of stray) months.add(s.month)
    for (const month of [...months].sort()) {
      const [row] = await sql<{ made: boolean }[]>`
        SELECT history_month_partition(${table}, ${`${month}-01`}::date) AS made`
      if (row!.made) created.push(`${table}_${month.replace('-', '_')}`)
    }
  }
  return created
}

// ── claims, by the day of the proof's own time (migration 0055) ─────────────────────────────────────────

/**
 * Days of claims partitions made ahead of today: an authorization is valid minutes ahead, and the hourly job
 * has a day of chances to make tomorrow. Not more: every partition costs each claim statement executor
 * start-up (bench/history/claim-batch-cost.ts: about 150 µs of PostgreSQL CPU per statement with eight
 * partitions against none). A proof with no day made waits in claims_default, pruned row by row.
 */
export const CLAIM_DAYS_AHEAD = 1
const DAY_MS = 86_400_000

/** 'YYYY-MM-DD' of a time, in UTC. */
export function dayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10)
}

export interface ClaimDayPartition {
  /** claims_dYYYYMMDD */
  name: string
  /** 'YYYY-MM-DD' */
  day: string
  /** The first instant after the day: every proof in the partition is older. */
  endMs: number
}

/** The day partitions of claims, oldest first (the voucher and default partitions left out). */
export async function claimDayPartitions(db: Sql | Tx): Promise<ClaimDayPartition[]> {
  const rows = await db<{ name: string }[]>`
    SELECT c.relname AS name FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'claims'::regclass AND c.relname ~ '^claims_d[0-9]{8}$'
    ORDER BY c.relname`
  return rows.map(({ name }) => {
    const day = `${name.slice(8, 12)}-${name.slice(12, 14)}-${name.slice(14, 16)}`
    return { name, day, endMs: Date.parse(`${day}T00:00:00Z`) + DAY_MS }
  })
}

/**
 * Makes the claims partitions of the days from the one holding `oldestMs` (the oldest proof time still
 * accepted: earlier days would only be dropped again) to CLAIM_DAYS_AHEAD after `nowMs`, moving any of their
 * rows out of claims_default. Returns the partitions created. One transaction per day, under a short lock
 * timeout (attaching locks the default partition): a day not made while paid calls hold the table is tried
 * again next run rather than queueing every claim behind it.
 */
export async function ensureClaimPartitions(
  sql: Sql,
  q: { nowMs: number; oldestMs: number },
): Promise<string[]> {
  const created: string[] = []
  const first = Date.parse(`${dayOf(q.oldestMs)}T00:00:00Z`)
  for (let at = first; at <= q.nowMs + CLAIM_DAYS_AHEAD * DAY_MS; at += DAY_MS) {
    const day = dayOf(at)
    // claims_day_partition answers false at once, without a lock, for a day that exists.
    const made = await underLockTimeout(sql, 200, async (tx) => {
      const [row] = await tx<{ made: boolean }[]>`SELECT claims_day_partition(${day}::date) AS made`
      return row!.made
    })
    if (made) created.push(`claims_d${day.replaceAll('-', '')}`)
  }
  return created
}
