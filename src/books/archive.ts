// Archiving a closed month of history: its partitions of calls, ledger entries and call deliveries are
// written to gzip files (src/db/archive-files.ts), checked by reading them back, then detached and dropped
// whole. The books keep balancing: the month's ledger entries are carried forward as sums per account,
// kind, wallet and payout (archived_ledger_sums, in the transaction that drops them), which the balances
// recomputed for reconcile count in their place (migration 0041); its calls booked at settlement as sums
// per settlement batch and account (archived_batch_calls, migration 0064), which the batches check counts.
// Running balances are not touched: detaching a partition fires no trigger.
//
// Only a month whose money is settled may go: no claim of it still open (claimed, refund due, settling,
// or an x402/upto/voucher call captured and not yet settled), no merchant refund pending, and every entry
// of it (fees aside) paid by a confirmed payout. A proof of an archived month still pays once: its claim
// row (or, once pruned, the stored horizon below which every verifier refuses it) is what refuses a
// replay, never the call row, and claims are not archived.
import { join } from 'node:path'
import { type ArchivedFile, exportPartition, type Manifest, writeManifest } from '../db/archive-files.ts'
import {
  addMonths,
  monthBounds,
  monthOf,
  monthPartitions,
  PARTITIONED_TABLES,
  type PartitionedTable,
} from '../db/partitions.ts'
import type { Sql, Tx } from '../db/sql.ts'

/** A refusal: nothing was dropped. */
export class ArchiveRefused extends Error {
  readonly code = 'ARCHIVE_REFUSED'
  constructor(message: string) {
    super(message)
    this.name = 'ArchiveRefused'
  }
}

export interface ArchivedMonth {
  month: string
  dir: string
  files: ArchivedFile[]
}

/** Why the money of `month` is still open (empty: it may be archived). */
export async function openMoney(db: Sql | Tx, month: string): Promise<string[]> {
  const { from, to } = monthBounds(month)
  const [row] = await db<{ claims: number; refunds: number; entries: number }[]>`
    SELECT
      (SELECT count(*)::int FROM claims k WHERE k.claimed_at < ${to}
         AND (k.status IN ('claimed', 'refund_due', 'settling')
              OR (k.status = 'captured' AND k.kind <> 'tx' AND k.settled_at IS NULL
                  AND k.settlement_error IS NULL))) AS claims,
      (SELECT count(*)::int FROM refunds r WHERE r.status = 'pending' AND r.created_at < ${to}) AS refunds,
      (SELECT count(*)::int FROM ledger_entries e LEFT JOIN payouts p ON p.id = e.payout_id
        WHERE e.created_at >= ${from} AND e.created_at < ${to}
          AND e.kind <> 'fee' AND p.status IS DISTINCT FROM 'confirmed') AS entries`
  const r = row!
  const why: string[] = []
  if (r.claims > 0)
    why.push(`${r.claims} claims of it or before are still open (captured but unsettled, refund due, …)`)
  if (r.refunds > 0) why.push(`${r.refunds} merchant refunds created by its end are still pending`)
  if (r.entries > 0) why.push(`${r.entries} of its ledger entries are not paid by a confirmed payout`)
  return why
}

/**
 * archiveLedgerMonth: ledger entries (paid) → archived. The month's entries become sums per account, kind,
 * wallet and payout in archived_ledger_sums, and its partition is detached and dropped, in one
 * transaction. Precondition in its SQL: no entry of the partition (fees aside) outside a confirmed payout.
 * Returns the sums carried.
 */
export async function archiveLedgerMonth(
  tx: Tx,
  q: { partition: string; month: string },
): Promise<Manifest['ledger_sums']> {
  const [open] = await tx<{ n: number }[]>`
    SELECT count(*)::int AS n FROM ${tx(q.partition)} e LEFT JOIN payouts p ON p.id = e.payout_id
    WHERE e.kind <> 'fee' AND p.status IS DISTINCT FROM 'confirmed'`
  if (open!.n > 0)
    throw new ArchiveRefused(`${q.partition}: ${open!.n} entries not paid by a confirmed payout`)
  const sums = await tx<Manifest['ledger_sums']>`
    INSERT INTO archived_ledger_sums (month, account_id, kind, wallet, payout_id, entries, amount_atomic)
    SELECT ${`${q.month}-01`}::date, e.account_id, e.kind, e.wallet, e.payout_id, count(*), sum(e.amount_atomic)
    FROM ${tx(q.partition)} e
    GROUP BY e.account_id, e.kind, e.wallet, e.payout_id
    RETURNING account_id, kind, wallet, payout_id, entries::text, amount_atomic::text`
  await dropPartition(tx, { table: 'ledger_entries', partition: q.partition })
  return sums
}

/**
 * archiveCallsMonth: calls → archived. The month's calls booked by a settlement batch (migration 0064) become
 * sums per batch and account in archived_batch_calls, in the transaction that drops them: the batch's entries
 * may sit in a later month still online (a call served on the 31st, settled on the 1st), and reconcile holds
 * them to these sums and the batch's calls still online. Transaction-hash calls need none: a capture batch's
 * calls and entries share their month.
 */
async function archiveCallsMonth(tx: Tx, q: { partition: string; month: string }): Promise<void> {
  await tx`
    INSERT INTO archived_batch_calls (month, batch_id, account_id, calls, owner_share_atomic, fee_atomic)
    SELECT ${`${q.month}-01`}::date, c.ledger_batch_id, c.account_id, count(*), sum(c.owner_share_atomic),
           sum(c.fee_atomic)
    FROM ${tx(q.partition)} c WHERE c.ledger_batch_id < 0
    GROUP BY c.ledger_batch_id, c.account_id`
  await dropPartition(tx, { table: 'calls', partition: q.partition })
}

async function dropPartition(tx: Tx, q: { table: PartitionedTable; partition: string }): Promise<void> {
  await tx`ALTER TABLE ${tx(q.table)} DETACH PARTITION ${tx(q.partition)}`
  await tx`DROP TABLE ${tx(q.partition)}`
}

/** The months before `before` that still have a partition in any history table, oldest first. */
async function monthsBefore(sql: Sql, before: string): Promise<Map<string, Map<PartitionedTable, string>>> {
  const months = new Map<string, Map<PartitionedTable, string>>()
  for (const table of PARTITIONED_TABLES) {
    for (const p of await monthPartitions(sql, table)) {
      if (p.month >= before) continue
      if (!months.has(p.month)) months.set(p.month, new Map())
      months.get(p.month)!.set(table, p.name)
    }
  }
  return new Map([...months].sort(([a], [b]) => a.localeCompare(b)))
}

/**
 * Archives every month before `before` ('YYYY-MM'): refuses, before anything is written or dropped, a month
 * that is not closed or whose money is still open. Then month by month: each partition to
 * `<outDir>/<YYYY-MM>/<table>.tsv.gz` (read back and checked), the manifest, then one transaction that
 * checks the row counts did not move, carries the ledger sums forward, records the month, and drops.
 */
export async function archiveMonths(
  sql: Sql,
  q: { before: string; outDir: string; nowMs: number },
): Promise<ArchivedMonth[]> {
  if (!/^\d{4}-(0[1-9]|1[0-2])$/.test(q.before)) {
    throw new ArchiveRefused(`--before ${q.before}: expected a month as YYYY-MM`)
  }
  const current = monthOf(q.nowMs)
  if (q.before > current) {
    throw new ArchiveRefused(
      `--before ${q.before}: ${addMonths(q.before, -1)} is not closed yet (the current month is ${current}); ` +
        `only months before ${current} can be archived`,
    )
  }
  const months = await monthsBefore(sql, q.before)
  const refusals: string[] = []
  for (const month of months.keys()) {
    for (const why of await openMoney(sql, month)) refusals.push(`${month}: ${why}`)
  }
  if (refusals.length > 0) {
    throw new ArchiveRefused(`money still open, nothing archived:\n  ${refusals.join('\n  ')}`)
  }
  const done: ArchivedMonth[] = []
  for (const [month, partitions] of months) {
    done.push(await archiveMonth(sql, { month, partitions, dir: join(q.outDir, month) }))
  }
  return done
}

async function archiveMonth(
  sql: Sql,
  q: { month: string; partitions: Map<PartitionedTable, string>; dir: string },
): Promise<ArchivedMonth> {
  const counts = new Map<PartitionedTable, number>()
  const files: ArchivedFile[] = []
  for (const [table, name] of q.partitions) {
    const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM ${sql(name)}`
    counts.set(table, row!.n)
    files.push(await exportPartition(sql, { table, name, month: q.month, dir: q.dir, expectRows: row!.n }))
  }
  const ledger = q.partitions.get('ledger_entries')
  const [version] = await sql<{ name: string }[]>`SELECT max(name) AS name FROM schema_migrations`
  const ledgerSums = ledger
    ? await sql<Manifest['ledger_sums']>`
        SELECT account_id, kind, wallet, payout_id, count(*)::text AS entries, sum(amount_atomic)::text AS amount_atomic
        FROM ${sql(ledger)} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`
    : []
  await writeManifest(q.dir, {
    month: q.month,
    schema_version: version!.name,
    archived_at: new Date().toISOString(),
    files,
    ledger_sums: ledgerSums,
  })
  await sql.begin(async (tx) => {
    // Detaching locks the parent table, and for the ledger the payouts its foreign key references: all of
    // them first, in the order the writers take them (a payout is recorded before its entries are linked;
    // a capture inserts its call, then its entries), so a writer never holds one while waiting for another
    // held here (taken one at a time, a 10,000 calls/s intake deadlocked with it twice). Writers wait for
    // the commit: a count of each partition, the sums, the detach and drop.
    if (q.partitions.has('ledger_entries')) await tx`LOCK TABLE payouts IN SHARE ROW EXCLUSIVE MODE`
    for (const table of PARTITIONED_TABLES) {
      if (q.partitions.has(table)) await tx`LOCK TABLE ${tx(table)} IN ACCESS EXCLUSIVE MODE`
    }
    for (const [table, name] of q.partitions) {
      // No writer may slip a row in between the count checked here and the drop.
      const [row] = await tx<{ n: number }[]>`SELECT count(*)::int AS n FROM ${tx(name)}`
      if (row!.n !== counts.get(table)) {
        throw new ArchiveRefused(`${name}: ${row!.n} rows now, ${counts.get(table)} archived; run it again`)
      }
      const file = files.find((f) => f.table === table)!
      await tx`
        INSERT INTO archived_months (table_name, month, rows, sha256, file)
        VALUES (${table}, ${`${q.month}-01`}::date, ${file.rows}, ${file.sha256}, ${join(q.dir, file.file)})`
      if (table === 'ledger_entries') await archiveLedgerMonth(tx, { partition: name, month: q.month })
      else if (table === 'calls') await archiveCallsMonth(tx, { partition: name, month: q.month })
      else await dropPartition(tx, { table, partition: name })
    }
  })
  return { month: q.month, dir: q.dir, files }
}

/** The first instant after the last archived month (null: nothing archived): history before it is in files. */
export async function archivedThrough(db: Sql | Tx): Promise<Date | null> {
  const [row] = await db<{ month: Date | null }[]>`
    SELECT (max(month) + interval '1 month')::timestamp AT TIME ZONE 'UTC' AS month FROM archived_months`
  return row?.month ?? null
}
