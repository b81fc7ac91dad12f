// The month partitions of the per-call history (migration 0041): which exist, and making the ones needed.
// A partition holds one UTC month [first day, first day of the next month) of its table's created_at.
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
