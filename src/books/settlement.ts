// The settlement room: the transitions of a captured x402 claim on its way to the chain. Each statement
// states its precondition (a captured eip3009 claim, not settled, not failed); revenue is booked only in
// settleAuthorizations, in the same transaction that marks the claim settled:
// an authorization is not money until it is used on chain, so its call earns nothing before that. A checkout's
// authorization ('settling', src/books/payments.ts) takes the same road: listed, signed, recorded and
// resolved with the calls', then applied to its payment in the transaction that marks it settled.
import type { StoredAuthorization } from '../chain/settle.ts'
import type { PaymentView } from '../db/payment-presenter.ts'
import type { Sql, Tx } from '../db/sql.ts'
import { applyFacilitatorSettlements } from './facilitator.ts'
import { bookSettledCalls, bookSettledCeilingRefunds, SETTLED_CALL, settledCalls } from './ledger.ts'
import { applySettledAuthorizations } from './payments.ts'

type Db = Sql | Tx

/** Why an authorization can no longer be settled: its window closed, or its transaction reverted unused. */
export type SettlementFailure = 'expired' | 'reverted'

export interface SettlementCandidate {
  proof_key: string
  authorization_payload: StoredAuthorization
  settlement_tx: string | null
}

/**
 * An authorization's claim lives in the day partition of its validBefore (claim_horizon_at caps it at the
 * year 9999), never in claims_vouchers (horizon infinity): the polled reads say so, so that partition, the
 * largest under channel traffic, is left out when they are planned (its statistics may be those of its
 * first rows: read anyway, it was scanned whole, 10-20 ms a read under the x402-batch bench).
 */
const AUTHORIZATION_DAYS = "horizon_at < 'infinity'"

/**
 * Authorizations whose settlement was sent (hash recorded) and whose outcome is not known yet, with how long
 * ago the hash could have been recorded (a hash recorded moments ago may not be broadcast yet).
 *
 * capturedBeforeMs: captures younger than that are left out. Those with a hash are the settle-before-answer
 * path's: it broadcasts them, awaits their receipts and books them itself within that time (what it misses
 * is listed here once older). Listed young, the leader's job asked the node for every receipt in flight each
 * run and booked the ones mined in a transaction of their own per hash, racing the path's booking of the
 * same claims (measured on x402-capacity: the job settled 1-15 % of them, and the loser's UPDATE waited
 * for the winner's commit).
 */
export function listSentSettlements(
  db: Db,
  q: { capturedBeforeMs?: number } = {},
): Promise<Array<SettlementCandidate & { age_ms: number }>> {
  const gapMs = q.capturedBeforeMs ?? 0
  return db<Array<SettlementCandidate & { age_ms: number }>>`
    SELECT proof_key, authorization_payload, settlement_tx,
           (extract(epoch FROM now() - captured_at) * 1000)::float8 AS age_ms FROM claims
    WHERE kind = 'eip3009' AND status = 'captured' AND settlement_tx IS NOT NULL
      AND settled_at IS NULL AND settlement_error IS NULL AND ${db.unsafe(AUTHORIZATION_DAYS)}
      AND captured_at <= now() - ${gapMs} * interval '1 millisecond'
    UNION ALL
    SELECT proof_key, authorization_payload, settlement_tx,
           (extract(epoch FROM now() - claimed_at) * 1000)::float8 FROM claims
    -- (An upto permit settling through the facilitator is the upto settlement job's.)
    WHERE status = 'settling' AND kind = 'eip3009' AND settlement_tx IS NOT NULL AND ${db.unsafe(AUTHORIZATION_DAYS)}`
}

/**
 * Captured authorizations not sent yet, the soonest to expire first: a backlog is worked down in the order
 * its windows close, so a late one never waits behind one that has minutes left.
 */
export function listDueSettlements(
  db: Db,
  q: { limit: number; capturedBeforeMs?: number; defaultSettlement?: 'before_answer' | 'after' },
): Promise<SettlementCandidate[]> {
  // capturedBeforeMs: claims of endpoints that settle before the answer (their own choice, or
  // defaultSettlement when they made none), captured more recently, are left to the settle-before-answer
  // path, which records its transaction on them within that time (else they would go out in the treasury's
  // batch and their answers could not name a transaction); so are facilitator claims younger than that, to
  // the facilitator's group commit (control-plane/facilitator-settler.ts). Other claims, and MPP charges
  // (which that path never takes), are due at once.
  const gapMs = q.capturedBeforeMs ?? 0
  const byDefault = q.defaultSettlement ?? 'after'
  return db<SettlementCandidate[]>`
    SELECT proof_key, authorization_payload, settlement_tx FROM (
      SELECT proof_key, authorization_payload, settlement_tx, captured_at FROM claims
      WHERE kind = 'eip3009' AND status = 'captured' AND settlement_tx IS NULL
        AND settled_at IS NULL AND settlement_error IS NULL AND ${db.unsafe(AUTHORIZATION_DAYS)}
        AND (captured_at <= now() - ${gapMs} * interval '1 millisecond'
          -- An MPP charge is never settled before its answer (that path is x402 exact's): due at once.
          OR authorization_payload->>'protocol' = 'mpp' OR NOT EXISTS (
          SELECT 1 FROM endpoints e WHERE e.id = claims.target_id
            AND coalesce(e.x402_settlement, ${byDefault}) = 'before_answer'))
      UNION ALL
      -- Checkout and facilitator authorizations (each its own partial index: one status list would use
      -- neither); a facilitator claim its claiming process sends itself is that process's for the same gap.
      SELECT proof_key, authorization_payload, settlement_tx, claimed_at FROM claims
      WHERE status = 'settling' AND kind = 'eip3009' AND settlement_tx IS NULL AND ${db.unsafe(AUTHORIZATION_DAYS)}
        AND (target_type <> 'facilitator' OR claimed_at <= now() - ${gapMs} * interval '1 millisecond'
             OR NOT EXISTS (SELECT 1 FROM facilitator_settlements f
                            WHERE f.id = claims.target_id AND f.group_commit))
    ) due
    ORDER BY (authorization_payload->>'validBefore')::numeric, captured_at
    LIMIT ${q.limit}`
}

/**
 * Records the hashes of signed settlements before any of them is broadcast: a crash after the broadcast
 * leaves a hash to look up instead of an authorization to send blind. Returns the proof keys recorded (a
 * claim that moved meanwhile, or already has a hash, is left alone and missing from the answer).
 */
export async function recordSettlementTx(db: Db, txs: SettlementPlace[]): Promise<Set<string>> {
  if (txs.length === 0) return new Set()
  const rows = await db<{ proof_key: string }[]>`
    UPDATE claims c SET settlement_tx = m.hash, settlement_index = m.i, settlement_count = m.n
    FROM ${settlementPlaces(db, txs)}
    WHERE c.proof_key = m.proof_key AND c.kind = 'eip3009' AND c.status IN ('captured', 'settling')
      AND c.settlement_tx IS NULL AND c.settled_at IS NULL AND c.settlement_error IS NULL
    RETURNING c.proof_key`
  return new Set(rows.map((r) => r.proof_key))
}

/** A claim's settlement transaction and its place in it: index of count (0 of 1 when sent alone). */
export interface SettlementPlace {
  proofKey: string
  hash: string
  index: number
  count: number
}

/**
 * Settlement places as the rows m(proof_key, hash, i, n) of an UPDATE … FROM: what a record statement
 * writes on each claim, for its receipt.
 */
export function settlementPlaces(db: Db, txs: SettlementPlace[]) {
  return db`unnest(${txs.map((t) => t.proofKey)}::text[], ${txs.map((t) => t.hash)}::text[],
                   ${txs.map((t) => t.index)}::int[], ${txs.map((t) => t.count)}::int[]) AS m(proof_key, hash, i, n)`
}

/** A recorded settlement that was never broadcast or never mined (and its authorization is unused): sign again. */
export async function forgetSettlementTx(db: Db, q: { proofKey: string; hash: string }): Promise<boolean> {
  const rows = await db`
    UPDATE claims SET settlement_tx = NULL, settlement_index = NULL, settlement_count = NULL
    WHERE proof_key = ${q.proofKey} AND settlement_tx = ${q.hash} AND settled_at IS NULL
      AND settlement_error IS NULL
    RETURNING proof_key`
  return rows.length === 1
}

/**
 * The authorizations are used on chain (our transactions, or anyone's: the money arrived all the same): mark
 * their claims settled and book the calls' owner shares and fees, in one transaction (a settlement batch is
 * up to settlement.batch_max authorizations: one commit, not one each). Returns the proof keys settled; a
 * claim not in a settleable state (already settled or failed) is left out: nothing is booked twice.
 */
export function settleAuthorizations(
  sql: Sql,
  q: {
    proofKeys: string[]
    /** The block that mined each one's settlement, by proof key (absent: found used some other way). */
    blocks?: ReadonlyMap<string, bigint>
    /** Used by another transaction than the one recorded (found by its AuthorizationUsed log): that one is
     * named instead, with its place, so the claim points at the transfer that carried its money. */
    usedBy?: ReadonlyMap<string, { tx: string; block: bigint; index: number; count: number }>
    payments?: { ownerShareBps: number; view: PaymentView }
  },
): Promise<string[]> {
  if (q.proofKeys.length === 0) return Promise.resolve([])
  return sql.begin(async (tx) => {
    // Checkout authorizations: their payments are locked first, in id order, as every payment transition
    // does (a cancel locks the payment, then its claims): never the other way round.
    const targets = await tx<{ target_id: string }[]>`
      SELECT DISTINCT target_id FROM claims
      WHERE proof_key = ANY(${q.proofKeys}::text[]) AND status = 'settling' AND target_type = 'payment'
      ORDER BY target_id`
    if (targets.length > 0)
      await tx`SELECT id FROM payments WHERE id = ANY(${targets.map((t) => t.target_id)}::text[]) ORDER BY id FOR UPDATE`
    const blocks = q.proofKeys.map((k) => (q.usedBy?.get(k)?.block ?? q.blocks?.get(k))?.toString() ?? null)
    const txs = q.proofKeys.map((k) => q.usedBy?.get(k)?.tx ?? null)
    const places = q.proofKeys.map((k) => q.usedBy?.get(k)?.index ?? null)
    const counts = q.proofKeys.map((k) => q.usedBy?.get(k)?.count ?? null)
    const rows = await tx<
      {
        proof_key: string
        status: string
        target_type: string
        target_id: string
        settlement_tx: string | null
        call_id: string | null
        captured_utc: string | null
      }[]
    >`
      UPDATE claims k SET settled_at = now(), settlement_block = m.block,
        settlement_tx = coalesce(m.tx, k.settlement_tx),
        settlement_index = CASE WHEN m.tx IS NULL THEN k.settlement_index ELSE m.i END,
        settlement_count = CASE WHEN m.tx IS NULL THEN k.settlement_count ELSE m.n END,
        -- A merchant's authorization (the facilitator) is done once used: settling → applied in this same
        -- write (one row version, not two), its settlement row and booking below.
        status = CASE WHEN k.target_type = 'facilitator' THEN 'applied' ELSE k.status END,
        captured_at = CASE WHEN k.target_type = 'facilitator' THEN now() ELSE k.captured_at END
      FROM unnest(${q.proofKeys}::text[], ${blocks}::bigint[], ${txs}::text[], ${places}::int[],
                  ${counts}::int[]) AS m(proof_key, block, tx, i, n)
      WHERE k.proof_key = m.proof_key AND k.kind = 'eip3009' AND k.status IN ('captured', 'settling')
        AND k.settled_at IS NULL AND k.settlement_error IS NULL
      RETURNING k.proof_key, k.status, k.target_type, k.target_id, k.settlement_tx, ${tx.unsafe(SETTLED_CALL)}`
    const settled = rows.map((r) => r.proof_key)
    const captured = rows.filter((r) => r.status === 'captured')
    const calls = captured.map((r) => r.proof_key)
    if (calls.length > 0) {
      await bookSettledCalls(tx, settledCalls(captured))
      // An MPP charge of a usage-priced call paid its ceiling: the unused part goes back, now that it is in.
      await bookSettledCeilingRefunds(tx, { proofKeys: calls })
    }
    // Authorizations a merchant's middleware sent the facilitator (src/books/facilitator.ts).
    const facilitated = rows.filter((r) => r.target_type === 'facilitator')
    if (facilitated.length > 0)
      await applyFacilitatorSettlements(tx, {
        applied: facilitated.map((r) => ({ id: r.target_id, settlementTx: r.settlement_tx })),
      })
    const checkout = rows
      .filter((r) => r.status === 'settling' && r.target_type === 'payment')
      .map((r) => r.proof_key)
    if (checkout.length > 0) {
      if (!q.payments) throw new Error('settling checkout authorizations needs the payments context')
      await applySettledAuthorizations(tx, { proofKeys: checkout, ...q.payments })
    }
    return settled
  }) as Promise<string[]>
}

/**
 * The authorization can no longer be collected (expired unsent, or its transaction reverted while it is still
 * unused): the served call stays unpaid and nothing is booked for it. The claim keeps its call (it was served)
 * and carries the reason; reconcile checks no revenue exists for an unsettled eip3009 claim.
 */
export async function failSettlement(
  db: Db,
  q: { proofKey: string; reason: SettlementFailure },
): Promise<boolean> {
  // A checkout authorization that can never be settled is void: no money moved, its payment stays open.
  const rows = await db`
    UPDATE claims SET settlement_error = ${q.reason},
                      status = CASE WHEN status = 'settling' THEN 'void' ELSE status END
    WHERE proof_key = ${q.proofKey} AND kind = 'eip3009' AND status IN ('captured', 'settling')
      AND settled_at IS NULL AND settlement_error IS NULL
    RETURNING proof_key`
  return rows.length === 1
}

/** The backlog the intake throttle and the readiness check look at: unsettled captured authorizations. */
export async function readSettlementBacklog(
  db: Db,
): Promise<{ count: number; oldestAgeS: number; soonestValidBeforeS: number | null }> {
  const [row] = await db<{ n: number; oldest_s: number; soonest: string | null }[]>`
    SELECT count(*)::int AS n,
           coalesce(extract(epoch FROM now() - min(captured_at)), 0)::float8 AS oldest_s,
           min((authorization_payload->>'validBefore')::numeric)::text AS soonest
    FROM (
      SELECT captured_at, authorization_payload FROM claims
      WHERE kind = 'eip3009' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL
        AND ${db.unsafe(AUTHORIZATION_DAYS)}
      UNION ALL
      SELECT claimed_at, authorization_payload FROM claims
      WHERE status = 'settling' AND kind = 'eip3009' AND ${db.unsafe(AUTHORIZATION_DAYS)}
    ) b`
  return {
    count: row?.n ?? 0,
    oldestAgeS: row?.oldest_s ?? 0,
    soonestValidBeforeS: row?.soonest ? Number(row.soonest) : null,
  }
}
