// Reconcile, the serving invariants: claims against calls, refunds and revenue, by the transition table.
// Needs no chain: every check is a query that returns only the claims that break a rule (index-served by
// the claims and calls primary keys: a captured claim names its call), so a clean run reads counts, not history.
import { claimCallExpectations } from '../../books/transitions.ts'
import type { Sql } from '../../db/sql.ts'

export interface ClaimsCheck {
  claims: number
  /** In a state every path to which captured a call (captured), but no call row. */
  captured_without_call: number
  /** In a state no path to which captured a call (claimed, refund_due, refunded, applied), yet a call row. */
  call_without_capture: number
  /** Taken over without a release of the attempt before (attempts > releases + 1): served twice. */
  rewon_without_release: number
  /** A refund entry for a claim that was captured (the payer refunded for a served call). */
  refunds_of_captured: number
  /** A call whose revenue is due (tx, or x402 once settled) whose owner share + fee ≠ its amount. */
  revenue_mismatch: number
  /** An x402 call booked as revenue before its settlement was confirmed. */
  revenue_before_settlement: number
  /** An upto call charged more than its payer signed. */
  upto_charged_above_signed: number
  /** An upto claim settled for another amount than its call was booked for (settled ≠ booked). */
  upto_settled_not_booked: number
  /** A call whose prepaid ceiling's unused part (refund_atomic) is not exactly what its refund entries owe. */
  unused_refund_mismatch: number
  /** A batch-settlement channel charged past the voucher that covers it, or claimed past its charge. */
  channel_charged_over_signed: number
  differences: string[]
}

/** At most this many claims are named per rule; the counts stay exact. */
const NAMED = 50

// One piece: every rule is a branch of one statement over the range's claims and calls, read once; the
// mapping below names each rule's count. Cut up, each rule would read the range again.
export async function checkClaims(sql: Sql, range: { from: Date; to: Date }): Promise<ClaimsCheck> {
  const expectations = claimCallExpectations()
  const one = [...expectations].filter(([, e]) => e === 'one').map(([s]) => s)
  const none = [...expectations].filter(([, e]) => e === 'none').map(([s]) => s)
  const rows = await sql<
    {
      rule: Exclude<keyof ClaimsCheck, 'claims' | 'differences'>
      n: number
      named: string[]
      detail: string[]
    }[]
  >`
    WITH c AS (
      SELECT c.proof_key, c.kind, c.target_type, c.status, c.attempts, c.releases, c.captured_at, c.settled_at,
             c.settled_atomic, (c.authorization_payload->>'amount') AS signed_max,
             k.id AS call_id, k.amount_atomic AS call_amount,
             -- Booked by entries of its own, and (migration 0050) by its capture batch: its own owner share
             -- and fee, which the batches check holds to the batch's entries. Both at once is booked twice.
             ((SELECT coalesce(sum(e.amount_atomic), 0) FROM ledger_entries e
                WHERE e.source_type = 'call' AND e.source_id = k.id AND e.kind IN ('owner_share', 'fee'))
              + CASE WHEN k.ledger_batch_id IS NOT NULL THEN k.owner_share_atomic + k.fee_atomic ELSE 0 END)::bigint
               AS revenue,
             EXISTS (SELECT 1 FROM ledger_entries e
               WHERE e.kind = 'refund' AND e.source_type = 'claim' AND e.source_id = c.proof_key) AS refunded,
             k.refund_atomic AS call_refund,
             (SELECT coalesce(sum(e.amount_atomic), 0) FROM ledger_entries e
               WHERE e.source_type = 'call' AND e.source_id = k.id AND e.kind = 'refund')::bigint AS refund_booked
      FROM claims c LEFT JOIN calls k ON k.id = c.call_id
      WHERE c.claimed_at >= ${range.from} AND c.claimed_at < ${range.to}
    ),
    -- The other way, the calls of the range (by their time) against their proofs' claims: a call whose claim
    -- is in a state no capture reaches, or names another call, was written without the capture that pays
    -- for it. (A call whose claim has left with its day is not checked: nothing is left to check it by.)
    strays AS (
      SELECT c.proof_key, c.status,
             EXISTS (SELECT 1 FROM ledger_entries e
               WHERE e.kind = 'refund' AND e.source_type = 'claim' AND e.source_id = c.proof_key) AS refunded
      FROM calls k JOIN claims c ON c.proof_key = call_proof_key(k.proof_key, k.proof)
      WHERE k.created_at >= ${range.from} AND k.created_at < ${range.to}
        AND (c.status = ANY(${none}::text[]) OR c.call_id IS DISTINCT FROM k.id)
    ),
    broken AS (
      SELECT 'captured_without_call' AS rule, proof_key, status AS detail FROM c
        WHERE status = ANY(${one}::text[]) AND call_id IS NULL
      UNION ALL
      SELECT 'call_without_capture', proof_key, status FROM (
        SELECT proof_key, status FROM c WHERE status = ANY(${none}::text[]) AND call_id IS NOT NULL
        UNION
        SELECT proof_key, status FROM strays) s
      UNION ALL
      SELECT 'rewon_without_release', proof_key, attempts || ' attempts, ' || releases || ' releases' FROM c
        WHERE attempts > releases + 1 OR releases > attempts
      UNION ALL
      SELECT 'refunds_of_captured', proof_key, status FROM (
        SELECT proof_key, status FROM c
          WHERE refunded AND (call_id IS NOT NULL OR (target_type = 'call' AND captured_at IS NOT NULL))
        UNION
        SELECT proof_key, status FROM strays WHERE refunded) s
      UNION ALL
      SELECT 'revenue_mismatch', proof_key, revenue || ' booked of ' || call_amount FROM c
        WHERE call_id IS NOT NULL AND (kind = 'tx' OR settled_at IS NOT NULL) AND revenue <> call_amount
      UNION ALL
      SELECT 'revenue_before_settlement', proof_key, revenue || ' booked' FROM c
        WHERE call_id IS NOT NULL AND kind IN ('eip3009', 'batch', 'upto') AND settled_at IS NULL AND revenue > 0
      UNION ALL
      SELECT 'upto_charged_above_signed', proof_key, call_amount || ' charged of ' || signed_max || ' signed' FROM c
        WHERE kind = 'upto' AND call_id IS NOT NULL AND call_amount > signed_max::numeric
      UNION ALL
      SELECT 'upto_settled_not_booked', proof_key,
             coalesce(settled_atomic::text, 'nothing') || ' settled of ' || call_amount || ' booked' FROM c
        WHERE kind = 'upto' AND call_id IS NOT NULL AND settled_at IS NOT NULL
          AND settled_atomic IS DISTINCT FROM call_amount
      UNION ALL
      -- An authorization's (MPP charge of a ceiling) is owed once it settled, as its revenue is.
      SELECT 'unused_refund_mismatch', proof_key, refund_booked || ' booked of ' || call_refund FROM c
        WHERE call_id IS NOT NULL AND (kind <> 'eip3009' OR settled_at IS NOT NULL) AND call_refund <> refund_booked
      UNION ALL
      -- Variable charges: a channel is charged at most what its payer signed, and claimed at most its charge.
      SELECT 'channel_charged_over_signed', b.channel_id,
             b.charged_atomic || ' charged, ' || b.signed_max_atomic || ' signed, ' || b.claimed_atomic || ' claimed'
        FROM batch_channels b
        WHERE b.charged_atomic > b.signed_max_atomic OR b.claimed_atomic > b.charged_atomic
    )
    SELECT rule, count(*)::int AS n,
           (array_agg(proof_key ORDER BY proof_key))[1:${NAMED}] AS named,
           (array_agg(detail ORDER BY proof_key))[1:${NAMED}] AS detail
    FROM broken GROUP BY rule
    UNION ALL
    SELECT 'claims', count(*)::int, '{}', '{}' FROM c`
  const check: ClaimsCheck = {
    claims: 0,
    captured_without_call: 0,
    call_without_capture: 0,
    rewon_without_release: 0,
    refunds_of_captured: 0,
    revenue_mismatch: 0,
    revenue_before_settlement: 0,
    upto_charged_above_signed: 0,
    upto_settled_not_booked: 0,
    unused_refund_mismatch: 0,
    channel_charged_over_signed: 0,
    differences: [],
  }
  for (const r of rows) {
    if ((r.rule as string) === 'claims') {
      check.claims = r.n
      continue
    }
    check[r.rule] = r.n
    r.named.forEach((key, i) => {
      check.differences.push(`claim ${key}: ${MESSAGES[r.rule]} (${r.detail[i]})`)
    })
    if (r.n > r.named.length)
      check.differences.push(`… and ${r.n - r.named.length} more: ${MESSAGES[r.rule]}`)
  }
  return check
}

const MESSAGES: Record<Exclude<keyof ClaimsCheck, 'claims' | 'differences'>, string> = {
  captured_without_call: 'is captured but has no call row',
  call_without_capture: 'has a call row but was never captured',
  rewon_without_release: 'was won again without a release: its proof may have been served twice',
  refunds_of_captured: 'was refunded although its call was captured',
  revenue_mismatch: 'owner share + fee differ from the call amount',
  revenue_before_settlement:
    'x402 call booked as revenue before its settlement (or its voucher claim) was confirmed',
  upto_charged_above_signed: 'upto call charged more than its payer signed',
  upto_settled_not_booked: 'upto permit settled on chain for another amount than its call was booked for',
  unused_refund_mismatch:
    'the unused part of its prepaid ceiling is not what its refund entries owe the payer',
  channel_charged_over_signed:
    '(a channel) is charged past the voucher its payer signed, or claimed past its charge',
}
