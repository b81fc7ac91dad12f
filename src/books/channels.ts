// x402 batch-settlement channels (issue 12): every statement that changes a channel's money state, a
// channel operation (deposit, refund) or the claims and revenue of the calls a voucher paid. Each
// statement's WHERE states its precondition; a refused transition changes nothing.
//
// Money flow: a deposit is confirmed on chain before its balance counts; a call accepts the voucher
// increment charged → charged + price once (acceptVoucher), then goes through the ordinary claim/capture of
// src/books/claims.ts (kind 'batch', proof key batch:<channel>:<cumulative>); revenue (owner 95 %, fee 5 %)
// is booked when the leader's claim transaction moved the vouchers' USDC to the treasury (recordChannelClaims),
// exactly as x402 'exact' calls are booked at settlement.
import type { Sql, Tx } from '../db/sql.ts'
import { bookCallRevenue } from './ledger.ts'

type Db = Sql | Tx

export interface ChannelRow {
  channel_id: string
  config: Record<string, unknown>
  payer: string
  balance_atomic: bigint
  charged_atomic: bigint
  signed_max_atomic: bigint
  signature: string | null
  claimed_atomic: bigint
  refunded_atomic: bigint
}

export interface ChannelOp {
  id: string
  channel_id: string
  kind: 'deposit' | 'refund'
  amount_atomic: bigint
  calldata: string
  status: 'pending' | 'sent' | 'done' | 'failed'
  tx_hash: string | null
  error: string | null
  done_atomic: bigint | null
}

/** Proof key of the call a voucher pays: one per channel and cumulative amount, ever. */
export function batchProofKey(channelId: string, cumulative: bigint): string {
  return `batch:${channelId}:${cumulative}`
}

export async function findChannel(db: Db, channelId: string): Promise<ChannelRow | null> {
  const [row] = await db<ChannelRow[]>`SELECT * FROM batch_channels WHERE channel_id = ${channelId}`
  return row ?? null
}

/**
 * Queues a deposit (or a refund) for the leader to send. The channel row is created on its first deposit,
 * with nothing in it until that deposit is confirmed. A deposit op's id is its ERC-3009 nonce: the same
 * authorization queued twice is one op. Answers the op as stored.
 */
export async function requestChannelOp(
  db: Db,
  op: {
    id: string
    channelId: string
    config: object
    payer: string
    kind: 'deposit' | 'refund'
    amount: bigint
    calldata: string
  },
): Promise<ChannelOp> {
  await db`
    INSERT INTO batch_channels (channel_id, config, payer)
    VALUES (${op.channelId}, ${db.json(op.config as never)}, ${op.payer})
    ON CONFLICT (channel_id) DO NOTHING`
  await db`
    INSERT INTO batch_channel_ops (id, channel_id, kind, amount_atomic, calldata)
    VALUES (${op.id}, ${op.channelId}, ${op.kind}, ${op.amount}, ${op.calldata})
    ON CONFLICT (id) DO NOTHING`
  const [row] = await db<ChannelOp[]>`SELECT * FROM batch_channel_ops WHERE id = ${op.id}`
  return row!
}

export async function findChannelOp(db: Db, id: string): Promise<ChannelOp | null> {
  const [row] = await db<ChannelOp[]>`SELECT * FROM batch_channel_ops WHERE id = ${id}`
  return row ?? null
}

export async function openChannelOps(db: Db, limit: number): Promise<ChannelOp[]> {
  return db<ChannelOp[]>`
    SELECT * FROM batch_channel_ops WHERE status IN ('pending', 'sent') ORDER BY created_at LIMIT ${limit}`
}

/** pending → sent: its hash recorded before the receipt wait. */
export async function markChannelOpSent(db: Db, q: { id: string; hash: string }): Promise<boolean> {
  const rows = await db`
    UPDATE batch_channel_ops SET status = 'sent', tx_hash = ${q.hash}, updated_at = now()
    WHERE id = ${q.id} AND status = 'pending' RETURNING 1`
  return rows.length === 1
}

/** pending|sent → failed: reverted or refused by the simulation; the channel's money is untouched. */
export async function failChannelOp(db: Db, q: { id: string; error: string }): Promise<boolean> {
  const rows = await db`
    UPDATE batch_channel_ops SET status = 'failed', error = ${q.error.slice(0, 500)}, updated_at = now()
    WHERE id = ${q.id} AND status IN ('pending', 'sent') RETURNING 1`
  return rows.length === 1
}

/** sent → done, deposit: its amount joins the channel's balance, once (the op's status guards it). */
export async function confirmDeposit(db: Db, q: { id: string }): Promise<boolean> {
  const rows = await db`
    WITH done AS (
      UPDATE batch_channel_ops SET status = 'done', done_atomic = amount_atomic, updated_at = now()
      WHERE id = ${q.id} AND kind = 'deposit' AND status = 'sent'
      RETURNING channel_id, amount_atomic
    )
    UPDATE batch_channels c SET balance_atomic = c.balance_atomic + d.amount_atomic, updated_at = now()
    FROM done d WHERE c.channel_id = d.channel_id
    RETURNING 1`
  return rows.length === 1
}

/**
 * sent → done, refund: the payer got `refunded` back on chain; the channel's balance shrinks by it. A
 * refund never takes what is charged: the transaction claimed it first (recordChannelClaims books that).
 */
export async function confirmRefund(db: Db, q: { id: string; refunded: bigint }): Promise<boolean> {
  const rows = await db`
    WITH done AS (
      UPDATE batch_channel_ops SET status = 'done', done_atomic = ${q.refunded}, updated_at = now()
      WHERE id = ${q.id} AND kind = 'refund' AND status = 'sent'
      RETURNING channel_id
    )
    UPDATE batch_channels c
    SET balance_atomic = c.balance_atomic - ${q.refunded}, refunded_atomic = c.refunded_atomic + ${q.refunded},
        updated_at = now()
    FROM done d WHERE c.channel_id = d.channel_id AND c.balance_atomic - ${q.refunded} >= c.charged_atomic
    RETURNING 1`
  return rows.length === 1
}

export type VoucherAcceptance = { ok: true } | { ok: false; channel: ChannelRow | null }

/**
 * The once-only step of a voucher: charged moves from cumulative − price to cumulative only if it still is
 * cumulative − price (a conditional UPDATE: two instances cannot both take the same increment), and only
 * within the confirmed balance. charged = cumulative already means this very voucher was accepted before
 * (a retry after an upstream failure, or a replay): the claim of its proof key decides (once, ever).
 * No open refund may race it: a channel with a refund queued accepts nothing more.
 */
export async function acceptVoucher(
  db: Db,
  q: { channelId: string; cumulative: bigint; price: bigint; signature: string },
): Promise<VoucherAcceptance> {
  const rows = await db`
    UPDATE batch_channels c
    SET charged_atomic = ${q.cumulative},
        signature = CASE WHEN ${q.cumulative}::bigint > c.signed_max_atomic THEN ${q.signature} ELSE c.signature END,
        signed_max_atomic = GREATEST(c.signed_max_atomic, ${q.cumulative}::bigint),
        updated_at = now()
    WHERE c.channel_id = ${q.channelId}
      AND c.charged_atomic IN (${q.cumulative - q.price}::bigint, ${q.cumulative}::bigint)
      AND ${q.cumulative}::bigint <= c.balance_atomic
      AND NOT EXISTS (SELECT 1 FROM batch_channel_ops o
                      WHERE o.channel_id = c.channel_id AND o.kind = 'refund' AND o.status IN ('pending', 'sent'))
    RETURNING 1`
  if (rows.length === 1) return { ok: true }
  return { ok: false, channel: await findChannel(db, q.channelId) }
}

export interface ClaimableChannel {
  channel_id: string
  config: Record<string, unknown>
  signed_max_atomic: bigint
  signature: string
  captured_max: bigint
  claimed_atomic: bigint
}

/**
 * Channels with served calls not yet claimed on chain: what the claim can take is the highest captured
 * cumulative (a voucher accepted but never served is not claimed), under the latest voucher signature.
 * Channels with a deposit or refund in flight wait for it.
 */
export async function claimableChannels(
  db: Db,
  q: { limit: number; channelId?: string },
): Promise<ClaimableChannel[]> {
  return db<ClaimableChannel[]>`
    SELECT c.channel_id, c.config, c.signed_max_atomic, c.signature, m.captured_max, c.claimed_atomic
    FROM batch_channels c
    CROSS JOIN LATERAL (
      SELECT max(split_part(k.proof_key, ':', 3)::bigint) AS captured_max FROM claims k
      WHERE k.kind = 'batch' AND k.status = 'captured' AND k.proof_key LIKE 'batch:' || c.channel_id || ':%'
    ) m
    WHERE m.captured_max > c.claimed_atomic AND c.signature IS NOT NULL
      ${q.channelId ? db`AND c.channel_id = ${q.channelId}` : db``}
      AND NOT EXISTS (SELECT 1 FROM batch_channel_ops o
                      WHERE o.channel_id = c.channel_id AND o.kind = 'deposit' AND o.status IN ('pending', 'sent'))
    ORDER BY c.updated_at
    LIMIT ${q.limit}`
}

/**
 * A claim transaction succeeded: each channel's claimed total moves up to what it claimed, the calls it
 * covers are marked settled by it, and their revenue is booked — one database transaction, so a call's
 * revenue exists exactly when its voucher's USDC reached the treasury. Returns the calls booked.
 */
export async function recordChannelClaims(
  sql: Sql,
  q: { claimId: string; hash: string; entries: Array<{ channelId: string; totalClaimed: bigint }> },
): Promise<number> {
  const ids = q.entries.map((e) => e.channelId)
  const totals = q.entries.map((e) => e.totalClaimed.toString())
  const total = q.entries.reduce((s, e) => s + e.totalClaimed, 0n)
  return sql.begin(async (tx) => {
    await tx`
      INSERT INTO batch_claims (id, tx_hash, status, entries, total_atomic)
      VALUES (${q.claimId}, ${q.hash}, 'done', ${tx.json(q.entries.map((e) => ({ channel_id: e.channelId, total_claimed: e.totalClaimed.toString() })) as never)}, ${total})
      ON CONFLICT (id) DO NOTHING`
    await tx`
      UPDATE batch_channels c SET claimed_atomic = t.total, updated_at = now()
      FROM unnest(${ids}::text[], ${totals}::bigint[]) AS t(id, total)
      WHERE c.channel_id = t.id AND t.total > c.claimed_atomic AND t.total <= c.charged_atomic`
    const settled = await tx<{ proof_key: string }[]>`
      UPDATE claims k SET settlement_tx = ${q.hash}, settled_at = now()
      FROM unnest(${ids}::text[], ${totals}::bigint[]) AS t(id, total)
      WHERE k.kind = 'batch' AND k.status = 'captured' AND k.settled_at IS NULL
        AND k.proof_key LIKE 'batch:' || t.id || ':%'
        AND split_part(k.proof_key, ':', 3)::bigint <= t.total
      RETURNING k.proof_key`
    return bookCallRevenue(tx, { proofKeys: settled.map((s) => s.proof_key) })
  })
}
