// x402 batch-settlement channels: every statement that changes a channel's money state, a
// channel operation (deposit, refund) or the claims and revenue of the calls a voucher paid. Each
// statement's WHERE states its precondition; a refused transition changes nothing.
//
// Money flow: a deposit is confirmed on chain before its balance counts; a call's voucher increment
// charged → charged + price is accepted once, in memory, by the one instance holding the channel's lease
// (takeChannelLease), and persisted with the call it paid (a claim of kind 'batch', proof key
// batch:<channel>:<cumulative>) in group-committed writes (writeChannelVouchers); revenue (owner 95 %, fee 5 %)
// is booked when the leader's claim transaction moved the vouchers' USDC to the treasury (recordChannelClaims),
// exactly as x402 'exact' calls are booked at settlement.

import type { Sql, Tx } from '../db/sql.ts'
import type { CallAgent } from '../identity/call-agent.ts'
import type { CapturePricing } from './claims.ts'
import { bookSettledCalls, SETTLED_CALL, type SettledCall, settledCalls } from './ledger.ts'

/** Serialises the recording of channel claims (recordChannelClaims); distinct from the other advisory locks. */
const CHANNEL_CLAIM_RECORD_LOCK = 7_301_007
/** Calls booked per statement when a claim is recorded. */
const BOOKING_SLICE = 2_000

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

/**
 * Queues a cooperative refund, only while the payer's cumulative is the channel's charged one and no
 * instance holds a live lease on it (the refunding instance let its own go after writing its vouchers):
 * no voucher can be accepted between the amount read here and the refund transaction, since a lease is not
 * granted while a refund is open. null: refused (the channel moved, or is leased right now).
 */
export async function requestRefundOp(
  db: Db,
  q: { id: string; channelId: string; cumulative: bigint; amount: bigint },
): Promise<ChannelOp | null> {
  const [row] = await db<ChannelOp[]>`
    INSERT INTO batch_channel_ops (id, channel_id, kind, amount_atomic, calldata)
    SELECT ${q.id}, c.channel_id, 'refund', ${q.amount}, '' FROM batch_channels c
    WHERE c.channel_id = ${q.channelId} AND c.charged_atomic = ${q.cumulative}
      AND (c.lease_holder IS NULL OR c.lease_until < now())
      AND c.balance_atomic - c.charged_atomic >= ${q.amount}
    -- Locks the channel: a lease being taken meanwhile is waited for, and the lease test above is made
    -- again on the row it left (taken: no refund).
    FOR UPDATE OF c
    ON CONFLICT (id) DO NOTHING
    RETURNING *`
  return row ?? (await findChannelOp(db, q.id))
}

/** A claim a settlement statement moved to settled, with the call it names (SETTLED_CALL). */
type SettledRow = { proof_key: string; call_id: string | null; captured_utc: string | null }

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
      -- Through claims_batch_unsettled: every served call above the claimed total is unsettled. Bounded
      -- below by that total, the scan stops there: under it lie the entries of the calls settled since the
      -- last vacuum, which a scan of a channel with nothing new to claim walked all of, on every run.
      SELECT max(split_part(k.proof_key, ':', 3)::bigint) AS captured_max FROM claims k
      WHERE k.kind = 'batch' AND k.status = 'captured' AND k.settled_at IS NULL
        AND split_part(k.proof_key, ':', 2) = c.channel_id
        AND split_part(k.proof_key, ':', 3)::bigint > c.claimed_atomic
    ) m
    WHERE c.charged_atomic > c.claimed_atomic AND m.captured_max > c.claimed_atomic AND c.signature IS NOT NULL
      ${q.channelId ? db`AND c.channel_id = ${q.channelId}` : db``}
      AND NOT EXISTS (SELECT 1 FROM batch_channel_ops o
                      WHERE o.channel_id = c.channel_id AND o.kind = 'deposit' AND o.status IN ('pending', 'sent'))
    ORDER BY c.updated_at
    LIMIT ${q.limit}`
}

/** A channel claim transaction signed and not known final: looked up before anything new is claimed. */
export interface SentChannelClaim {
  id: string
  tx_hash: string
  raw_tx: string
  nonce: bigint
  entries: Array<{ channel_id: string; total_claimed: string }>
}

/**
 * Records a signed claim transaction before its broadcast (nothing moves in the books yet; recordChannelClaims
 * books it once its receipt says it succeeded, failChannelClaim drops it when it never will).
 */
export async function recordChannelClaimSent(
  db: Db,
  q: {
    claimId: string
    hash: string
    rawTx: string
    nonce: number
    entries: Array<{ channelId: string; totalClaimed: bigint }>
  },
): Promise<void> {
  const total = q.entries.reduce((s, e) => s + e.totalClaimed, 0n)
  const entries = q.entries.map((e) => ({
    channel_id: e.channelId,
    total_claimed: e.totalClaimed.toString(),
  }))
  await db`
    INSERT INTO batch_claims (id, tx_hash, status, entries, total_atomic, raw_tx, nonce)
    VALUES (${q.claimId}, ${q.hash}, 'sent', ${db.json(entries as never)}, ${total}, ${q.rawTx}, ${q.nonce})`
}

export function listSentChannelClaims(db: Db): Promise<SentChannelClaim[]> {
  return db<SentChannelClaim[]>`
    SELECT id, tx_hash, raw_tx, nonce, entries FROM batch_claims WHERE status = 'sent' ORDER BY created_at`
}

/** sent → failed: reverted, or never mined and its nonce taken by another transaction. Books nothing. */
export async function failChannelClaim(db: Db, q: { claimId: string }): Promise<boolean> {
  const rows =
    await db`UPDATE batch_claims SET status = 'failed' WHERE id = ${q.claimId} AND status = 'sent' RETURNING id`
  return rows.length === 1
}

/**
 * A claim transaction succeeded: each channel's claimed total moves up to what it claimed, the calls it
 * covers are marked settled by it (at its block, at their channel's place among the vouchers it carries),
 * and their revenue is booked — one database transaction, so a call's revenue exists exactly when its
 * voucher's USDC reached the treasury. Returns the calls booked.
 */
export async function recordChannelClaims(
  sql: Sql,
  q: {
    claimId: string
    hash: string
    /** The block that mined it (its receipt's). */
    block: bigint
    /** In the transaction's order: a call's receipt names its channel's place among them. */
    entries: Array<{ channelId: string; totalClaimed: bigint }>
  },
): Promise<number> {
  const ids = q.entries.map((e) => e.channelId)
  const totals = q.entries.map((e) => e.totalClaimed.toString())
  const places = q.entries.map((_, i) => i)
  const total = q.entries.reduce((s, e) => s + e.totalClaimed, 0n)
  return sql.begin(async (tx) => {
    // sent → done (recorded before its broadcast), or done at once.
    await tx`
      INSERT INTO batch_claims (id, tx_hash, status, entries, total_atomic, block_number)
      VALUES (${q.claimId}, ${q.hash}, 'done', ${tx.json(q.entries.map((e) => ({ channel_id: e.channelId, total_claimed: e.totalClaimed.toString() })) as never)}, ${total}, ${q.block})
      ON CONFLICT (id) DO UPDATE SET status = 'done', block_number = EXCLUDED.block_number
      WHERE batch_claims.status = 'sent'`
    // One recording at a time: this transaction's last statement is the only one that moves claimed_atomic,
    // so what each channel had claimed before it can be read without locking the channels, and they are
    // locked by that last update only, until the commit. Locked from here (as they were), the settling and
    // booking of a claim's calls held every voucher write and lease of its channels: 7 s for 80,000 calls in
    // the bench's x402-batch run, long enough for the holders' leases to run out and calls to be refused.
    await tx`SELECT pg_advisory_xact_lock(${CHANNEL_CLAIM_RECORD_LOCK})`
    // What each channel had claimed before this transaction: its transaction moved only what lies above it,
    // so only the calls above it are settled by this hash. A call at or under it that is still unsettled was
    // written after the claim that covered it, and is settled by that claim (settleCoveredChannelCalls).
    const before = await tx<{ channel_id: string; claimed_atomic: bigint }[]>`
      SELECT channel_id, claimed_atomic FROM batch_channels WHERE channel_id = ANY(${ids}::text[])`
    const was = new Map(before.map((b) => [b.channel_id, b.claimed_atomic.toString()]))
    const froms = ids.map((id, i) => was.get(id) ?? totals[i]!)
    const settled = await tx<SettledRow[]>`
      UPDATE claims k SET settlement_tx = ${q.hash}, settled_at = now(), settlement_block = ${q.block},
        settlement_index = t.i, settlement_count = ${q.entries.length}::int
      FROM unnest(${ids}::text[], ${froms}::bigint[], ${totals}::bigint[], ${places}::int[])
        AS t(id, from_total, total, i)
      WHERE k.kind = 'batch' AND k.status = 'captured' AND k.settled_at IS NULL
        AND split_part(k.proof_key, ':', 2) = t.id
        AND split_part(k.proof_key, ':', 3)::bigint > t.from_total
        AND split_part(k.proof_key, ':', 3)::bigint <= t.total
      RETURNING k.proof_key, ${tx.unsafe(SETTLED_CALL)}`
    // Booked a slice at a time: the calls of a whole claim in one statement (55,000 in the bench's x402-batch
    // run) ran past the statement timeout on every retry, and the claim was never recorded.
    const calls: SettledCall[] = settledCalls(settled)
    let booked = 0
    for (let i = 0; i < calls.length; i += BOOKING_SLICE)
      booked += await bookSettledCalls(tx, calls.slice(i, i + BOOKING_SLICE))
    await tx`
      UPDATE batch_channels c SET claimed_atomic = t.total, updated_at = now()
      FROM unnest(${ids}::text[], ${totals}::bigint[]) AS t(id, total)
      WHERE c.channel_id = t.id AND t.total > c.claimed_atomic AND t.total <= c.charged_atomic`
    return booked
  })
}

/**
 * Calls written after the claim transaction that covered them. A holder serves several vouchers of a
 * channel at once and writes each call when its answer ends, so the call of voucher X can land after the
 * call of X+1 was written and claimed: claimableChannels' highest captured cumulative jumped over X, and
 * recordChannelClaims did not find X (not written yet, or committed after that statement's snapshot).
 * Its USDC reached the treasury with that claim all the same, and no later claim would take it (nothing
 * above the claimed total is new): each such call is settled by the first claim transaction whose total
 * covers it, and booked, in one transaction. Returns the calls booked.
 */
export async function settleCoveredChannelCalls(sql: Sql, q: { limit: number }): Promise<number> {
  return sql.begin(async (tx) => {
    // settled_at IS NULL is made again on each claim row as locked: a call settled meanwhile is left out.
    // It gets the covering claim's block (null for a claim done before its block was recorded) and its
    // channel's place among the vouchers that transaction carries, as the calls settled with it did.
    const settled = await tx<SettledRow[]>`
      UPDATE claims k SET settlement_tx = cover.hit->>'tx_hash', settled_at = now(),
        settlement_block = (cover.hit->>'block_number')::bigint, settlement_index = (cover.hit->>'i')::int,
        settlement_count = (cover.hit->>'n')::int
      FROM (
        SELECT u.proof_key,
               (SELECT jsonb_build_object('tx_hash', b.tx_hash, 'block_number', b.block_number,
                                          'i', e.i - 1, 'n', jsonb_array_length(b.entries))
                FROM batch_claims b CROSS JOIN LATERAL jsonb_array_elements(b.entries) WITH ORDINALITY e(v, i)
                WHERE b.status = 'done' AND e.v->>'channel_id' = u.channel_id
                  AND (e.v->>'total_claimed')::numeric >= u.cum
                ORDER BY (e.v->>'total_claimed')::numeric, b.created_at
                LIMIT 1) AS hit
        FROM (
          SELECT w.proof_key, c.channel_id, split_part(w.proof_key, ':', 3)::bigint AS cum
          FROM claims w JOIN batch_channels c ON c.channel_id = split_part(w.proof_key, ':', 2)
          WHERE w.kind = 'batch' AND w.status = 'captured' AND w.settled_at IS NULL
            AND split_part(w.proof_key, ':', 3)::bigint <= c.claimed_atomic
          LIMIT ${q.limit}
        ) u
      ) cover
      WHERE k.proof_key = cover.proof_key AND cover.hit IS NOT NULL
        AND k.kind = 'batch' AND k.status = 'captured' AND k.settled_at IS NULL
      RETURNING k.proof_key, ${tx.unsafe(SETTLED_CALL)}`
    return bookSettledCalls(tx, settledCalls(settled))
  }) as Promise<number>
}

// ---- Leases: vouchers accepted in memory by one instance at a time ----------------
//
// An instance takes a short lease on a channel (takeChannelLease: one conditional UPDATE), accepts its
// vouchers in memory strictly increasing up to the lease's ceiling, and persists the highest accepted voucher
// (cumulative + signature) with the captures of the calls it served in group-committed writes
// (writeChannelVouchers). The lease epoch fences a holder whose lease was taken over: its late writes change
// nothing. What a crash costs is stated in src/schemes/batch-settlement/leases.ts (the gateway's, never the payer's).

export interface ChannelLease {
  won: boolean
  channel_id: string
  lease_epoch: bigint
  balance_atomic: bigint
  charged_atomic: bigint
  signed_max_atomic: bigint
  signature: string | null
  claimed_atomic: bigint
  lease_ceiling_atomic: bigint
  /** No claim row at the charged cumulative: its call was released, or lost with a crashed holder. */
  top_open: boolean
}

/**
 * Takes the channel's lease when it is free (no holder, ours, or run out) and no refund is open: a new
 * epoch, the lease until now() + ttl, the ceiling at charged + reserve (at most the balance). Otherwise
 * marks it wanted, so that its holder lets it go once its calls are written. null: no such channel.
 *
 * A lease that ran out while the server was down is not taken until the server has answered for a ttl:
 * its holder could not renew it, not because it died, and still holds the calls it served meanwhile (in
 * memory, written at its next flush). Taken at once, its late write is fenced and those calls are never
 * paid; the next holder, knowing nothing of the voucher they used, may even accept it again.
 */
export async function takeChannelLease(
  db: Db,
  q: { channelId: string; holder: string; ttlMs: number; reserve: bigint },
): Promise<ChannelLease | null> {
  // Every SET expression reads the row as locked (read committed re-evaluates against the latest version):
  // two instances asking at once cannot both find it free. "Up for a ttl" is the oldest client session's
  // age (an InitPlan, read once per statement), not pg_postmaster_start_time(): after a crash the server
  // replays and syncs before it answers (3 s on a loaded 2-core machine), which would eat the whole grace.
  // Sessions of other roles show no backend_start (ignored by min); none at all: no grace.
  const free = db`(c.lease_holder IS NULL OR c.lease_holder = ${q.holder} OR (c.lease_until < now() AND (SELECT coalesce(min(backend_start), '-infinity') FROM pg_stat_activity WHERE backend_type = 'client backend') < now() - ${q.ttlMs} * interval '1 millisecond'))
      AND NOT EXISTS (SELECT 1 FROM batch_channel_ops o
                      WHERE o.channel_id = c.channel_id AND o.kind = 'refund' AND o.status IN ('pending', 'sent'))`
  const [row] = await db<ChannelLease[]>`
    UPDATE batch_channels c SET
      lease_holder = CASE WHEN ${free} THEN ${q.holder} ELSE c.lease_holder END,
      lease_epoch = CASE WHEN ${free} THEN c.lease_epoch + 1 ELSE c.lease_epoch END,
      lease_until = CASE WHEN ${free} THEN now() + ${q.ttlMs} * interval '1 millisecond' ELSE c.lease_until END,
      lease_ceiling_atomic = CASE WHEN ${free} THEN LEAST(c.balance_atomic, c.charged_atomic + ${q.reserve})
                                  ELSE c.lease_ceiling_atomic END,
      lease_wanted = NOT (${free})
    WHERE c.channel_id = ${q.channelId}
    RETURNING c.lease_holder = ${q.holder} AND NOT c.lease_wanted AS won, c.channel_id, c.lease_epoch,
      c.balance_atomic, c.charged_atomic, c.signed_max_atomic, c.signature, c.claimed_atomic,
      c.lease_ceiling_atomic, false AS top_open`
  if (!row?.won) return row ?? null
  // Whether the top voucher's call was written, asked in a statement of its own. Asked in the UPDATE, it
  // was wrong exactly when it mattered: an UPDATE that waited for the last holder's release re-reads the
  // channel row as that release left it (charged moved up to the top voucher), but its other reads keep
  // the snapshot taken before that commit, without the call row written with it. The top voucher then
  // looked open, and its call, already served, was served again. The lease is ours now: nobody writes
  // calls on this channel any more, so a fresh snapshot is the truth.
  // The same holds for a refund queued while this UPDATE waited on the row (the refund locks it): its op
  // is seen here, and the lease is given back before anything is accepted under it.
  const [now] = await db<{ open: boolean; refunding: boolean }[]>`
    SELECT NOT EXISTS (SELECT 1 FROM claims WHERE proof_key = ${`batch:${row.channel_id}:${row.charged_atomic}`})
      AS open,
      EXISTS (SELECT 1 FROM batch_channel_ops o WHERE o.channel_id = ${row.channel_id} AND o.kind = 'refund'
              AND o.status IN ('pending', 'sent')) AS refunding`
  if (now!.refunding) {
    await db`
      UPDATE batch_channels SET lease_holder = NULL, lease_until = NULL
      WHERE channel_id = ${row.channel_id} AND lease_holder = ${q.holder} AND lease_epoch = ${row.lease_epoch}`
    return { ...row, won: false }
  }
  row.top_open = now!.open
  return row
}

/** The highest voucher a holder accepted on a channel; `release` lets the lease go in the same write. */
export interface VoucherMark {
  channelId: string
  epoch: bigint
  /** The charged cumulative. */
  cumulative: bigint
  /** The voucher that covers it (its maxClaimableAmount) and its signature: above `cumulative` when calls
   * are charged less than their voucher's increment (usage pricing); absent: `cumulative`. */
  signedMax?: bigint
  signature: string
  release: boolean
}

/** A call a voucher paid, served (captured) or in doubt (forwarded, outcome unknown: never served again). */
export interface VoucherCall {
  channelId: string
  cumulative: bigint
  endpointId: string
  accountId: string
  payer: string
  amountAtomic: bigint
  /** Captured calls only (null for a doubt). */
  call: {
    callId: string
    ownerWallet: string
    ownerShareAtomic: bigint
    feeAtomic: bigint
    upstreamStatus: number
    method: string
    /** The receipt id its answer carried. */
    receiptId?: string | null
    /** The MCP tool a paid `tools/call` named. */
    tool?: string | null
    /** Who called and the rule that priced it (an endpoint with identity rules). */
    agent?: CallAgent | null
    /** How it was priced and what was measured (usage pricing). */
    pricing?: CapturePricing
  } | null
}

export interface MarkedChannel {
  channel_id: string
  charged_atomic: bigint
  balance_atomic: bigint
  claimed_atomic: bigint
  lease_ceiling_atomic: bigint
  lease_wanted: boolean
}

export interface VoucherWriteResult {
  /** Marks applied (the holder still holds that epoch); the others were fenced. */
  marked: MarkedChannel[]
  /** Proof keys of the calls written. */
  written: Set<string>
}

/**
 * One group-committed write of a holder: its marks (charged → the highest accepted cumulative, with that
 * voucher's signature; the lease renewed for ttl and its ceiling moved to charged + reserve, or released),
 * then the calls served under them. Preconditions: a mark applies only for the holder's own epoch and
 * within the ceiling it was granted; a call is written only at or under the channel's charged cumulative as
 * this statement leaves it, so the books never hold a served call past the persisted voucher.
 */
export async function writeChannelVouchers(
  db: Db,
  q: { holder: string; ttlMs: number; reserve: bigint; marks: VoucherMark[]; calls: VoucherCall[] },
): Promise<VoucherWriteResult> {
  const m = q.marks
  const c = q.calls
  const big = (xs: bigint[]) => xs.map((x) => x.toString())
  const rows = await db<
    Array<{ what: 'mark' | 'call' } & Partial<MarkedChannel> & { proof_key: string | null }>
  >`
    WITH m AS (
      SELECT * FROM unnest(${m.map((x) => x.channelId)}::text[], ${big(m.map((x) => x.epoch))}::bigint[],
                           ${big(m.map((x) => x.cumulative))}::bigint[], ${m.map((x) => x.signature)}::text[],
                           ${m.map((x) => (x.release ? 1 : 0))}::int[], ${big(m.map((x) => x.signedMax ?? x.cumulative))}::bigint[])
        AS t(id, epoch, cum, sig, release, signed)
    ),
    marked AS (
      UPDATE batch_channels c SET
        charged_atomic = GREATEST(c.charged_atomic, m.cum),
        signature = CASE WHEN m.signed > c.signed_max_atomic THEN m.sig ELSE c.signature END,
        signed_max_atomic = GREATEST(c.signed_max_atomic, m.signed),
        lease_holder = CASE WHEN m.release = 1 THEN NULL ELSE c.lease_holder END,
        lease_until = CASE WHEN m.release = 1 THEN NULL ELSE now() + ${q.ttlMs} * interval '1 millisecond' END,
        lease_wanted = CASE WHEN m.release = 1 THEN false ELSE c.lease_wanted END,
        lease_ceiling_atomic = LEAST(c.balance_atomic, GREATEST(c.charged_atomic, m.cum) + ${q.reserve}),
        updated_at = now()
      FROM m
      WHERE c.channel_id = m.id AND c.lease_holder = ${q.holder} AND c.lease_epoch = m.epoch
        AND m.signed <= c.lease_ceiling_atomic AND m.signed <= c.balance_atomic AND m.cum <= m.signed
      RETURNING c.channel_id, c.charged_atomic, c.balance_atomic, c.claimed_atomic, c.lease_ceiling_atomic,
        c.lease_wanted
    ),
    i AS (
      SELECT * FROM unnest(${c.map((x) => x.channelId)}::text[], ${big(c.map((x) => x.cumulative))}::bigint[],
                           ${c.map((x) => x.endpointId)}::text[], ${c.map((x) => x.accountId)}::text[],
                           ${c.map((x) => x.payer)}::text[], ${big(c.map((x) => x.amountAtomic))}::bigint[],
                           ${c.map((x) => x.call?.callId ?? null)}::text[],
                           ${c.map((x) => x.call?.ownerWallet ?? null)}::text[],
                           ${big(c.map((x) => x.call?.ownerShareAtomic ?? 0n))}::bigint[],
                           ${big(c.map((x) => x.call?.feeAtomic ?? 0n))}::bigint[],
                           ${c.map((x) => x.call?.upstreamStatus ?? 0)}::int[],
                           ${c.map((x) => x.call?.method ?? null)}::text[],
                           ${c.map((x) => x.call?.receiptId ?? null)}::text[],
                           ${c.map((x) => x.call?.pricing?.model ?? 'fixed')}::text[],
                           ${c.map((x) => x.call?.pricing?.unit ?? null)}::text[],
                           ${c.map((x) => (x.call?.pricing?.usage ? JSON.stringify(x.call.pricing.usage) : null))}::text[],
                           ${c.map((x) => x.call?.pricing?.ceilingAtomic?.toString() ?? null)}::bigint[],
                           ${c.map((x) => x.call?.tool ?? null)}::text[],
                           ${c.map((x) => (x.call?.agent ? JSON.stringify(x.call.agent) : null))}::text[])
        AS t(channel_id, cum, endpoint_id, account_id, payer, amount, call_id, owner_wallet, owner_share, fee,
             status, method, receipt_id, pricing_model, usage_unit, usage, ceiling, tool, agent)
    ),
    ok AS (
      SELECT i.*, 'batch:' || i.channel_id || ':' || i.cum AS proof_key, payer_packed(i.payer) AS payer_address
      FROM i JOIN batch_channels c ON c.channel_id = i.channel_id
      LEFT JOIN marked mk ON mk.channel_id = i.channel_id
      WHERE i.cum <= GREATEST(c.charged_atomic, coalesce(mk.charged_atomic, 0))
    ),
    claimed AS (
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          retry_until, lease_until, captured_at, horizon_at, call_id)
      SELECT proof_key, 'batch', 'call', endpoint_id, account_id, payer, amount,
             CASE WHEN call_id IS NULL THEN 'claimed' ELSE 'captured' END, now(), now(),
             CASE WHEN call_id IS NULL THEN NULL ELSE now() END, claim_horizon_at('batch', NULL, NULL), call_id
      FROM ok
      ON CONFLICT (proof_key, horizon_at) DO NOTHING
      RETURNING proof_key
    ),
    new_calls AS (
      INSERT INTO calls (id, proof, endpoint_id, account_id, payer, payer_address, amount_atomic,
                         owner_share_atomic, fee_atomic, upstream_status, method, scheme, receipt_id, pricing_model,
                         usage_unit, usage, ceiling_atomic, tool, agent)
      SELECT ok.call_id, proof_packed(ok.proof_key), ok.endpoint_id, ok.account_id,
             CASE WHEN ok.payer_address IS NULL THEN ok.payer END, ok.payer_address, ok.amount,
             ok.owner_share, ok.fee, ok.status, ok.method, 'batch-settlement',
             call_receipt_stored(ok.call_id, ok.receipt_id),
             ok.pricing_model, ok.usage_unit, ok.usage::jsonb, ok.ceiling, ok.tool, ok.agent::jsonb
      -- One call per voucher: claimed returns only the claims this statement inserted (calls.proof_key is
      -- not a unique key of the month-partitioned calls; migration 0041).
      FROM ok JOIN claimed USING (proof_key) WHERE ok.call_id IS NOT NULL
      RETURNING 1
    )
    SELECT 'mark' AS what, channel_id, charged_atomic, balance_atomic, claimed_atomic, lease_ceiling_atomic,
           lease_wanted, NULL AS proof_key FROM marked
    UNION ALL
    SELECT 'call', NULL, NULL, NULL, NULL, NULL, NULL, proof_key FROM claimed`
  // (new_calls runs although nothing reads it: PostgreSQL always completes a modifying CTE.)
  const marked: MarkedChannel[] = []
  const written = new Set<string>()
  for (const r of rows) {
    if (r.what === 'mark') marked.push(r as MarkedChannel)
    else written.add(r.proof_key!)
  }
  return { marked, written }
}
