// Payouts: recorded (with nonce, signed transaction and hash) before broadcast, then submitted, then
// confirmed or failed. Every status change writes its events in the same transaction (the outbox), and each
// transition's UPDATE states the states it starts from.

import { insertEvent } from '../db/events.ts'
import { lockPayableBatch } from '../db/ledger.ts'
import {
  COLUMNS,
  highestRecordedNonce,
  type PayoutRow,
  type PayoutStatus,
  payoutObject,
} from '../db/payouts.ts'
import type { Sql, Tx } from '../db/sql.ts'
import { newId } from '../ids.ts'
import { toDollars } from '../money.ts'
import { markRefunded } from './claims.ts'
import { linkEntriesToPayouts, unlinkEntries } from './ledger.ts'
import { PAYOUT_RECORD_LOCK } from './payout-lock.ts'
import { claimScheme, protocolOf } from './protocols.ts'
import { confirmRefunds, failRefunds } from './refunds.ts'
import type { Applied, Refusal } from './transitions.ts'

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
 * One transaction: lock the payable entries and sum them per wallet (in SQL), keep the sums ≥ min, check
 * funds, sign one transfer per wallet on consecutive nonces, record the payouts (status pending) and link
 * their entries. Only after this commits may anything be broadcast.
 */
export async function recordPayouts(sql: Sql, o: RecordBatchOptions): Promise<RecordBatchResult> {
  return sql.begin(async (tx) => {
    // Two batchers (a leadership hand-over, a manual run) serialise here; the unique (treasury, nonce)
    // index and `payout_id IS NULL` are the second and third lines of defence.
    await tx`SELECT pg_advisory_xact_lock(${PAYOUT_RECORD_LOCK})`
    const { wallets: payable, waiting } = await lockPayableBatch(tx, {
      limit: o.maxEntries,
      minAtomic: o.minAtomic,
      maxWallets: o.maxWallets,
    })
    if (payable.length === 0) return { ok: true, payouts: [], waiting }
    const total = payable.reduce((s, p) => s + p.amount_atomic, 0n)
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
    const links: Array<{ payoutId: string; entryIds: string }> = []
    for (const p of payable) {
      const id = newId('po')
      const signed = await o.sign({ wallet: p.wallet, amountAtomic: p.amount_atomic, nonce })
      const last = lastOf.get(p.wallet.toLowerCase())
      const attempts = last?.status === 'failed' ? last.attempts + 1 : 1
      const [row] = await tx<PayoutRow[]>`
        INSERT INTO payouts (id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, raw_tx,
                             entries_count, attempts)
        VALUES (${id}, ${p.wallet}, ${p.amount_atomic.toString()}::bigint, ${p.kind}, 'pending', ${o.treasury},
                ${nonce}, ${signed.hash}, ${signed.rawTx}, ${p.entries_count}, ${attempts})
        RETURNING ${tx.unsafe(COLUMNS)}`
      rows.push(row!)
      nonce++
      links.push({ payoutId: id, entryIds: p.entry_ids })
    }
    const parts = await linkEntriesToPayouts(tx, links)
    // Entries are locked, so this cannot happen; if it ever did, nothing may be sent on wrong amounts.
    for (const row of rows) {
      const mine = parts.filter((a) => a.payout_id === row.id)
      const count = mine.reduce((n, a) => n + a.entries_count, 0)
      const amount = mine.reduce((s, a) => s + a.owner_share_atomic + a.refund_atomic, 0n)
      if (count !== row.entries_count || amount !== row.amount_atomic)
        throw new Error(
          `payout ${row.id} linked ${count} of ${row.entries_count} entries (${amount} of ${row.amount_atomic})`,
        )
    }
    const perAccount = parts.filter((a) => a.account_id !== null)
    if (perAccount.length) {
      // created_at is the payout's own, read back in SQL (a JS Date would drop its microseconds): GET /payouts
      // pages an account's payouts by it through payout_accounts alone (migration 0015).
      await tx`
        INSERT INTO payout_accounts (payout_id, account_id, owner_share_atomic, refund_atomic, entries_count,
                                     created_at)
        SELECT a.payout_id, a.account_id, a.owner_share_atomic, a.refund_atomic, a.entries_count, p.created_at
        FROM unnest(${perAccount.map((a) => a.payout_id)}::text[], ${perAccount.map((a) => a.account_id!)}::text[],
                    ${perAccount.map((a) => a.owner_share_atomic.toString())}::bigint[],
                    ${perAccount.map((a) => a.refund_atomic.toString())}::bigint[],
                    ${perAccount.map((a) => a.entries_count)}::int[])
               AS a(payout_id, account_id, owner_share_atomic, refund_atomic, entries_count)
        JOIN payouts p ON p.id = a.payout_id`
    }
    return { ok: true, payouts: rows, waiting }
  }) as Promise<RecordBatchResult>
}

export async function markPayoutSubmitted(db: Sql | Tx, id: string): Promise<Applied> {
  const rows = await db`
    UPDATE payouts SET status = 'submitted', submitted_at = coalesce(submitted_at, now())
    WHERE id = ${id} AND status = 'pending'
    RETURNING 1`
  return rows.length > 0 ? { ok: true } : payoutRefusal(db, id)
}

export async function recordBroadcastError(db: Sql | Tx, id: string, error: string): Promise<void> {
  await db`UPDATE payouts SET last_error = ${error.slice(0, 500)} WHERE id = ${id} AND status IN ('pending', 'submitted')`
}

/**
 * Marks a payout confirmed with the hash that was mined, flips its refunded claims, and writes payout.sent
 * (one per account with owner shares in it) and call.refunded (one per refunded call) in the same
 * transaction. Refused when it is not pending/submitted (another run already resolved it).
 */
export async function confirmPayout(
  sql: Sql,
  p: { id: string; hash: string; blockNumber: bigint },
): Promise<Applied<{ payout: PayoutRow; events: number }>> {
  return sql.begin(async (tx) => {
    const [row] = await tx<PayoutRow[]>`
      UPDATE payouts SET status = 'confirmed', confirmed_at = now(), tx_hash = ${p.hash},
             block_number = ${p.blockNumber.toString()}::bigint, submitted_at = coalesce(submitted_at, now()),
             last_error = NULL
      WHERE id = ${p.id} AND status IN ('pending', 'submitted')
      RETURNING ${tx.unsafe(COLUMNS)}`
    if (!row) return payoutRefusal(tx, p.id)
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
    const refunds = await markRefunded(tx, { payoutId: row.id })
    for (const r of refunds) {
      if (r.target_type !== 'call') continue
      const scheme = claimScheme(r.kind, r.authorization_payload)
      await insertEvent(tx, {
        accountId: r.account_id,
        type: 'call.refunded',
        data: {
          object: 'refund',
          endpoint_id: r.target_id,
          scheme,
          protocol: protocolOf(scheme),
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
    // Refunds a merchant asked for (src/books/refunds.ts): paid with this payout's transaction.
    events += (await confirmRefunds(tx, row)).length
    return { ok: true, payout: row, events }
  }) as Promise<Applied<{ payout: PayoutRow; events: number }>>
}

/**
 * Marks a payout failed (its transaction reverted, or can never be mined), puts its entries back to unpaid
 * for a retry after `retryAt`, and writes payout.failed for each account in it. Refused if already resolved.
 */
export async function failPayout(
  sql: Sql,
  p: { id: string; error: string; retryAt: Date; hash?: string; blockNumber?: bigint },
): Promise<Applied<{ payout: PayoutRow }>> {
  return sql.begin(async (tx) => {
    const [row] = await tx<PayoutRow[]>`
      UPDATE payouts SET status = 'failed', failed_at = now(), last_error = ${p.error.slice(0, 500)},
             retry_at = ${p.retryAt}, tx_hash = coalesce(${p.hash ?? null}, tx_hash),
             block_number = ${p.blockNumber?.toString() ?? null}::bigint
      WHERE id = ${p.id} AND status IN ('pending', 'submitted')
      RETURNING ${tx.unsafe(COLUMNS)}`
    if (!row) return payoutRefusal(tx, p.id)
    // A merchant's refund in it fails for good (reversed, its money back in the merchant's balance) rather
    // than being retried behind the merchant's back; everything else goes back to unpaid for a retry.
    await failRefunds(tx, { id: row.id, tx_hash: row.tx_hash, error: p.error })
    await unlinkEntries(tx, row.id)
    const accounts = await tx<{ account_id: string; amount_atomic: bigint }[]>`
      SELECT account_id, owner_share_atomic + refund_atomic AS amount_atomic FROM payout_accounts
      WHERE payout_id = ${row.id}`
    for (const a of accounts) {
      await insertEvent(tx, { accountId: a.account_id, type: 'payout.failed', data: payoutObject(row, a) })
    }
    return { ok: true, payout: row }
  }) as Promise<Applied<{ payout: PayoutRow }>>
}

async function payoutRefusal(db: Sql | Tx, id: string): Promise<Refusal> {
  const [row] = await db<{ status: string }[]>`SELECT status FROM payouts WHERE id = ${id}`
  return row
    ? { ok: false, reason: 'wrong_state', status: row.status }
    : { ok: false, reason: 'not_found', status: null }
}
