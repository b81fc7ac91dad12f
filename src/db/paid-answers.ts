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

/** A reservation asked: the identifier, the payment's digest and endpoint, how long the identifier holds. */
export interface PaidAnswerReserve {
  paymentId: string
  digest: string
  endpointId: string
  ttlMs: number
}

export type ReserveOutcome = { reserved: true } | { reserved: false; answer: PaidAnswer }

/**
 * Reserves each identifier for its payment, or returns what it already holds, for the requests that arrived
 * together (one statement: data-plane/paid-answers.ts groups them). An expired row is taken over (the
 * identifier is free again; the payment itself stays spent in the claims). A few expired rows are removed on
 * the way, so the table stays the size of its TTL. An identifier twice in one group is reserved by its first
 * request; the others are answered after the statement, by what it then holds (in progress), as a concurrent
 * twin on another connection is.
 */
export async function reservePaidAnswers(sql: Sql, qs: PaidAnswerReserve[]): Promise<ReserveOutcome[]> {
  const first = new Map<string, number>()
  for (const [i, q] of qs.entries()) if (!first.has(q.paymentId)) first.set(q.paymentId, i)
  const doc = JSON.stringify(
    [...first.values()].map((i) => ({
      i,
      payment_id: qs[i]!.paymentId,
      digest: qs[i]!.digest,
      endpoint_id: qs[i]!.endpointId,
      ttl_ms: qs[i]!.ttlMs,
    })),
  )
  const rows = await sql<Array<PaidAnswer & { i: number; reserved: boolean }>>`
    WITH req AS MATERIALIZED (
      SELECT * FROM json_to_recordset(${doc}::text::json)
        AS t(i int, payment_id text, digest text, endpoint_id text, ttl_ms bigint)
    ), pruned AS (
      DELETE FROM paid_answers WHERE payment_id IN (
        SELECT payment_id FROM paid_answers
        WHERE expires_at < now() AND payment_id NOT IN (SELECT payment_id FROM req) LIMIT 16)
    ), taken AS (
      INSERT INTO paid_answers (payment_id, payment_digest, endpoint_id, expires_at)
      SELECT payment_id, digest, endpoint_id, now() + ttl_ms * interval '1 millisecond' FROM req
      ON CONFLICT (payment_id) DO UPDATE SET
        payment_digest = EXCLUDED.payment_digest, endpoint_id = EXCLUDED.endpoint_id, state = 'pending',
        status = NULL, headers = NULL, body = NULL, bytes = 0, expires_at = EXCLUDED.expires_at
        WHERE paid_answers.expires_at < now()
      RETURNING payment_id
    )
    SELECT r.i, t.payment_id IS NOT NULL AS reserved, p.payment_digest, p.endpoint_id, p.state, p.status,
           p.headers, p.body
    FROM req r LEFT JOIN taken t USING (payment_id)
    LEFT JOIN paid_answers p ON t.payment_id IS NULL AND p.payment_id = r.payment_id`
  const out = new Array<ReserveOutcome>(qs.length)
  for (const r of rows) {
    // Not taken and nothing there: its row went meanwhile (expired and pruned elsewhere): free, as before.
    out[r.i] = r.reserved || r.state === null ? { reserved: true } : { reserved: false, answer: r }
  }
  for (const [i, q] of qs.entries()) {
    if (first.get(q.paymentId) === i) continue
    const answer = await readPaidAnswer(sql, q.paymentId)
    out[i] = answer === null ? { reserved: true } : { reserved: false, answer }
  }
  return out
}

/** Reads what an identifier holds (a retry that found its payment already spent). */
export async function readPaidAnswer(sql: Sql, paymentId: string): Promise<PaidAnswer | null> {
  const [row] = await sql<PaidAnswer[]>`
    SELECT payment_digest, endpoint_id, state, status, headers, body FROM paid_answers
    WHERE payment_id = ${paymentId} AND expires_at >= now()`
  return row ?? null
}

/** A complete answer to keep for its identifier's retries, or (keep false) to mark not_stored. */
export interface PaidAnswerStore {
  paymentId: string
  status: number
  headers: Array<[string, string]>
  body: Buffer
  keep: boolean
}

/**
 * Keeps the complete answers of the calls that ended together (one statement: data-plane/paid-answers.ts
 * groups them), or marks those the caller found over the budget of live answers not_stored, so a retry is
 * told so. Each row only while it is still pending.
 */
export async function storePaidAnswers(sql: Sql, qs: PaidAnswerStore[]): Promise<undefined[]> {
  const doc = JSON.stringify(
    qs.map((q) => ({
      payment_id: q.paymentId,
      state: q.keep ? 'stored' : 'not_stored',
      status: q.status,
      headers: q.keep ? q.headers : null,
      body: q.keep ? q.body.toString('base64') : null,
      bytes: q.keep ? q.body.length : 0,
    })),
  )
  await sql`
    UPDATE paid_answers a SET state = t.state, status = t.status, headers = t.headers,
                              body = decode(t.body, 'base64'), bytes = t.bytes
    FROM json_to_recordset(${doc}::text::json)
      AS t(payment_id text, state text, status int, headers jsonb, body text, bytes int)
    WHERE a.payment_id = t.payment_id AND a.state = 'pending'`
  return qs.map(() => undefined)
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
