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
