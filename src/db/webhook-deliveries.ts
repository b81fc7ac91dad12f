// Queries of the webhook dispatcher: fan-out of new events into delivery rows, claims of due deliveries
// (FOR UPDATE SKIP LOCKED + a lease, so several instances never send one delivery at once), attempt results,
// redelivery, and the deliveries a merchant reads.
import { newId } from '../ids.ts'
import { EVENT_CREATED_CHANNEL } from './events.ts'
import type { Sql, Tx } from './sql.ts'

/** A webhook subscribed to an event type: its list holds the type or '*'. */
const SUBSCRIBED = (db: Sql | Tx, type: string) => db`('*' = ANY(w.events) OR ${type} = ANY(w.events))`

/**
 * Creates one pending delivery per (new event, enabled webhook of its account subscribed to its type) and
 * marks the events dispatched, in one transaction: a crash leaves either both or neither. Returns how many
 * events it took (fewer than batch → nothing left).
 */
export async function fanOutEvents(
  sql: Sql,
  q: { batch: number },
): Promise<{ events: number; deliveries: number }> {
  return (await sql.begin(async (tx) => {
    const events = await tx<{ id: string; account_id: string; type: string }[]>`
      SELECT id, account_id, type FROM events WHERE dispatched_at IS NULL
      ORDER BY created_at LIMIT ${q.batch} FOR UPDATE SKIP LOCKED`
    if (events.length === 0) return { events: 0, deliveries: 0 }
    const accounts = [...new Set(events.map((e) => e.account_id))]
    const hooks = await tx<{ id: string; account_id: string; events: string[] }[]>`
      SELECT id, account_id, events FROM webhooks
      WHERE account_id = ANY(${accounts}::text[]) AND status = 'enabled' AND deleted_at IS NULL`
    const rows: { id: string; event_id: string; webhook_id: string; status: string }[] = []
    for (const e of events) {
      for (const w of hooks) {
        if (w.account_id === e.account_id && (w.events.includes('*') || w.events.includes(e.type))) {
          rows.push({ id: newId('whd'), event_id: e.id, webhook_id: w.id, status: 'pending' })
        }
      }
    }
    if (rows.length) {
      await tx`INSERT INTO webhook_deliveries ${tx(rows, 'id', 'event_id', 'webhook_id', 'status')}
               ON CONFLICT (event_id, webhook_id) DO NOTHING`
    }
    await tx`UPDATE events SET dispatched_at = now() WHERE id = ANY(${events.map((e) => e.id)}::text[])`
    return { events: events.length, deliveries: rows.length }
  })) as { events: number; deliveries: number }
}

/** Everything one attempt needs, read under its claim. */
export interface ClaimedDelivery {
  id: string
  event_id: string
  webhook_id: string
  /** Attempts made before this one. */
  attempts: number
  url: string
  secret: string
  /** Still signing during a rotation's overlap; null otherwise. */
  previous_secret: string | null
  event_type: string
  event_data: unknown
  event_created_at: Date
}

/**
 * Claims due deliveries: at most `limit` in all and at most `perWebhook[id]` more for each webhook
 * (a slow receiver fills only its own slots). Rows are locked with SKIP LOCKED, so two instances never
 * pick the same row, and leased until leaseMs from now, so a crashed sender's row comes back later.
 */
export async function claimDueDeliveries(
  sql: Sql,
  q: { limit: number; perWebhookFree: (webhookId: string) => number; exclude: string[]; leaseMs: number },
): Promise<ClaimedDelivery[]> {
  if (q.limit <= 0) return []
  return (await sql.begin(async (tx) => {
    const candidates = await tx<{ id: string; webhook_id: string }[]>`
      SELECT d.id, d.webhook_id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
      WHERE d.status = 'pending' AND d.next_attempt_at <= now()
        AND (d.locked_until IS NULL OR d.locked_until < now())
        AND w.status = 'enabled' AND w.deleted_at IS NULL
        AND NOT (d.webhook_id = ANY(${q.exclude}::text[]))
      ORDER BY d.next_attempt_at
      LIMIT ${q.limit}
      FOR UPDATE OF d SKIP LOCKED`
    const taken = new Map<string, number>()
    const ids: string[] = []
    for (const c of candidates) {
      const n = taken.get(c.webhook_id) ?? 0
      if (n >= q.perWebhookFree(c.webhook_id)) continue
      taken.set(c.webhook_id, n + 1)
      ids.push(c.id)
    }
    if (ids.length === 0) return []
    return tx<ClaimedDelivery[]>`
      UPDATE webhook_deliveries d SET locked_until = now() + ${q.leaseMs} * interval '1 millisecond'
      FROM webhooks w, events e
      WHERE d.id = ANY(${ids}::text[]) AND w.id = d.webhook_id AND e.id = d.event_id
      RETURNING d.id, d.event_id, d.webhook_id, d.attempts, w.url, w.secret,
        CASE WHEN w.previous_secret_expires_at > now() THEN w.previous_secret END AS previous_secret,
        e.type AS event_type, e.data AS event_data, e.created_at AS event_created_at`
  })) as ClaimedDelivery[]
}

export type AttemptResult =
  | { kind: 'delivered'; statusCode: number; latencyMs: number }
  /** Failed; try again after delayMs (from now, on the database clock). */
  | { kind: 'retry'; statusCode: number | null; latencyMs: number; error: string | null; delayMs: number }
  /** Failed and the schedule is spent. */
  | { kind: 'exhausted'; statusCode: number | null; latencyMs: number; error: string | null }

export interface RecordedAttempt {
  /** Set when this failure disabled the webhook: 'gone' (410) or 'failing' (disable_after_ms). */
  disabled: 'gone' | 'failing' | null
}

/**
 * The delivery was not queued again while its attempt was in flight. A redeliver clears the claim
 * (`locked_until`) and makes the row pending: the attempt is still recorded, but the delivery stays queued,
 * or the redeliver would be lost. A row set failed meanwhile (its webhook deleted) takes the attempt's result.
 */
const NOT_REQUEUED = (tx: Sql | Tx) => tx`NOT (status = 'pending' AND locked_until IS NULL)`

/** Writes the attempt, moves the delivery on, and keeps the webhook's failure clock, in one transaction. */
export async function recordAttempt(
  sql: Sql,
  q: { delivery: ClaimedDelivery; result: AttemptResult; gone: boolean; disableAfterMs: number },
): Promise<RecordedAttempt> {
  const { delivery: d, result: r } = q
  return (await sql.begin(async (tx) => {
    const nextAt =
      r.kind === 'retry' ? tx`now() + ${r.delayMs} * interval '1 millisecond'` : tx`NULL::timestamptz`
    await tx`
      INSERT INTO webhook_attempts (delivery_id, webhook_id, event_id, status_code, latency_ms, error, next_attempt_at)
      VALUES (${d.id}, ${d.webhook_id}, ${d.event_id}, ${r.statusCode}, ${Math.round(r.latencyMs)},
              ${r.kind === 'delivered' ? null : r.error}, ${nextAt})`
    if (r.kind === 'delivered') {
      await tx`UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now(), attempts = attempts + 1,
               locked_until = NULL WHERE id = ${d.id} AND ${NOT_REQUEUED(tx)}`
      await tx`UPDATE webhooks SET failing_since = NULL WHERE id = ${d.webhook_id} AND failing_since IS NOT NULL`
      return { disabled: null }
    }
    if (r.kind === 'retry') {
      await tx`UPDATE webhook_deliveries SET attempts = attempts + 1, locked_until = NULL,
               next_attempt_at = now() + ${r.delayMs} * interval '1 millisecond'
               WHERE id = ${d.id} AND ${NOT_REQUEUED(tx)}`
    } else {
      await tx`UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, locked_until = NULL
               WHERE id = ${d.id} AND ${NOT_REQUEUED(tx)}`
    }
    await tx`UPDATE webhooks SET failing_since = COALESCE(failing_since, now()) WHERE id = ${d.webhook_id}`
    const [disabled] = q.gone
      ? await tx<{ reason: 'gone' }[]>`
          UPDATE webhooks SET status = 'disabled', disabled_reason = 'gone'
          WHERE id = ${d.webhook_id} AND status = 'enabled' RETURNING disabled_reason AS reason`
      : await tx<{ reason: 'failing' }[]>`
          UPDATE webhooks SET status = 'disabled', disabled_reason = 'failing'
          WHERE id = ${d.webhook_id} AND status = 'enabled'
            AND failing_since <= now() - ${q.disableAfterMs} * interval '1 millisecond'
          RETURNING disabled_reason AS reason`
    return { disabled: disabled?.reason ?? null }
  })) as RecordedAttempt
}

/**
 * Milliseconds (on the database clock) until the next pending delivery falls due; only future ones count,
 * the poll covers the rest. null if none.
 */
export async function msUntilNextDue(sql: Sql): Promise<number | null> {
  const [row] = await sql<{ ms: number | null }[]>`
    SELECT (extract(epoch FROM min(next_attempt_at) - now()) * 1000)::float8 AS ms
    FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at > now()`
  return row?.ms ?? null
}

export interface DeliveryRow {
  id: string
  event_id: string
  event_type: string
  webhook_id: string
  status: 'pending' | 'delivered' | 'failed'
  attempts: number
  next_attempt_at: Date
  delivered_at: Date | null
  created_at: Date
}

export interface AttemptRow {
  id: bigint
  delivery_id: string
  attempted_at: Date
  status_code: number | null
  latency_ms: number | null
  error: string | null
  next_attempt_at: Date | null
}

export async function listDeliveries(
  db: Sql | Tx,
  q: {
    webhookId: string
    status: string | null
    eventId: string | null
    limit: number
    startingAfter: string | null
  },
): Promise<DeliveryRow[]> {
  return db<DeliveryRow[]>`
    SELECT d.id, d.event_id, e.type AS event_type, d.webhook_id, d.status, d.attempts, d.next_attempt_at,
           d.delivered_at, d.created_at
    FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
    WHERE d.webhook_id = ${q.webhookId}
    ${q.status ? db`AND d.status = ${q.status}` : db``}
    ${q.eventId ? db`AND d.event_id = ${q.eventId}` : db``}
    ${
      q.startingAfter
        ? db`AND (d.created_at, d.id) < (SELECT created_at, id FROM webhook_deliveries WHERE id = ${q.startingAfter} AND webhook_id = ${q.webhookId})`
        : db``
    }
    ORDER BY d.created_at DESC, d.id DESC
    LIMIT ${q.limit}`
}

export async function listAttempts(db: Sql | Tx, deliveryIds: string[]): Promise<AttemptRow[]> {
  if (deliveryIds.length === 0) return []
  return db<AttemptRow[]>`
    SELECT id, delivery_id, attempted_at, status_code, latency_ms, error, next_attempt_at
    FROM webhook_attempts WHERE delivery_id = ANY(${deliveryIds}::text[]) ORDER BY id`
}

/**
 * Queues an event again for the given webhooks (now, with a fresh retry schedule). An existing delivery
 * row is reset rather than duplicated: one row per (event, webhook), its attempts keep their history.
 */
export async function requeueDeliveries(
  db: Sql | Tx,
  q: { eventId: string; webhookIds: string[] },
): Promise<DeliveryRow[]> {
  if (q.webhookIds.length === 0) return []
  const rows = q.webhookIds.map((w) => ({
    id: newId('whd'),
    event_id: q.eventId,
    webhook_id: w,
    status: 'pending',
  }))
  await db`
    INSERT INTO webhook_deliveries ${db(rows, 'id', 'event_id', 'webhook_id', 'status')}
    ON CONFLICT (event_id, webhook_id) DO UPDATE SET status = 'pending', attempts = 0, next_attempt_at = now(),
      delivered_at = NULL, locked_until = NULL`
  const queued = await db<DeliveryRow[]>`
    SELECT d.id, d.event_id, e.type AS event_type, d.webhook_id, d.status, d.attempts, d.next_attempt_at,
           d.delivered_at, d.created_at
    FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
    WHERE d.event_id = ${q.eventId} AND d.webhook_id = ANY(${q.webhookIds}::text[])
    ORDER BY d.created_at, d.id`
  // Wakes the leader's dispatcher now rather than at its next poll.
  await db`SELECT pg_notify(${EVENT_CREATED_CHANNEL}, ${q.eventId})`
  return queued
}

/** The account's enabled webhooks subscribed to an event type. */
export async function subscribedWebhookIds(
  db: Sql | Tx,
  q: { accountId: string; type: string },
): Promise<string[]> {
  const rows = await db<{ id: string }[]>`
    SELECT w.id FROM webhooks w
    WHERE w.account_id = ${q.accountId} AND w.status = 'enabled' AND w.deleted_at IS NULL
      AND ${SUBSCRIBED(db, q.type)}`
  return rows.map((r) => r.id)
}
