// The settlement room of x402 `upto`: a captured upto claim (its permit signed for a maximum) on its way to
// the chain for its call's charge. Each statement states its precondition (a captured upto claim, not
// settled, not failed); revenue is booked only in settleUptoClaims, in the same transaction that marks the
// claim settled with what the chain moved, so settled = booked is a fact reconcile can check.
import type { StoredUptoPermit } from '../chain/upto-permit.ts'
import type { Sql, Tx } from '../db/sql.ts'
import { applyFacilitatorSettlements } from './facilitator.ts'
import { bookSettledCalls, SETTLED_CALL, settledCalls } from './ledger.ts'
import { type SettlementPlace, settlementPlaces } from './settlement.ts'

type Db = Sql | Tx

export interface UptoSettlementCandidate {
  proof_key: string
  authorization_payload: StoredUptoPermit
  settlement_tx: string | null
  /** The call's charge (what settlement takes), base units. */
  charge_atomic: bigint
}

// A captured call's permit settles for its call's charge; a permit the facilitator was asked to settle
// ('settling', target_type facilitator, no call) for the amount its claim holds (what the merchant settled).
const CANDIDATE = (db: Db) => db`
  SELECT k.proof_key, k.authorization_payload, k.settlement_tx,
         CASE WHEN k.target_type = 'facilitator' THEN k.amount_atomic ELSE c.amount_atomic END AS charge_atomic
  FROM claims k LEFT JOIN calls c ON c.id = k.call_id`

/** An upto claim on its way to the chain: a served call's (captured) or a facilitator settlement's. */
const UNSETTLED = (db: Db) => db`
  k.kind = 'upto' AND (k.status = 'captured' OR (k.status = 'settling' AND k.target_type = 'facilitator'))
  -- A permit's claim lives in the day of its deadline (claim_horizon_at caps it at the year 9999), never in
  -- claims_vouchers: that partition, the largest under channel traffic, is left out of the plan.
  AND k.horizon_at < 'infinity'`

/** A candidate with its charge: a call's permit with its call row (as before, by a join), or a facilitator's. */
const CHARGED = (db: Db) => db`(c.id IS NOT NULL OR k.target_type = 'facilitator')`

/**
 * Upto settlements sent (hash recorded) whose outcome is not known yet, with their capture's age (a settler
 * records the hash with the capture and broadcasts right after).
 */
export function listSentUptoSettlements(
  db: Db,
): Promise<Array<UptoSettlementCandidate & { age_ms: number }>> {
  return db<Array<UptoSettlementCandidate & { age_ms: number }>>`
    SELECT s.*, (extract(epoch FROM now() - k2.captured_at) * 1000)::float8 AS age_ms
    FROM (${CANDIDATE(db)}
    WHERE ${UNSETTLED(db)} AND ${CHARGED(db)} AND k.settlement_tx IS NOT NULL
      AND k.settled_at IS NULL AND k.settlement_error IS NULL) s
    JOIN claims k2 ON k2.proof_key = s.proof_key AND k2.horizon_at < 'infinity'`
}

/** Captured upto claims not sent yet, the soonest permit deadline first. */
export function listDueUptoSettlements(db: Db, q: { limit: number }): Promise<UptoSettlementCandidate[]> {
  return db<UptoSettlementCandidate[]>`
    ${CANDIDATE(db)}
    WHERE ${UNSETTLED(db)} AND ${CHARGED(db)} AND k.settlement_tx IS NULL
      AND k.settled_at IS NULL AND k.settlement_error IS NULL
    ORDER BY (k.authorization_payload->>'deadline')::numeric, k.captured_at
    LIMIT ${q.limit}`
}

/**
 * Records the hashes of signed upto settlements before any is broadcast, each with the permit's place in its
 * transaction (index among the count it carries; 0 of 1 when sent alone), for its receipt. Refuses (leaves
 * out of the answer) a claim that moved meanwhile, already has a hash, or whose charge is above what its
 * payer signed: such a transaction is never sent.
 */
export async function recordUptoSettlementTx(db: Db, txs: SettlementPlace[]): Promise<Set<string>> {
  if (txs.length === 0) return new Set()
  const rows = await db<{ proof_key: string }[]>`
    UPDATE claims k SET settlement_tx = m.hash, settlement_index = m.i, settlement_count = m.n
    FROM ${settlementPlaces(db, txs)}
    WHERE k.proof_key = m.proof_key AND k.kind = 'upto'
      AND (k.status = 'captured' OR (k.status = 'settling' AND k.target_type = 'facilitator'))
      AND k.settlement_tx IS NULL AND k.settled_at IS NULL
      AND k.settlement_error IS NULL
      AND (CASE WHEN k.target_type = 'facilitator' THEN k.amount_atomic
                ELSE (SELECT c.amount_atomic FROM calls c WHERE c.id = k.call_id) END)
          BETWEEN 1 AND (k.authorization_payload->>'amount')::numeric
    RETURNING k.proof_key`
  return new Set(rows.map((r) => r.proof_key))
}

/** A recorded upto settlement never broadcast or never mined while its permit is unspent: sign again. */
export async function forgetUptoSettlementTx(
  db: Db,
  q: { proofKey: string; hash: string },
): Promise<boolean> {
  const rows = await db`
    UPDATE claims SET settlement_tx = NULL, settlement_index = NULL, settlement_count = NULL
    WHERE proof_key = ${q.proofKey} AND kind = 'upto' AND settlement_tx = ${q.hash} AND settled_at IS NULL
      AND settlement_error IS NULL
    RETURNING proof_key`
  return rows.length === 1
}

/**
 * The chain moved `settledAtomic` for each permit (0: a call charged nothing, nothing to send): mark the
 * claims settled with that amount, and the block that mined it (absent for a zero charge: no transaction),
 * and book their calls' owner shares and fees, in one transaction. Only amounts within what the payer
 * signed are accepted. Returns the proof keys settled; a claim not in a settleable state is left out, so
 * nothing is booked twice.
 */
export function settleUptoClaims(
  sql: Sql,
  q: { settled: Array<{ proofKey: string; settledAtomic: bigint; block?: bigint }> },
): Promise<string[]> {
  if (q.settled.length === 0) return Promise.resolve([])
  return sql.begin(async (tx) => {
    const rows = await tx<
      {
        proof_key: string
        target_type: string
        target_id: string
        settlement_tx: string | null
        call_id: string | null
        captured_utc: string | null
      }[]
    >`
      UPDATE claims k SET settled_at = now(), settled_atomic = m.amount, settlement_block = m.block,
        -- A facilitator's permit is done once used: settling → applied in this same write.
        status = CASE WHEN k.target_type = 'facilitator' THEN 'applied' ELSE k.status END,
        captured_at = CASE WHEN k.target_type = 'facilitator' THEN now() ELSE k.captured_at END
      FROM unnest(${q.settled.map((s) => s.proofKey)}::text[],
                  ${q.settled.map((s) => s.settledAtomic.toString())}::bigint[],
                  ${q.settled.map((s) => s.block?.toString() ?? null)}::bigint[]) AS m(proof_key, amount, block)
      WHERE k.proof_key = m.proof_key AND k.kind = 'upto'
        AND (k.status = 'captured' OR (k.status = 'settling' AND k.target_type = 'facilitator'))
        AND k.settled_at IS NULL AND k.settlement_error IS NULL
        AND m.amount <= (k.authorization_payload->>'amount')::numeric
      RETURNING k.proof_key, k.target_type, k.target_id, k.settlement_tx, ${tx.unsafe(SETTLED_CALL)}`
    const settled = rows.map((r) => r.proof_key)
    if (settled.length > 0) {
      // A call's permit books its call; a facilitator's books its settlement.
      await bookSettledCalls(tx, settledCalls(rows.filter((r) => r.target_type === 'call')))
      const facilitated = rows.filter((r) => r.target_type === 'facilitator')
      await applyFacilitatorSettlements(tx, {
        applied: facilitated.map((r) => ({ id: r.target_id, settlementTx: r.settlement_tx })),
      })
    }
    return settled
  }) as Promise<string[]>
}

/**
 * Why an upto permit can no longer be settled: its deadline passed, its transaction failed with it unspent,
 * its call was booked above what the payer signed (never sent: the proxy would refuse it anyway), or it
 * names a facilitator that is not this treasury's (only that account may settle it).
 */
export type UptoSettlementFailure = 'expired' | 'reverted' | 'over_maximum' | 'not_our_facilitator'

/** The permit can no longer be collected: the served call stays unpaid and nothing is booked for it. */
export async function failUptoSettlement(
  db: Db,
  q: { proofKey: string; reason: UptoSettlementFailure },
): Promise<boolean> {
  const rows = await db`
    UPDATE claims SET settlement_error = ${q.reason}
    WHERE proof_key = ${q.proofKey} AND kind = 'upto'
      AND (status = 'captured' OR (status = 'settling' AND target_type = 'facilitator'))
      AND settled_at IS NULL AND settlement_error IS NULL
    RETURNING proof_key`
  return rows.length === 1
}

/**
 * The upto backlog the readiness check and the intake throttle look at: unsettled captured permits, the
 * oldest capture's age and the soonest deadline.
 */
export async function readUptoSettlementBacklog(
  db: Db,
): Promise<{ count: number; oldestAgeS: number; soonestDeadlineS: number | null }> {
  const [row] = await db<{ n: number; oldest_s: number; soonest: string | null }[]>`
    SELECT count(*)::int AS n,
           coalesce(extract(epoch FROM now() - min(captured_at)), 0)::float8 AS oldest_s,
           min((authorization_payload->>'deadline')::numeric)::text AS soonest
    FROM claims
    WHERE kind = 'upto' AND (status = 'captured' OR (status = 'settling' AND target_type = 'facilitator'))
      AND settled_at IS NULL AND settlement_error IS NULL AND horizon_at < 'infinity'`
  return {
    count: row?.n ?? 0,
    oldestAgeS: row?.oldest_s ?? 0,
    soonestDeadlineS: row?.soonest ? Number(row.soonest) : null,
  }
}
