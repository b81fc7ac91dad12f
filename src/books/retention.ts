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
               AND coalesce(k.proof_at, k.claimed_at) < ${txCut})
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
