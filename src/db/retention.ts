// Prunes of bounded history outside the money room: expired idempotency keys, finished webhook deliveries
// with their attempts, and dispatched events nothing still points at. Each statement deletes at most
// `batch` rows (found through an index on the age column), so a run never holds long locks; the caller
// repeats while a statement came back full.
import type { Sql } from './sql.ts'

/** How long an Idempotency-Key replays its first answer (Stripe's rule); after it the key is a new request. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000

/** Idempotency keys past their 24 h: an expired key replayed is a new request (idempotency.ts frees it too). */
export async function pruneIdempotencyKeys(sql: Sql, q: { batch: number }): Promise<number> {
  const rows = await sql`
    DELETE FROM idempotency_keys WHERE (account_id, key) IN (
      SELECT account_id, key FROM idempotency_keys
      WHERE created_at < now() - ${IDEMPOTENCY_TTL_MS} * interval '1 millisecond'
      LIMIT ${q.batch})
    RETURNING 1`
  return rows.length
}

/** Delivered or failed deliveries created before the retention, with their attempts (pending ones stay). */
export async function pruneWebhookDeliveries(
  sql: Sql,
  q: { olderThanMs: number; batch: number },
): Promise<number> {
  const rows = await sql`
    WITH done AS (
      SELECT id FROM webhook_deliveries
      WHERE status <> 'pending' AND created_at < now() - ${q.olderThanMs} * interval '1 millisecond'
      LIMIT ${q.batch}
    ),
    attempts AS (DELETE FROM webhook_attempts a USING done WHERE a.delivery_id = done.id RETURNING 1)
    -- (attempts runs although nothing reads it: PostgreSQL always completes a modifying CTE; the foreign
    -- key from attempts to deliveries is checked at the end of the statement, when both are gone.)
    DELETE FROM webhook_deliveries d USING done WHERE d.id = done.id
    RETURNING 1`
  return rows.length
}

/** Dispatched events created before the retention that no delivery still refers to. */
export async function pruneEvents(sql: Sql, q: { olderThanMs: number; batch: number }): Promise<number> {
  const rows = await sql`
    DELETE FROM events WHERE id IN (
      SELECT e.id FROM events e
      WHERE e.dispatched_at IS NOT NULL AND e.created_at < now() - ${q.olderThanMs} * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)
      LIMIT ${q.batch})
    RETURNING 1`
  return rows.length
}

/**
 * Sign-in nonces (passes) whose messages are too old to be accepted anyway: a replay of one is refused by
 * its issuedAt before its nonce is looked for.
 */
export async function pruneSignInNonces(sql: Sql, q: { batch: number }): Promise<number> {
  const rows = await sql`
    DELETE FROM sign_in_nonces WHERE nonce IN (
      SELECT nonce FROM sign_in_nonces WHERE expires_at < now() LIMIT ${q.batch})
    RETURNING 1`
  return rows.length
}
