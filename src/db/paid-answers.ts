// Queries on paid answers kept for the x402 `payment-identifier` extension (migration 0032). Only requests
// that carry an identifier touch this table: a reservation before the claim, one write when the call ends.
import type { Sql } from './sql.ts'

export interface PaidAnswer {
  payment_digest: string
  endpoint_id: string
  state: 'pending' | 'stored' | 'not_stored' | 'lost'
  status: number | null
  headers: Array<[string, string]> | null
  body: Buffer | null
}

/**
 * Reserves the identifier for this payment, or returns what it already holds. An expired row is taken over
 * (the identifier is free again; the payment itself stays spent in the claims). A few expired rows are
 * removed on the way, so the table stays the size of its TTL.
 */
export async function reservePaidAnswer(
  sql: Sql,
  q: { paymentId: string; digest: string; endpointId: string; ttlMs: number },
): Promise<{ reserved: true } | { reserved: false; answer: PaidAnswer }> {
  const rows = await sql<Array<PaidAnswer & { reserved: boolean }>>`
    WITH pruned AS (
      DELETE FROM paid_answers WHERE payment_id IN (
        SELECT payment_id FROM paid_answers
        WHERE expires_at < now() AND payment_id <> ${q.paymentId} LIMIT 16)
    ), taken AS (
      INSERT INTO paid_answers (payment_id, payment_digest, endpoint_id, expires_at)
      VALUES (${q.paymentId}, ${q.digest}, ${q.endpointId}, now() + ${q.ttlMs} * interval '1 millisecond')
      ON CONFLICT (payment_id) DO UPDATE SET
        payment_digest = EXCLUDED.payment_digest, endpoint_id = EXCLUDED.endpoint_id, state = 'pending',
        status = NULL, headers = NULL, body = NULL, bytes = 0, expires_at = EXCLUDED.expires_at
        WHERE paid_answers.expires_at < now()
      RETURNING payment_id
    )
    SELECT true AS reserved, NULL AS payment_digest, NULL AS endpoint_id, NULL AS state, NULL::int AS status,
           NULL::jsonb AS headers, NULL::bytea AS body
    FROM taken
    UNION ALL
    SELECT false, payment_digest, endpoint_id, state, status, headers, body
    FROM paid_answers WHERE payment_id = ${q.paymentId} AND NOT EXISTS (SELECT 1 FROM taken)`
  const row = rows[0]
  if (row === undefined || row.reserved) return { reserved: true }
  return { reserved: false, answer: row }
}

/** Reads what an identifier holds (a retry that found its payment already spent). */
export async function readPaidAnswer(sql: Sql, paymentId: string): Promise<PaidAnswer | null> {
  const [row] = await sql<PaidAnswer[]>`
    SELECT payment_digest, endpoint_id, state, status, headers, body FROM paid_answers
    WHERE payment_id = ${paymentId} AND expires_at >= now()`
  return row ?? null
}

/**
 * Keeps a complete answer, or (keep false: the caller found the budget of live answers spent) marks it
 * not_stored, so a retry is told so.
 */
export async function storePaidAnswer(
  sql: Sql,
  q: {
    paymentId: string
    status: number
    headers: Array<[string, string]>
    body: Buffer
    keep: boolean
  },
): Promise<void> {
  if (!q.keep) {
    await closePaidAnswer(sql, { paymentId: q.paymentId, outcome: 'not_stored', status: q.status })
    return
  }
  await sql`
    UPDATE paid_answers SET state = 'stored', status = ${q.status}, headers = ${sql.json(q.headers)}::jsonb,
                            body = ${q.body}::bytea, bytes = ${q.body.length}
    WHERE payment_id = ${q.paymentId} AND state = 'pending'`
}

/** The bytes of the answers kept and not expired, on every instance (the budget max_total_bytes bounds). */
export async function livePaidAnswerBytes(sql: Sql): Promise<number> {
  const [row] = await sql<{ total: string }[]>`
    SELECT coalesce(sum(bytes), 0)::text AS total FROM paid_answers
    WHERE state = 'stored' AND expires_at >= now()`
  return Number(row!.total)
}

/** The call ended without an answer to keep: released (free the identifier) or unknown / too large. */
export async function closePaidAnswer(
  sql: Sql,
  q: { paymentId: string; outcome: 'released' | 'lost' | 'not_stored'; status?: number },
): Promise<void> {
  if (q.outcome === 'released') {
    await sql`DELETE FROM paid_answers WHERE payment_id = ${q.paymentId} AND state = 'pending'`
    return
  }
  await sql`
    UPDATE paid_answers SET state = ${q.outcome}, status = ${q.status ?? null}
    WHERE payment_id = ${q.paymentId} AND state = 'pending'`
}
