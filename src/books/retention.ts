// Bounded history in the money room: a claim row may go once its proof can never be accepted again, so the
// proof-pays-once guarantee no longer needs it. What refuses each kind once its row is gone:
// - transaction hash: the stored horizon (src/db/proof-horizons.ts). A claim goes only when its proof's block
//   time is below a horizon every verifier has known for a while, and every verifier refuses proofs below
//   the largest horizon ever announced (proof_too_old), whatever chain.max_proof_age_ms says today;
// - EIP-3009 authorization and upto permit: the same, by its validBefore or deadline (a settled one is
//   also used on chain);
// - batch-settlement voucher: the channel's charged cumulative, which only grows (a voucher below it is
//   refused as `below` without looking for its row). The row at the charged cumulative itself is never
//   pruned: its absence would reopen that voucher (takeChannelLease's top_open).
// Only claims whose story is over go (captured and, for x402 and vouchers, settled; refunded; applied;
// void): one still owed a refund or a settlement stays whatever its age. An unmatched inflow goes with the
// claim that resolved it (else it would look open again); one never claimed stays for the operator.
// Calls, ledger entries and payouts are never pruned.
import { underLockTimeout } from '../db/lock-timeout.ts'
import { claimDayPartitions } from '../db/partitions.ts'
import type { Sql } from '../db/sql.ts'

export interface PruneClaims {
  /** A transaction proof claimed more than this long ago (the configured age plus the margin) … */
  txOlderThanMs: number
  /** … and whose block time is before this stored, propagated horizon (null: none yet). */
  txPrunableBeforeMs: number | null
  /** An authorization claimed more than this long ago … */
  authOlderThanMs: number
  /** … whose validBefore is before this stored, propagated horizon (null: none yet). */
  authPrunableBeforeMs: number | null
  /** A voucher's call settled on chain more than this long ago, below its channel's charged cumulative. */
  voucherSettledMs: number
  batch: number
}

/**
 * pruneClaims: claim (closed) → gone, with the unmatched inflow its claim resolved. Precondition in its
 * SQL: a closed state, older than the horizon of its kind (see above). Deletes at most `batch` claims;
 * returns how many claims and inflows went.
 */
export async function pruneClaims(sql: Sql, q: PruneClaims): Promise<{ claims: number; inflows: number }> {
  // Before the epoch: nothing is below it (no horizon stored yet, nothing of that kind may go).
  const txCut = new Date(q.txPrunableBeforeMs ?? 0)
  const authCutS = Math.floor((q.authPrunableBeforeMs ?? 0) / 1000)
  const [row] = await sql<{ claims: number; inflows: number }[]>`
    WITH gone AS (
      DELETE FROM claims WHERE proof_key IN (
        SELECT proof_key FROM claims k
        -- Implied by every branch below (a claim is settled after it is claimed); stated once so that the
        -- scan is a range of the claimed_at index, not the whole table.
        WHERE k.claimed_at < now() - ${Math.min(q.txOlderThanMs, q.authOlderThanMs, q.voucherSettledMs)} * interval '1 millisecond'
          AND ((k.kind = 'tx' AND k.status IN ('captured', 'refunded', 'applied', 'void')
               AND k.claimed_at < now() - ${q.txOlderThanMs} * interval '1 millisecond'
               -- Rows from before proof_at was stored: their claim time (never earlier than the proof).
               AND coalesce(k.proof_at, k.claimed_at) < ${txCut}
               -- An applied proof of a payment still pending is owed back if that payment expires or is
               -- canceled (refundHeldProofs finds it by this row), and a payment may stay pending 30 days.
               AND NOT (k.status = 'applied' AND EXISTS (
                 SELECT 1 FROM payments m WHERE m.id = k.target_id AND m.status = 'pending')))
           OR (k.kind = 'eip3009' AND k.claimed_at < now() - ${q.authOlderThanMs} * interval '1 millisecond'
               AND (k.authorization_payload->>'validBefore')::numeric < ${authCutS}
               AND (k.status IN ('refunded', 'applied', 'void')
                    OR (k.status = 'captured' AND (k.settled_at IS NOT NULL OR k.settlement_error IS NOT NULL))))
           OR (k.kind = 'batch' AND k.status = 'captured' AND k.settled_at IS NOT NULL
               AND k.settled_at < now() - ${q.voucherSettledMs} * interval '1 millisecond'
               AND split_part(k.proof_key, ':', 3)::numeric < (
                 SELECT c.charged_atomic FROM batch_channels c
                 WHERE c.channel_id = split_part(k.proof_key, ':', 2)))
           -- An upto permit past its deadline is refused as expired (and a settled one is used on chain), by
           -- the same stored horizon as an authorization's validBefore.
           OR (k.kind = 'upto' AND k.claimed_at < now() - ${q.authOlderThanMs} * interval '1 millisecond'
               AND (k.authorization_payload->>'deadline')::numeric < ${authCutS}
               AND (k.status = 'void'
                    OR (k.status = 'captured' AND (k.settled_at IS NOT NULL OR k.settlement_error IS NOT NULL)))))
        LIMIT ${q.batch})
      RETURNING proof_key, kind
    ),
    inflows AS (
      DELETE FROM unmatched_inflows u USING gone g
      WHERE g.kind = 'tx' AND g.proof_key = 'tx:' || u.tx_hash
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone)::int AS claims, (SELECT count(*) FROM inflows)::int AS inflows`
  return { claims: row!.claims, inflows: row!.inflows }
}

/**
 * dropClaimDays: claim (closed) → gone, a whole day at a time (migration 0055 partitions claims by the day
 * of the proof's own time). A day partition goes once its last instant is below both stored, propagated
 * horizons (every verifier already refuses every proof in it, whatever its kind) and none of its claims is
 * still owed anything. Row by row, pruneClaims needs a statement per batch and falls behind above a few
 * thousand calls a second; a dropped partition costs the same at any rate.
 *
 * Why nothing open is dropped, and why it stays so between the checks and the drop:
 * - Checked before the lock, because no closed claim becomes open again but one: an `applied` proof of a
 *   payment still pending may still be owed back (refundHeldProofs) if that payment expires. A payment
 *   that is not pending never is again, so a check that finds none stays true.
 * - Checked under the lock: the open states (`claimed`, `settling`, `refund_due`, and an authorization or
 *   permit `captured` but neither settled nor failed), each a probe of a partial index. The lock is the
 *   parent's, taken first (the order every claim statement takes them), and held only for those probes and
 *   the catalog changes; a short lock timeout gives up rather than queue paid calls behind it.
 * Closed claims are `captured` (a transaction; an authorization or permit once settled or failed for
 * good), `refunded`, `applied` and `void`: the same closed states pruneClaims deletes.
 * The unmatched inflows those transaction claims resolved go first (else they would look open again).
 * Returns the partitions dropped; one that was refused is tried again next run.
 */
export async function dropClaimDays(
  sql: Sql,
  q: { txPrunableBeforeMs: number | null; authPrunableBeforeMs: number | null; lockTimeoutMs?: number },
): Promise<{ dropped: string[]; held: string[]; inflows: number }> {
  const dropped: string[] = []
  const held: string[] = []
  let inflows = 0
  if (q.txPrunableBeforeMs === null || q.authPrunableBeforeMs === null) return { dropped, held, inflows }
  const below = Math.min(q.txPrunableBeforeMs, q.authPrunableBeforeMs)
  for (const part of await claimDayPartitions(sql)) {
    if (part.endMs > below) break
    const p = sql(part.name)
    const [pending] = await sql<{ held: boolean }[]>`
      SELECT EXISTS (SELECT 1 FROM ${p} k JOIN payments m ON m.id = k.target_id
                     WHERE k.status = 'applied' AND k.target_type = 'payment' AND m.status = 'pending') AS held`
    if (pending!.held) {
      held.push(part.name)
      continue
    }
    const [gone] = await sql<{ n: number }[]>`
      WITH gone AS (
        DELETE FROM unmatched_inflows u USING ${p} k
        WHERE k.kind = 'tx' AND k.status IN ('captured', 'refunded', 'applied', 'void')
          AND k.proof_key = 'tx:' || u.tx_hash
        RETURNING 1)
      SELECT count(*)::int AS n FROM gone`
    inflows += gone!.n
    // Not had within the lock timeout (null): a long statement holds claims; next run.
    const done = await underLockTimeout(sql, q.lockTimeoutMs ?? 200, async (tx) => {
      await tx`LOCK TABLE ONLY claims IN ACCESS EXCLUSIVE MODE`
      const [open] = await tx<{ open: boolean }[]>`
        SELECT EXISTS (SELECT 1 FROM ${p} WHERE status = 'claimed')
            OR EXISTS (SELECT 1 FROM ${p} WHERE status = 'settling')
            OR EXISTS (SELECT 1 FROM ${p} WHERE status = 'refund_due')
            OR EXISTS (SELECT 1 FROM ${p} WHERE kind = 'eip3009' AND status = 'captured'
                         AND settled_at IS NULL AND settlement_error IS NULL)
            OR EXISTS (SELECT 1 FROM ${p} WHERE kind = 'upto' AND status = 'captured'
                         AND settled_at IS NULL AND settlement_error IS NULL) AS open`
      if (open!.open) return false
      await tx`ALTER TABLE claims DETACH PARTITION ${p}`
      await tx`DROP TABLE ${p}`
      return true
    })
    ;(done ? dropped : held).push(part.name)
  }
  return { dropped, held, inflows }
}
