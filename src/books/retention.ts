// Bounded history in the money room: a claim row may go once its proof can never be accepted again, so the
// proof-pays-once guarantee no longer needs it. A transaction proof older than chain.max_proof_age_ms is
// refused by the verifier (proof_too_old) before any claim is looked up; an x402 authorization past its
// validBefore is refused as expired (and one that was settled is used on chain). Only claims whose story is
// over go (captured and, for x402, settled or failed; refunded; applied; void): one still owed a refund or
// a settlement stays whatever its age. Calls, ledger entries and payouts are never pruned.
import type { Sql } from '../db/sql.ts'

/**
 * pruneClaims: claim (closed) → gone. Precondition in its SQL: a closed state; a transaction proof claimed
 * more than `txOlderThanMs` ago (≥ the maximum proof age plus a margin); an x402 authorization claimed more
 * than `authOlderThanMs` ago whose validBefore is at least `marginS` seconds past. Deletes at most `batch`
 * rows; returns how many.
 */
export async function pruneClaims(
  sql: Sql,
  q: { txOlderThanMs: number; authOlderThanMs: number; marginS: number; batch: number },
): Promise<number> {
  const rows = await sql`
    DELETE FROM claims WHERE proof_key IN (
      SELECT proof_key FROM claims
      WHERE (kind = 'tx' AND claimed_at < now() - ${q.txOlderThanMs} * interval '1 millisecond'
             AND status IN ('captured', 'refunded', 'applied', 'void'))
         OR (kind = 'eip3009' AND claimed_at < now() - ${q.authOlderThanMs} * interval '1 millisecond'
             AND (authorization_payload->>'validBefore')::numeric < extract(epoch FROM now()) - ${q.marginS}
             AND (status IN ('refunded', 'applied', 'void')
                  OR (status = 'captured' AND (settled_at IS NOT NULL OR settlement_error IS NOT NULL))))
         -- An upto permit past its deadline cannot be settled or verified again: its claim is no longer needed.
         OR (kind = 'upto' AND claimed_at < now() - ${q.authOlderThanMs} * interval '1 millisecond'
             AND (authorization_payload->>'deadline')::numeric < extract(epoch FROM now()) - ${q.marginS}
             AND (status = 'void'
                  OR (status = 'captured' AND (settled_at IS NOT NULL OR settlement_error IS NOT NULL))))
      LIMIT ${q.batch})
    RETURNING 1`
  return rows.length
}
