// Payout rows: recorded (with nonce, signed transaction and hash) before broadcast, then submitted, then
// confirmed or failed. Every status change writes its events in the same transaction (the outbox).
import { newId } from '../ids.ts'
import { toDollars } from '../money.ts'
import { insertEvent } from './events.ts'
import { linkEntriesToPayouts, lockPayableEntries, type PayableEntry, unlinkEntries } from './ledger.ts'
import type { Sql, Tx } from './sql.ts'

export type PayoutStatus = 'pending' | 'submitted' | 'confirmed' | 'failed'
export type PayoutKind = 'payout' | 'refund' | 'mixed'

export interface PayoutRow {
  id: string
  wallet: string
  amount_atomic: bigint
  kind: PayoutKind
  status: PayoutStatus
  treasury: string
  nonce: bigint
  tx_hash: string
  raw_tx: string
  previous_tx_hashes: string[]
  block_number: bigint | null
  entries_count: number
  attempts: number
  last_error: string | null
  created_at: Date
  submitted_at: Date | null
  confirmed_at: Date | null
  failed_at: Date | null
  retry_at: Date | null
}

const COLUMNS =
  'id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, raw_tx, previous_tx_hashes, block_number, entries_count, attempts, last_error, created_at, submitted_at, confirmed_at, failed_at, retry_at'

/** The public shape of a payout: the API's and the payout.* events' data. */
export function payoutObject(p: PayoutRow, account?: { amount_atomic: bigint } | null) {
  return {
    id: p.id,
    object: 'payout',
    status: p.status,
    kind: p.kind,
    wallet: p.wallet,
    amount: toDollars(p.amount_atomic),
    amount_atomic: p.amount_atomic.toString(),
    ...(account ? { account_amount_atomic: account.amount_atomic.toString() } : {}),
    currency: 'USDC',
    transaction: p.status === 'pending' && !p.submitted_at ? null : p.tx_hash,
    nonce: Number(p.nonce),
    block_number: p.block_number === null ? null : Number(p.block_number),
    entries_count: p.entries_count,
    attempts: p.attempts,
    failure_reason: p.last_error,
    created_at: p.created_at.toISOString(),
    submitted_at: p.submitted_at?.toISOString() ?? null,
    confirmed_at: p.confirmed_at?.toISOString() ?? null,
    failed_at: p.failed_at?.toISOString() ?? null,
    next_attempt_at: p.status === 'failed' ? (p.retry_at?.toISOString() ?? null) : null,
  }
}

/** Payouts whose outcome is not known yet, in nonce order: they are resolved before anything new is sent. */
export async function openPayouts(db: Sql | Tx): Promise<PayoutRow[]> {
  return db<PayoutRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM payouts WHERE status IN ('pending', 'submitted') ORDER BY treasury, nonce`
}

/** The highest nonce ever recorded for a treasury (new payouts never reuse one), or -1. */
export async function highestRecordedNonce(db: Sql | Tx, treasury: string): Promise<number> {
  const [row] = await db<
    { n: bigint | null }[]
  >`SELECT max(nonce) AS n FROM payouts WHERE treasury = ${treasury}`
  return row?.n === null || row?.n === undefined ? -1 : Number(row.n)
}

export interface PlannedPayout {
  wallet: string
  amountAtomic: bigint
  kind: PayoutKind
  entries: PayableEntry[]
}

export type BatchRefusal = { reason: 'usdc_short' | 'gas_short'; detail: string }

export interface RecordBatchOptions {
  treasury: string
  /** First nonce to use: the treasury's pending nonce (and above any nonce already recorded). */
  firstNonce: number
  minAtomic: bigint
  maxWallets: number
  maxEntries: number
  /** Checks the batch against the treasury's funds; a refusal records nothing. */
  afford(total: bigint, count: number): BatchRefusal | null
  /** Signs one transfer locally (no RPC inside the transaction). */
  sign(p: { wallet: string; amountAtomic: bigint; nonce: number }): Promise<{ rawTx: string; hash: string }>
}

export type RecordBatchResult =
  | { ok: true; payouts: PayoutRow[]; waiting: number }
  | { ok: false; refusal: BatchRefusal; waiting: number }

/**
 * One transaction: lock the payable entries, sum them per wallet, keep the sums ≥ min, check funds, sign one
 * transfer per wallet on consecutive nonces, record the payouts (status pending) and link their entries.
 * Only after this commits may anything be broadcast.
 */
export async function recordBatch(sql: Sql, o: RecordBatchOptions): Promise<RecordBatchResult> {
  return sql.begin(async (tx) => {
    // Two batchers (a leadership hand-over, a manual run) serialise here; the unique (treasury, nonce)
    // index and `payout_id IS NULL` are the second and third lines of defence.
    await tx`SELECT pg_advisory_xact_lock(${PAYOUT_RECORD_LOCK})`
    const entries = await lockPayableEntries(tx, { limit: o.maxEntries })
    const byWallet = new Map<string, PlannedPayout>()
    for (const e of entries) {
      const key = e.wallet.toLowerCase()
      let p = byWallet.get(key)
      if (!p) {
        p = {
          wallet: e.wallet,
          amountAtomic: 0n,
          kind: e.kind === 'refund' ? 'refund' : 'payout',
          entries: [],
        }
        byWallet.set(key, p)
      }
      p.amountAtomic += e.amount_atomic
      if ((p.kind === 'refund') !== (e.kind === 'refund')) p.kind = 'mixed'
      p.entries.push(e)
    }
    const all = [...byWallet.values()]
    const payable = all
      .filter((p) => p.amountAtomic >= o.minAtomic && p.amountAtomic > 0n)
      .sort((a, b) => (a.amountAtomic > b.amountAtomic ? -1 : a.amountAtomic < b.amountAtomic ? 1 : 0))
      .slice(0, o.maxWallets)
    const waiting = all.length - payable.length
    if (payable.length === 0) return { ok: true, payouts: [], waiting }
    const total = payable.reduce((s, p) => s + p.amountAtomic, 0n)
    const refusal = o.afford(total, payable.length)
    if (refusal) return { ok: false, refusal, waiting }

    const recorded = await highestRecordedNonce(tx, o.treasury)
    let nonce = Math.max(o.firstNonce, recorded + 1)
    const previous = await tx<{ wallet: string; status: PayoutStatus; attempts: number }[]>`
      SELECT DISTINCT ON (wallet) wallet, status, attempts FROM payouts
      WHERE wallet = ANY(${payable.map((p) => p.wallet)}::text[])
      ORDER BY wallet, created_at DESC`
    const lastOf = new Map(previous.map((r) => [r.wallet.toLowerCase(), r]))
    const rows: PayoutRow[] = []
    const links: Array<{ entryId: bigint; payoutId: string }> = []
    const perAccount: Array<[string, string, bigint, bigint, number]> = []
    for (const p of payable) {
      const id = newId('po')
      const signed = await o.sign({ wallet: p.wallet, amountAtomic: p.amountAtomic, nonce })
      const last = lastOf.get(p.wallet.toLowerCase())
      const attempts = last?.status === 'failed' ? last.attempts + 1 : 1
      const [row] = await tx<PayoutRow[]>`
        INSERT INTO payouts (id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, raw_tx,
                             entries_count, attempts)
        VALUES (${id}, ${p.wallet}, ${p.amountAtomic.toString()}::bigint, ${p.kind}, 'pending', ${o.treasury},
                ${nonce}, ${signed.hash}, ${signed.rawTx}, ${p.entries.length}, ${attempts})
        RETURNING ${tx.unsafe(COLUMNS)}`
      rows.push(row!)
      nonce++
      const accounts = new Map<string, { owner: bigint; refund: bigint; n: number }>()
      for (const e of p.entries) {
        links.push({ entryId: e.id, payoutId: id })
        if (!e.account_id) continue
        const a = accounts.get(e.account_id) ?? { owner: 0n, refund: 0n, n: 0 }
        if (e.kind === 'refund') a.refund += e.amount_atomic
        else a.owner += e.amount_atomic
        a.n++
        accounts.set(e.account_id, a)
      }
      for (const [accountId, a] of accounts) perAccount.push([id, accountId, a.owner, a.refund, a.n])
    }
    const linked = await linkEntriesToPayouts(tx, links)
    // Entries are locked, so this cannot happen; if it ever did, nothing may be sent on wrong amounts.
    if (linked !== links.length) throw new Error(`payout batch linked ${linked} of ${links.length} entries`)
    if (perAccount.length) {
      await tx`
        INSERT INTO payout_accounts (payout_id, account_id, owner_share_atomic, refund_atomic, entries_count)
        SELECT * FROM unnest(${perAccount.map((a) => a[0])}::text[], ${perAccount.map((a) => a[1])}::text[],
                             ${perAccount.map((a) => a[2].toString())}::bigint[],
                             ${perAccount.map((a) => a[3].toString())}::bigint[], ${perAccount.map((a) => a[4])}::int[])`
    }
    return { ok: true, payouts: rows, waiting }
  }) as Promise<RecordBatchResult>
}

/** Arbitrary but fixed, distinct from the leader and migration locks. */
export const PAYOUT_RECORD_LOCK = 7_301_006

export async function markSubmitted(db: Sql | Tx, id: string): Promise<void> {
  await db`
    UPDATE payouts SET status = 'submitted', submitted_at = coalesce(submitted_at, now())
    WHERE id = ${id} AND status = 'pending'`
}

export async function recordBroadcastError(db: Sql | Tx, id: string, error: string): Promise<void> {
  await db`UPDATE payouts SET last_error = ${error.slice(0, 500)} WHERE id = ${id} AND status IN ('pending', 'submitted')`
}

/** A fee bump: the same nonce signed again. The old hash is kept: it may still be the one that is mined. */
export async function replacePayoutTx(
  db: Sql | Tx,
  p: { id: string; hash: string; rawTx: string },
): Promise<void> {
  await db`
    UPDATE payouts SET previous_tx_hashes = previous_tx_hashes || tx_hash, tx_hash = ${p.hash}, raw_tx = ${p.rawTx}
    WHERE id = ${p.id} AND status IN ('pending', 'submitted')`
}

export interface ConfirmedPayout {
  payout: PayoutRow
  events: number
}

/**
 * Marks a payout confirmed with the hash that was mined, flips its refunded claims, and writes payout.sent
 * (one per account with owner shares in it) and call.refunded (one per refunded call) in the same
 * transaction. Null when another run already resolved it.
 */
export async function confirmPayout(
  sql: Sql,
  p: { id: string; hash: string; blockNumber: bigint },
): Promise<ConfirmedPayout | null> {
  return sql.begin(async (tx) => {
    const [row] = await tx<PayoutRow[]>`
      UPDATE payouts SET status = 'confirmed', confirmed_at = now(), tx_hash = ${p.hash},
             block_number = ${p.blockNumber.toString()}::bigint, submitted_at = coalesce(submitted_at, now()),
             last_error = NULL
      WHERE id = ${p.id} AND status IN ('pending', 'submitted')
      RETURNING ${tx.unsafe(COLUMNS)}`
    if (!row) return null
    let events = 0
    const accounts = await tx<{ account_id: string; owner_share_atomic: bigint }[]>`
      SELECT account_id, owner_share_atomic FROM payout_accounts WHERE payout_id = ${row.id} AND owner_share_atomic > 0`
    for (const a of accounts) {
      await insertEvent(tx, {
        accountId: a.account_id,
        type: 'payout.sent',
        data: payoutObject(row, { amount_atomic: a.owner_share_atomic }),
      })
      events++
    }
    const refunds = await tx<
      {
        proof_key: string
        target_type: string
        target_id: string
        account_id: string
        payer: string
        amount_atomic: bigint
      }[]
    >`
      UPDATE claims c SET status = 'refunded'
      FROM ledger_entries e
      WHERE e.payout_id = ${row.id} AND e.kind = 'refund' AND e.source_type = 'claim'
        AND c.proof_key = e.source_id AND c.status = 'refund_due'
      RETURNING c.proof_key, c.target_type, c.target_id, c.account_id, c.payer, e.amount_atomic`
    for (const r of refunds) {
      if (r.target_type !== 'call') continue
      await insertEvent(tx, {
        accountId: r.account_id,
        type: 'call.refunded',
        data: {
          object: 'refund',
          endpoint_id: r.target_id,
          proof: r.proof_key.startsWith('tx:') ? r.proof_key.slice(3) : r.proof_key,
          payer: r.payer,
          amount: toDollars(r.amount_atomic),
          amount_atomic: r.amount_atomic.toString(),
          payout_id: row.id,
          transaction: row.tx_hash,
          refunded_at: row.confirmed_at?.toISOString(),
        },
      })
      events++
    }
    return { payout: row, events }
  }) as Promise<ConfirmedPayout | null>
}

/**
 * Marks a payout failed (its transaction reverted, or can never be mined), puts its entries back to unpaid
 * for a retry after `retryAt`, and writes payout.failed for each account in it. Null if already resolved.
 */
export async function failPayout(
  sql: Sql,
  p: { id: string; error: string; retryAt: Date; hash?: string; blockNumber?: bigint },
): Promise<PayoutRow | null> {
  return sql.begin(async (tx) => {
    const [row] = await tx<PayoutRow[]>`
      UPDATE payouts SET status = 'failed', failed_at = now(), last_error = ${p.error.slice(0, 500)},
             retry_at = ${p.retryAt}, tx_hash = coalesce(${p.hash ?? null}, tx_hash),
             block_number = ${p.blockNumber?.toString() ?? null}::bigint
      WHERE id = ${p.id} AND status IN ('pending', 'submitted')
      RETURNING ${tx.unsafe(COLUMNS)}`
    if (!row) return null
    await unlinkEntries(tx, row.id)
    const accounts = await tx<{ account_id: string; amount_atomic: bigint }[]>`
      SELECT account_id, owner_share_atomic + refund_atomic AS amount_atomic FROM payout_accounts
      WHERE payout_id = ${row.id}`
    for (const a of accounts) {
      await insertEvent(tx, { accountId: a.account_id, type: 'payout.failed', data: payoutObject(row, a) })
    }
    return row
  }) as Promise<PayoutRow | null>
}

export interface AccountPayoutRow extends PayoutRow {
  account_amount_atomic: bigint
}

export async function listAccountPayouts(
  db: Sql | Tx,
  q: { accountId: string; limit: number; startingAfter: string | null; status: PayoutStatus | null },
): Promise<AccountPayoutRow[]> {
  return db<AccountPayoutRow[]>`
    SELECT ${db.unsafe(
      COLUMNS.split(', ')
        .map((c) => `p.${c}`)
        .join(', '),
    )},
           pa.owner_share_atomic + pa.refund_atomic AS account_amount_atomic
    FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
    WHERE pa.account_id = ${q.accountId}
    ${q.status ? db`AND p.status = ${q.status}` : db``}
    ${
      q.startingAfter
        ? db`AND (p.created_at, p.id) < (SELECT created_at, id FROM payouts WHERE id = ${q.startingAfter})`
        : db``
    }
    ORDER BY p.created_at DESC, p.id DESC
    LIMIT ${q.limit}`
}

export async function findAccountPayout(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<AccountPayoutRow | null> {
  const [row] = await db<AccountPayoutRow[]>`
    SELECT ${db.unsafe(
      COLUMNS.split(', ')
        .map((c) => `p.${c}`)
        .join(', '),
    )},
           pa.owner_share_atomic + pa.refund_atomic AS account_amount_atomic
    FROM payout_accounts pa JOIN payouts p ON p.id = pa.payout_id
    WHERE pa.account_id = ${accountId} AND p.id = ${id}`
  return row ?? null
}
