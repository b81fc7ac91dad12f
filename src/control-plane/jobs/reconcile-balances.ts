// Reconcile, the running balances: the stored per-account and per-wallet totals (migration 0011, kept by
// triggers) against the same totals recomputed from the ledger entries, which stay the source of truth.
// Full: every account and wallet (one scan of the ledger). Incremental: only the accounts and wallets whose
// entries or payouts changed since the checkpoint, each recomputed from its own entries (index-served).
import type { Sql } from '../../db/sql.ts'

export interface BalancesCheck {
  accounts_checked: number
  wallets_checked: number
  /** Accounts whose stored balance differs from the sum of their entries. */
  drifted_accounts: number
  /** Wallets whose stored unpaid amount differs from the sum of their unpaid entries. */
  drifted_wallets: number
  differences: string[]
}

/**
 * What changed since the last clean run: entries above `entryId` (the checkpoint's high-water mark) or created
 * at or after `since` (a BRIN index: this also catches an entry whose id was taken before the mark but which
 * committed after it), and payouts touched at or after `since`.
 */
export interface BalancesScope {
  entryId?: bigint
  since: Date
}

/** At most this many accounts/wallets are named; the counts stay exact. */
const NAMED = 50

const COLUMNS = [
  'owner_share_atomic',
  'fees_atomic',
  'refunds_atomic',
  'paid_out_atomic',
  'in_flight_atomic',
  'refunded_atomic',
] as const

/** null scope: everything (the full run). */
export async function checkBalances(sql: Sql, scope: BalancesScope | null): Promise<BalancesCheck> {
  const accounts = await touchedAccounts(sql, scope)
  const wallets = await touchedWallets(sql, scope)
  const accountFilter = (alias: string) =>
    accounts === null ? sql`true` : sql`${sql(alias)}.account_id = ANY(${accounts}::text[])`
  const walletFilter = (alias: string) =>
    wallets === null ? sql`true` : sql`${sql(alias)}.wallet = ANY(${wallets}::text[])`
  const accountRows = await sql<Array<{ account_id: string; stored: string; recomputed: string; n: number }>>`
    WITH s AS (SELECT * FROM account_balance_totals s WHERE ${accountFilter('s')}),
         r AS (SELECT * FROM account_balances_recomputed r WHERE ${accountFilter('r')}),
         j AS (
           SELECT coalesce(s.account_id, r.account_id) AS account_id,
                  ${sql.unsafe(COLUMNS.map((c) => `coalesce(s.${c}, 0)`).join(" || '/' || "))} AS stored,
                  ${sql.unsafe(COLUMNS.map((c) => `coalesce(r.${c}, 0)`).join(" || '/' || "))} AS recomputed
           FROM s FULL JOIN r ON r.account_id = s.account_id
         )
    SELECT account_id, stored, recomputed, (SELECT count(*)::int FROM j) AS n FROM j
    WHERE stored <> recomputed ORDER BY account_id`
  const walletRows = await sql<Array<{ wallet: string; stored: bigint; recomputed: bigint; n: number }>>`
    WITH s AS (SELECT * FROM wallet_balance_totals s WHERE ${walletFilter('s')}),
         r AS (SELECT * FROM wallet_balances_recomputed r WHERE ${walletFilter('r')}),
         j AS (
           SELECT coalesce(s.wallet, r.wallet) AS wallet, coalesce(s.unpaid_atomic, 0) AS stored,
                  coalesce(r.unpaid_atomic, 0) AS recomputed
           FROM s FULL JOIN r ON r.wallet = s.wallet
         )
    SELECT wallet, stored, recomputed, (SELECT count(*)::int FROM j) AS n FROM j
    WHERE stored <> recomputed ORDER BY wallet`
  const counted = await sql<{ a: number; w: number }[]>`
    SELECT (SELECT count(*)::int FROM account_balance_totals s WHERE ${accountFilter('s')}) AS a,
           (SELECT count(*)::int FROM wallet_balance_totals s WHERE ${walletFilter('s')}) AS w`
  const differences = [
    ...accountRows
      .slice(0, NAMED)
      .map(
        (r) =>
          `balance of account ${r.account_id}: stored ${r.stored} ≠ entries ${r.recomputed} (${COLUMNS.join('/')})`,
      ),
    ...walletRows
      .slice(0, NAMED)
      .map((r) => `unpaid balance of wallet ${r.wallet}: stored ${r.stored} ≠ entries ${r.recomputed}`),
  ]
  if (accountRows.length > NAMED) differences.push(`… and ${accountRows.length - NAMED} more accounts`)
  if (walletRows.length > NAMED) differences.push(`… and ${walletRows.length - NAMED} more wallets`)
  return {
    accounts_checked: accounts?.length ?? counted[0]!.a,
    wallets_checked: wallets?.length ?? counted[0]!.w,
    drifted_accounts: accountRows.length,
    drifted_wallets: walletRows.length,
    differences,
  }
}

function newEntries(sql: Sql, scope: BalancesScope) {
  return scope.entryId === undefined
    ? sql`created_at >= ${scope.since}`
    : sql`(id > ${scope.entryId.toString()}::bigint OR created_at >= ${scope.since})`
}

/** Accounts with a new entry, or in a payout created, confirmed or failed since; null = all. */
async function touchedAccounts(sql: Sql, scope: BalancesScope | null): Promise<string[] | null> {
  if (!scope) return null
  const rows = await sql<{ account_id: string }[]>`
    SELECT DISTINCT account_id FROM ledger_entries
    WHERE ${newEntries(sql, scope)} AND account_id IS NOT NULL
    UNION
    SELECT pa.account_id FROM payout_accounts pa JOIN (${changedPayouts(sql, scope.since)}) p ON p.id = pa.payout_id`
  return rows.map((r) => r.account_id)
}

/** Wallets with a new entry, or paid by a payout created, confirmed or failed since; null = all. */
async function touchedWallets(sql: Sql, scope: BalancesScope | null): Promise<string[] | null> {
  if (!scope) return null
  const rows = await sql<{ wallet: string }[]>`
    SELECT DISTINCT wallet FROM ledger_entries
    WHERE ${newEntries(sql, scope)} AND wallet IS NOT NULL
    UNION
    SELECT p.wallet FROM (${changedPayouts(sql, scope.since)}) p`
  return rows.map((r) => r.wallet)
}

/** Payouts whose status may have moved since `since` (each branch served by an index on its column). */
function changedPayouts(sql: Sql, since: Date) {
  return sql`
    SELECT id, wallet FROM payouts WHERE created_at >= ${since}
    UNION SELECT id, wallet FROM payouts WHERE confirmed_at >= ${since}
    UNION SELECT id, wallet FROM payouts WHERE failed_at >= ${since}
    UNION SELECT id, wallet FROM payouts WHERE status IN ('pending', 'submitted')`
}

/** What the balance snapshots cover: entries up to `entryId`, payouts confirmed before `confirmedBefore`. */
export interface BalanceMarks {
  entryId: bigint
  confirmedBefore: Date
}

/**
 * Marks safely behind now: an entry or a confirmation is stamped with its transaction's start time, so one
 * still committing may carry a time (and an id) from before now; none stays open this long.
 */
export async function marksBehindNow(sql: Sql, lagMs = 60_000): Promise<BalanceMarks> {
  const [row] = await sql<{ id: bigint | null; t: Date }[]>`
    SELECT (SELECT max(id) FROM ledger_entries WHERE created_at < now() - ${lagMs} * interval '1 millisecond') AS id,
           now() - ${lagMs} * interval '1 millisecond' AS t`
  return { entryId: row?.id ?? 0n, confirmedBefore: row!.t }
}

/**
 * The incremental balance check, in one repeatable-read snapshot: for every account with entries after
 * `from.entryId`, in a payout confirmed since `from.confirmedBefore` or in an open payout, stored totals =
 * its snapshot + what its entries added since; every wallet's unpaid amount = its unpaid entries (those are
 * what is owed, not history). `save` (call it only after a clean run) rolls the touched snapshots forward
 * to `to`, from the entries alone.
 */
export async function checkBalancesSince(
  sql: Sql,
  from: BalanceMarks,
  to: BalanceMarks,
): Promise<{ check: BalancesCheck; save(): Promise<void> }> {
  const fromId = from.entryId.toString()
  const toId = to.entryId.toString()
  return sql.begin(async (tx) => {
    await tx`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`
    const touched = (
      await tx<{ account_id: string }[]>`
        SELECT DISTINCT account_id FROM ledger_entries WHERE id > ${fromId}::bigint AND account_id IS NOT NULL
        UNION
        SELECT pa.account_id FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
        WHERE (p.status = 'confirmed' AND p.confirmed_at >= ${from.confirmedBefore})
           OR p.status IN ('pending', 'submitted')`
    ).map((r) => r.account_id)
    // Per touched account: snapshot + entries since (by kind), + entries of payouts confirmed since, and
    // in flight from the open payouts; against the stored totals.
    const accounts = await tx<Array<{ account_id: string; stored: string; expected: string }>>`
      WITH t AS (SELECT unnest(${touched}::text[]) AS account_id),
      added AS (
        SELECT e.account_id,
               coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0) AS owner_share,
               coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0) AS fees,
               coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund'), 0) AS refunds
        FROM ledger_entries e WHERE e.id > ${fromId}::bigint AND e.account_id IS NOT NULL GROUP BY e.account_id
      ),
      confirmed AS (
        SELECT e.account_id,
               coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0) AS paid_out,
               coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
        FROM payouts p JOIN ledger_entries e ON e.payout_id = p.id
        WHERE p.status = 'confirmed' AND p.confirmed_at >= ${from.confirmedBefore} GROUP BY e.account_id
      ),
      open AS (
        SELECT e.account_id, coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0) AS in_flight
        FROM payouts p JOIN ledger_entries e ON e.payout_id = p.id
        WHERE p.status IN ('pending', 'submitted') GROUP BY e.account_id
      ),
      j AS (
        SELECT t.account_id,
               concat_ws('/', coalesce(b.owner_share_atomic, 0), coalesce(b.fees_atomic, 0), coalesce(b.refunds_atomic, 0),
                         coalesce(b.paid_out_atomic, 0), coalesce(b.in_flight_atomic, 0), coalesce(b.refunded_atomic, 0))
                 AS stored,
               concat_ws('/', coalesce(s.owner_share_atomic, 0) + coalesce(a.owner_share, 0),
                         coalesce(s.fees_atomic, 0) + coalesce(a.fees, 0),
                         coalesce(s.refunds_atomic, 0) + coalesce(a.refunds, 0),
                         coalesce(s.paid_out_atomic, 0) + coalesce(c.paid_out, 0), coalesce(o.in_flight, 0),
                         coalesce(s.refunded_atomic, 0) + coalesce(c.refunded, 0)) AS expected
        FROM t
        LEFT JOIN account_balance_totals b ON b.account_id = t.account_id
        LEFT JOIN reconcile_balance_snapshots s ON s.account_id = t.account_id
        LEFT JOIN added a ON a.account_id = t.account_id
        LEFT JOIN confirmed c ON c.account_id = t.account_id
        LEFT JOIN open o ON o.account_id = t.account_id
      )
      SELECT account_id, stored, expected FROM j WHERE stored <> expected ORDER BY account_id`
    const wallets = await tx<Array<{ wallet: string; stored: bigint; recomputed: bigint }>>`
      WITH r AS (
        SELECT e.wallet, sum(e.amount_atomic)::bigint AS unpaid FROM ledger_entries e
        WHERE e.payout_id IS NULL AND e.kind IN ('owner_share', 'refund') AND e.wallet IS NOT NULL
        GROUP BY e.wallet
      ),
      s AS (SELECT wallet, unpaid_atomic FROM wallet_balance_totals WHERE unpaid_atomic <> 0)
      SELECT coalesce(s.wallet, r.wallet) AS wallet, coalesce(s.unpaid_atomic, 0) AS stored,
             coalesce(r.unpaid, 0) AS recomputed
      FROM s FULL JOIN r ON r.wallet = s.wallet
      WHERE coalesce(s.unpaid_atomic, 0) <> coalesce(r.unpaid, 0) ORDER BY 1`
    const [w] = await tx<{ n: number }[]>`SELECT count(DISTINCT wallet)::int AS n FROM wallet_balances`
    const differences = [
      ...accounts
        .slice(0, NAMED)
        .map(
          (r) =>
            `balance of account ${r.account_id}: stored ${r.stored} ≠ snapshot + entries since ${r.expected} (${COLUMNS.join('/')})`,
        ),
      ...wallets
        .slice(0, NAMED)
        .map((r) => `unpaid balance of wallet ${r.wallet}: stored ${r.stored} ≠ entries ${r.recomputed}`),
    ]
    if (accounts.length > NAMED) differences.push(`… and ${accounts.length - NAMED} more accounts`)
    if (wallets.length > NAMED) differences.push(`… and ${wallets.length - NAMED} more wallets`)
    const check: BalancesCheck = {
      accounts_checked: touched.length,
      wallets_checked: w?.n ?? 0,
      drifted_accounts: accounts.length,
      drifted_wallets: wallets.length,
      differences,
    }
    return { check, save: () => rollSnapshots(sql, { touched, from, to: { ...to, entryId: BigInt(toId) } }) }
  }) as Promise<{ check: BalancesCheck; save(): Promise<void> }>
}

/** Snapshots of the touched accounts moved from `from` to `to`, by the entries between the two marks. */
async function rollSnapshots(
  sql: Sql,
  q: { touched: string[]; from: BalanceMarks; to: BalanceMarks },
): Promise<void> {
  if (q.touched.length === 0) return
  await sql`
    WITH t AS (SELECT unnest(${q.touched}::text[]) AS account_id),
    added AS (
      SELECT e.account_id,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0) AS owner_share,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0) AS fees,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund'), 0) AS refunds
      FROM ledger_entries e
      WHERE e.id > ${q.from.entryId.toString()}::bigint AND e.id <= ${q.to.entryId.toString()}::bigint
        AND e.account_id IS NOT NULL
      GROUP BY e.account_id
    ),
    confirmed AS (
      SELECT e.account_id,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0) AS paid_out,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
      FROM payouts p JOIN ledger_entries e ON e.payout_id = p.id
      WHERE p.status = 'confirmed' AND p.confirmed_at >= ${q.from.confirmedBefore}
        AND p.confirmed_at < ${q.to.confirmedBefore}
      GROUP BY e.account_id
    )
    INSERT INTO reconcile_balance_snapshots AS s (account_id, owner_share_atomic, fees_atomic, refunds_atomic,
                                                  paid_out_atomic, refunded_atomic)
    SELECT t.account_id, coalesce(a.owner_share, 0), coalesce(a.fees, 0), coalesce(a.refunds, 0),
           coalesce(c.paid_out, 0), coalesce(c.refunded, 0)
    FROM t LEFT JOIN added a ON a.account_id = t.account_id LEFT JOIN confirmed c ON c.account_id = t.account_id
    ON CONFLICT (account_id) DO UPDATE SET
      owner_share_atomic = s.owner_share_atomic + EXCLUDED.owner_share_atomic,
      fees_atomic = s.fees_atomic + EXCLUDED.fees_atomic,
      refunds_atomic = s.refunds_atomic + EXCLUDED.refunds_atomic,
      paid_out_atomic = s.paid_out_atomic + EXCLUDED.paid_out_atomic,
      refunded_atomic = s.refunded_atomic + EXCLUDED.refunded_atomic`
}

/** After a clean full run: every account's snapshot recomputed from the entries as of `to` (a ledger scan). */
export async function resetSnapshots(sql: Sql, to: BalanceMarks): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`DELETE FROM reconcile_balance_snapshots`
    await tx`
      INSERT INTO reconcile_balance_snapshots (account_id, owner_share_atomic, fees_atomic, refunds_atomic,
                                               paid_out_atomic, refunded_atomic)
      SELECT e.account_id,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND e.id <= ${to.entryId.toString()}::bigint), 0),
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee' AND e.id <= ${to.entryId.toString()}::bigint), 0),
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND e.id <= ${to.entryId.toString()}::bigint), 0),
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status = 'confirmed'
                                                   AND p.confirmed_at < ${to.confirmedBefore}), 0),
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND p.status = 'confirmed'
                                                   AND p.confirmed_at < ${to.confirmedBefore}), 0)
      -- Archived months count as their carried sums (all older than any mark: id 0).
      FROM (SELECT id, account_id, kind, amount_atomic, payout_id FROM ledger_entries
            UNION ALL
            SELECT 0, account_id, kind, amount_atomic, payout_id FROM archived_ledger_sums) e
      LEFT JOIN payouts p ON p.id = e.payout_id
      WHERE e.account_id IS NOT NULL
      GROUP BY e.account_id`
  })
}
