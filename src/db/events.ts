// The transactional outbox: call insertEvent with the SAME transaction as the state change it reports,
// so an event exists exactly when its change does. The webhook dispatcher fans events out to endpoints.
import { newId } from '../ids.ts'
import type { Sql, Tx } from './sql.ts'

export type EventType =
  | 'payment.received'
  | 'payment.underpaid'
  | 'payment.expired'
  | 'payment.refund_scheduled'
  | 'payout.sent'
  | 'payout.failed'
  | 'call.refunded'
  | 'refund.created'
  | 'refund.paid'
  | 'refund.failed'
  | 'facilitator.settled'
  | 'session.closed'

export const EVENT_TYPES: readonly EventType[] = [
  'payment.received',
  'payment.underpaid',
  'payment.expired',
  'payment.refund_scheduled',
  'payout.sent',
  'payout.failed',
  'call.refunded',
  'refund.created',
  'refund.paid',
  'refund.failed',
  'facilitator.settled',
  'session.closed',
]

/** The channel that wakes the dispatcher(s) when an event is written (payload: event id). */
export const EVENT_CREATED_CHANNEL = 'tollgate_event_created'

export async function insertEvent(
  db: Sql | Tx,
  e: { accountId: string; type: EventType; data: Record<string, unknown> },
): Promise<string> {
  const id = newId('evt')
  await db`INSERT INTO events (id, account_id, type, data) VALUES (${id}, ${e.accountId}, ${e.type}, ${db.json(e.data as never)})`
  await db`SELECT pg_notify(${EVENT_CREATED_CHANNEL}, ${id})`
  return id
}

/**
 * Several events in one statement and one wake-up (the dispatcher reads what is pending whatever the
 * payload names): a settlement group's events cost two statements, not two each.
 */
export async function insertEvents(
  db: Sql | Tx,
  events: Array<{ accountId: string; type: EventType; data: Record<string, unknown> }>,
): Promise<string[]> {
  if (events.length === 0) return []
  const ids = events.map(() => newId('evt'))
  const rows = events.map((e, i) => ({ id: ids[i], account_id: e.accountId, type: e.type, data: e.data }))
  await db`
    INSERT INTO events (id, account_id, type, data)
    SELECT e->>'id', e->>'account_id', e->>'type', e->'data' FROM jsonb_array_elements(${db.json(rows as never)}::jsonb) e`
  await db`SELECT pg_notify(${EVENT_CREATED_CHANNEL}, ${ids[ids.length - 1]!})`
  return ids
}
