// Reads of the outbox for GET /events: an account's events with how many of its webhooks still lack them.
import type { Sql, Tx } from './sql.ts'

export interface EventRow {
  id: string
  account_id: string
  type: string
  data: Record<string, unknown>
  created_at: Date
  dispatched_at: Date | null
  /** Live webhooks that have not (yet) received it, counting undispatched subscribers. */
  pending_webhooks: number
}

/**
 * Webhooks (not deleted) that do not have the event yet: a delivery row not delivered, or, before fan-out,
 * an enabled subscriber that will get one.
 */
const PENDING_WEBHOOKS = `(
  (SELECT count(*) FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
    WHERE d.event_id = e.id AND d.status <> 'delivered' AND w.deleted_at IS NULL)
  + CASE WHEN e.dispatched_at IS NULL THEN
      (SELECT count(*) FROM webhooks w WHERE w.account_id = e.account_id AND w.status = 'enabled'
        AND w.deleted_at IS NULL AND ('*' = ANY(w.events) OR e.type = ANY(w.events)))
    ELSE 0 END
)::int`

const DELIVERED_SOMEWHERE = `EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.status = 'delivered')`

export async function listEvents(
  db: Sql | Tx,
  q: {
    accountId: string
    type: string | null
    /** false: some webhook still lacks it; true: delivered to every webhook it was sent to (at least one). */
    deliverySuccess: boolean | null
    limit: number
    startingAfter: string | null
  },
): Promise<EventRow[]> {
  return db<EventRow[]>`
    SELECT * FROM (
      SELECT e.id, e.account_id, e.type, e.data, e.created_at, e.dispatched_at,
             ${db.unsafe(PENDING_WEBHOOKS)} AS pending_webhooks,
             ${db.unsafe(DELIVERED_SOMEWHERE)} AS delivered_somewhere
      FROM events e
      WHERE e.account_id = ${q.accountId}
      ${q.type ? db`AND e.type = ${q.type}` : db``}
      ${
        q.startingAfter
          ? db`AND (e.created_at, e.id) < (SELECT created_at, id FROM events WHERE id = ${q.startingAfter} AND account_id = ${q.accountId})`
          : db``
      }
    ) e
    ${
      q.deliverySuccess === false
        ? db`WHERE e.pending_webhooks > 0`
        : q.deliverySuccess === true
          ? db`WHERE e.pending_webhooks = 0 AND e.delivered_somewhere`
          : db``
    }
    ORDER BY e.created_at DESC, e.id DESC
    LIMIT ${q.limit}`
}

export async function findAccountEvent(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<EventRow | null> {
  const [row] = await db<EventRow[]>`
    SELECT e.id, e.account_id, e.type, e.data, e.created_at, e.dispatched_at,
           ${db.unsafe(PENDING_WEBHOOKS)} AS pending_webhooks
    FROM events e WHERE e.id = ${id} AND e.account_id = ${accountId}`
  return row ?? null
}
