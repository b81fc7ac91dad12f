// Ledger entries: appended (revenue of a capture batch or of a call, refunds), and linked to / unlinked from
// the payout that pays them. Nothing else ever changes an entry.
import type { PendingQuery, Row } from 'postgres'
import type { Sql, Tx } from '../db/sql.ts'

type Db = Sql | Tx

/** Which statement booked a batch: a capture (transaction-hash calls), or a settlement (x402 calls). */
export type BatchSource = 'capture_batch' | 'settlement_batch'

/**
 * The owner share and fee entries of a batch of calls booked by one statement (migrations 0050, 0064): one
 * owner share per account and owner wallet, one fee per account, each the sum over the batch's calls,
 * source `source` and source_id `batchId` (the number the calls carry in ledger_batch_id: positive for a
 * capture batch, negative for a settlement batch). `calls` has the columns account_id, owner_wallet,
 * owner_share, fee. Zero sums are booked too, so every account of a batch has both its entries and
 * reconcile can ask for exactly them.
 */
export function batchRevenueEntries(
  db: Db,
  q: { calls: PendingQuery<Row[]>; batchId: PendingQuery<Row[]>; source: BatchSource },
): PendingQuery<Row[]> {
  return db`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT r.account_id, 'owner_share', r.owner_wallet, sum(r.owner_share)::bigint, ${q.source}::text,
           ${q.batchId}::text
    FROM ${q.calls} r GROUP BY r.account_id, r.owner_wallet
    UNION ALL
    SELECT r.account_id, 'fee', NULL, sum(r.fee)::bigint, ${q.source}::text, ${q.batchId}::text
    FROM ${q.calls} r GROUP BY r.account_id`
}

/**
 * A usage-priced call paid by a prepaid ceiling (a transaction hash for more than the charge): the unused
 * part goes back to the payer, a refund entry paid in the next payout batch. `calls` has the columns call_id,
 * account_id, payer, refund (> 0). Booked in the capture statement itself, so a capture never exists without
 * the refund it owes.
 */
export function unusedCeilingRefunds(db: Db, calls: PendingQuery<Row[]>): PendingQuery<Row[]> {
  return db`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT r.account_id, 'refund', r.payer, r.refund, 'call', r.call_id FROM ${calls} r`
}

/**
 * A usage-priced call paid by an authorization for its ceiling (MPP evm charge) refunds its unused part only
 * once the authorization settled (the money is in; an authorization that never settles owes nothing back):
 * one refund entry per call of these claims whose call has refund_atomic > 0 and no refund entry yet, paid
 * in the next payout batch. Idempotent, like bookCallRevenue beside which settleAuthorizations calls it.
 */
export async function bookSettledCeilingRefunds(db: Tx, q: { proofKeys: string[] }): Promise<number> {
  if (q.proofKeys.length === 0) return 0
  const rows = await db`
    ${unusedCeilingRefunds(
      db,
      db`(SELECT k.id AS call_id, k.account_id, call_payer(k.payer, k.payer_address) AS payer,
                 k.refund_atomic AS refund
          FROM claims j JOIN calls k ON k.id = j.call_id
          WHERE j.proof_key = ANY(${q.proofKeys}::text[]) AND j.kind = 'eip3009' AND j.settled_at IS NOT NULL
            AND k.refund_atomic > 0
            AND NOT EXISTS (SELECT 1 FROM ledger_entries e
                            WHERE e.source_type = 'call' AND e.source_id = k.id AND e.kind = 'refund'))`,
    )}
    RETURNING 1`
  return rows.length
}

/**
 * Books the revenue (owner share + fee) of settled x402 calls that have none yet, as ONE settlement batch
 * (migration 0064): each call is marked with the batch's number (negative), and the batch gets one owner
 * share per account and owner wallet and one fee per account, the sums of the calls it marked. Used by the
 * settlement room (revenue only once the authorization, permit or voucher settled); transaction-hash calls
 * are booked inside their capture. Idempotent: a call already booked (by a batch, or by entries of its own
 * before migration 0064) is skipped. Returns how many calls were booked.
 */
export async function bookCallRevenue(db: Tx, q: { proofKeys: string[] }): Promise<number> {
  if (q.proofKeys.length === 0) return 0
  // One index look-up of its claim and of its call per key, whatever the tables held when they were last
  // analysed or first planned. Driven from the keys (each LATERAL kept apart by OFFSET 0): as a plain join on
  // statistics of small tables, the plan walked every call of the account for each key found. Planned afresh
  // at every execution: a generic plan the connection kept from when a partition was small (the day's
  // claims, the vouchers', a new month of calls) scanned it whole once per key. Either ran a channel claim
  // of 80,000 calls past the statement timeout on every retry, and the claim was never recorded.
  // (Never JIT-compiled either, as no statement of this service is: src/db/sql.ts. Here it once cost most:
  // on partitions never analysed each key's probe was costed at dozens of rows, a batch of a few hundred keys
  // passed jit_above_cost, and on x402-capacity a batch took 1.3 s, 1,339 µs of PostgreSQL a call; 32 without.)
  await db`SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`
  const [due] = await db<{ ids: string[] | null; since: string | null; until: string | null }[]>`
    SELECT array_agg(k.id) AS ids, min(k.created_at)::text AS since, max(k.created_at)::text AS until
    FROM unnest(${q.proofKeys}::text[]) AS p(proof_key)
    -- From the proof to its call by the call its claim names (migration 0059).
    CROSS JOIN LATERAL (SELECT j.call_id FROM claims j WHERE j.proof_key = p.proof_key OFFSET 0) j
    CROSS JOIN LATERAL (SELECT c.id, c.created_at, c.ledger_batch_id FROM calls c
                        WHERE c.id = j.call_id OFFSET 0) k
    -- Not booked: by a batch, or (before migration 0064) by entries of its own.
    WHERE k.ledger_batch_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM ledger_entries e
                      WHERE e.source_type = 'call' AND e.source_id = k.id AND e.kind <> 'refund')`
  if (!due?.ids) return 0
  return bookNamedCalls(db, { ids: due.ids, since: due.since!, until: due.until! })
}

/**
 * A settled claim's call as its claim names it. Its capture wrote the call row in the claim's own statement
 * (claimAndCapture, writeChannelVouchers), so the call's created_at is the claim's captured_at, here in UTC
 * to the microsecond at a fixed width (SETTLED_CALL), so the earliest and latest sort as text.
 */
export interface SettledCall {
  proofKey: string
  callId: string
  capturedAt: string
}

/**
 * The columns a settlement statement returns for SettledCall, of its claims row `k`: the call it names and
 * its capture time as fixed-width UTC text (the driver would bring a timestamptz to the millisecond only).
 */
export const SETTLED_CALL = `k.call_id, to_char(k.captured_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS captured_utc`

/** The settled calls among a settlement statement's rows (those naming a call). */
export function settledCalls(
  rows: ReadonlyArray<{ proof_key: string; call_id: string | null; captured_utc: string | null }>,
): SettledCall[] {
  return rows.flatMap((r) =>
    r.call_id === null || r.captured_utc === null
      ? []
      : [{ proofKey: r.proof_key, callId: r.call_id, capturedAt: r.captured_utc }],
  )
}

/**
 * bookCallRevenue for calls whose settlement statement returned them (its claims' call ids and capture
 * times): no look-up from proof to call, the booking names its calls and their months. A call the booking
 * did not find at that time, or found booked, is looked for from its proof as bookCallRevenue does, which
 * books it if it was not (two more statements, only then). No call here was booked by entries of its own
 * (before migration 0064): those were booked in the transaction that settled their claims, and only claims
 * not settled yet reach this. Returns how many calls were booked.
 */
export async function bookSettledCalls(db: Tx, calls: SettledCall[]): Promise<number> {
  if (calls.length === 0) return 0
  let since = calls[0]!.capturedAt
  let until = since
  for (const c of calls) {
    if (c.capturedAt < since) since = c.capturedAt
    if (c.capturedAt > until) until = c.capturedAt
  }
  await db`SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`
  const booked = await bookNamedCalls(db, { ids: calls.map((c) => c.callId), since, until })
  if (booked === calls.length) return booked
  return booked + (await bookCallRevenue(db, { proofKeys: calls.map((c) => c.proofKey) }))
}

/** The booking itself: the named calls of that span not booked yet, as one settlement batch. */
async function bookNamedCalls(db: Tx, q: { ids: string[]; since: string; until: string }): Promise<number> {
  // The update names its calls by their ids, given (and their months, to leave the other partitions out):
  // an index probe per call whatever the statistics. As a join with a look-up statement, the planner
  // hashed the due calls against a sequential scan of every partition of calls, once per batch (the 80,000
  // calls of the bench's channel claims took 70 s to book instead of 20); with hash joins forbidden, it
  // probed the ledger per call with a sequential scan of a month whose statistics predated its entries.
  const [row] = await db<{ n: number }[]>`
    -- The batch's number, taken only if a call is booked (a scalar subquery: evaluated at most once).
    WITH settlement_batch AS MATERIALIZED (SELECT -nextval('ledger_batch_ids') AS id),
    -- The call row's one update: NULL → the batch. Its precondition is made again on the row as locked, so
    -- a call booked meanwhile by another statement is left out of this batch's sums.
    booked AS (
      UPDATE calls c SET ledger_batch_id = (SELECT id FROM settlement_batch)
      -- The bounds travel as text: the driver sends a timestamptz parameter to the millisecond only.
      WHERE c.id = ANY(${q.ids}::text[]) AND c.created_at >= ${q.since}::text::timestamptz
        AND c.created_at <= ${q.until}::text::timestamptz AND c.ledger_batch_id IS NULL
      RETURNING c.account_id, c.owner_share_atomic AS owner_share, c.fee_atomic AS fee
    ),
    revenue AS (
      ${batchRevenueEntries(db, {
        calls: db`(SELECT b.*, a.wallet_address AS owner_wallet FROM booked b JOIN accounts a ON a.id = b.account_id)`,
        batchId: db`(SELECT id FROM settlement_batch)`,
        source: 'settlement_batch',
      })}
      RETURNING 1
    )
    SELECT count(*)::int AS n FROM booked`
  return row?.n ?? 0
}

/** What a payout's linked entries add up to, per account (account_id null: entries of no account). */
export interface LinkedPart {
  payout_id: string
  account_id: string | null
  owner_share_atomic: bigint
  refund_atomic: bigint
  entries_count: number
}

/**
 * Links entries to the payouts that pay them; only entries not in a payout yet (`payout_id IS NULL`).
 * `entryIds` is a PostgreSQL bigint[] literal (as lockPayableBatch returns it). Returns what was linked,
 * summed per payout and account in SQL: an entry already in a payout is left alone and missing from the sums.
 */
export async function linkEntriesToPayouts(
  tx: Tx,
  links: Array<{ payoutId: string; entryIds: string }>,
): Promise<LinkedPart[]> {
  if (links.length === 0) return []
  return tx<LinkedPart[]>`
    WITH m AS (
      SELECT l.payout_id, unnest(l.ids::bigint[]) AS id
      FROM unnest(${links.map((l) => l.payoutId)}::text[], ${links.map((l) => l.entryIds)}::text[])
        AS l(payout_id, ids)
    ),
    linked AS (
      UPDATE ledger_entries e SET payout_id = m.payout_id
      FROM m
      WHERE e.id = m.id AND e.payout_id IS NULL
      RETURNING e.payout_id, e.account_id, e.kind, e.amount_atomic
    )
    SELECT payout_id, account_id,
           coalesce(sum(amount_atomic) FILTER (WHERE kind <> 'refund'), 0)::bigint AS owner_share_atomic,
           coalesce(sum(amount_atomic) FILTER (WHERE kind = 'refund'), 0)::bigint AS refund_atomic,
           count(*)::int AS entries_count
    FROM linked GROUP BY payout_id, account_id`
}

/**
 * Entries of a failed payout go back to unpaid, to be batched again after the backoff; a merchant's refund
 * (source 'refund') stays with the failed payout, where failRefunds reversed it.
 */
export async function unlinkEntries(tx: Tx, payoutId: string): Promise<number> {
  const rows = await tx`
    UPDATE ledger_entries SET payout_id = NULL
    WHERE payout_id = ${payoutId} AND NOT (source_type = 'refund' AND kind = 'refund')
    RETURNING id`
  return rows.length
}
