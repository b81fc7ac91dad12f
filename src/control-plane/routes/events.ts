// /events: the account's outbox (what its webhooks are sent), undelivered ones to catch up, and redelivery.
import * as v from 'valibot'
import { type EventRow, findAccountEvent, listEvents } from '../../db/event-queries.ts'
import { EVENT_TYPES } from '../../db/events.ts'
import { type DeliveryRow, requeueDeliveries, subscribedWebhookIds } from '../../db/webhook-deliveries.ts'
import { findOwnedWebhook } from '../../db/webhooks.ts'
import { ApiError } from '../../errors.ts'
import { listOf, Timestamp } from '../api-schemas.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'
import { parseBody } from '../validation.ts'

const RedeliverBody = v.strictObject({
  webhook_id: v.optional(
    v.pipe(v.string('must be a string'), v.regex(/^wh_[0-9A-Za-z]+$/, 'must be a webhook id')),
  ),
})

export const EventObject = v.strictObject({
  id: v.string(),
  object: v.literal('event'),
  type: v.picklist(EVENT_TYPES),
  created_at: Timestamp,
  data: v.pipe(v.record(v.string(), v.unknown()), v.description('the object the event is about')),
  pending_webhooks: v.number(),
})
export const QueuedDelivery = v.strictObject({
  id: v.string(),
  object: v.literal('webhook_delivery'),
  webhook_id: v.string(),
  event_id: v.string(),
  status: v.picklist(['pending', 'delivered', 'failed']),
  next_attempt_at: Timestamp,
})
const Redelivered = v.strictObject({ ...listOf(QueuedDelivery).entries, event_id: v.string() })

export function presentEvent(e: EventRow) {
  return {
    id: e.id,
    object: 'event',
    type: e.type,
    created_at: e.created_at.toISOString(),
    data: e.data,
    pending_webhooks: e.pending_webhooks,
  }
}

function presentQueued(d: DeliveryRow) {
  return {
    id: d.id,
    object: 'webhook_delivery',
    webhook_id: d.webhook_id,
    event_id: d.event_id,
    status: d.status,
    next_attempt_at: d.next_attempt_at.toISOString(),
  }
}

function readBoolean(query: URLSearchParams, name: string): boolean | null {
  const raw = query.get(name)
  if (raw === null) return null
  if (raw === 'true') return true
  if (raw === 'false') return false
  throw new ApiError('invalid_parameter', `${name}: must be true or false`, name)
}

export const eventRoutes: Route[] = [
  {
    method: 'GET',
    path: '/events',
    auth: true,
    doc: {
      summary: "The account's events, newest first",
      list: true,
      query: {
        type: v.optional(v.picklist(EVENT_TYPES)),
        delivery_success: v.optional(
          v.pipe(v.boolean(), v.description('false: only events some webhook has not received yet')),
        ),
      },
      response: { status: 200, schema: listOf(EventObject) },
    },
    async handler({ query, account, db }) {
      const page = readPage(query)
      const type = query.get('type')
      if (type !== null && !(EVENT_TYPES as readonly string[]).includes(type)) {
        throw new ApiError('invalid_parameter', `type: must be one of ${EVENT_TYPES.join(', ')}`, 'type')
      }
      const rows = await listEvents(db, {
        accountId: account.id,
        type,
        deliverySuccess: readBoolean(query, 'delivery_success'),
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      return { status: 200, body: listResponse(rows, page, presentEvent) }
    },
  },
  {
    method: 'GET',
    path: '/events/:id',
    auth: true,
    doc: { summary: 'One event', response: { status: 200, schema: EventObject } },
    async handler({ params, account, db }) {
      const event = await findAccountEvent(db, account.id, params.id!)
      if (!event) throw new ApiError('not_found', `no event ${params.id}`, 'id')
      return { status: 200, body: presentEvent(event) }
    },
  },
  {
    method: 'POST',
    path: '/events/:id/redeliver',
    auth: true,
    doc: {
      summary: 'Send an event again, to one webhook or to every subscribed one',
      body: RedeliverBody,
      bodyOptional: true,
      response: { status: 202, schema: Redelivered },
      errors: [409],
    },
    async handler({ params, account, db, body }) {
      const input = body === undefined ? {} : parseBody(RedeliverBody, body)
      const event = await findAccountEvent(db, account.id, params.id!)
      if (!event) throw new ApiError('not_found', `no event ${params.id}`, 'id')
      let webhookIds: string[]
      if (input.webhook_id) {
        const w = await findOwnedWebhook(db, account.id, input.webhook_id)
        if (!w) throw new ApiError('not_found', `no webhook ${input.webhook_id}`, 'webhook_id')
        if (w.status !== 'enabled') {
          throw new ApiError('invalid_state', `webhook ${w.id} is disabled; enable it first`, 'webhook_id')
        }
        webhookIds = [w.id]
      } else {
        webhookIds = await subscribedWebhookIds(db, { accountId: account.id, type: event.type })
      }
      const queued = await requeueDeliveries(db, { eventId: event.id, webhookIds })
      return {
        status: 202,
        body: { object: 'list', event_id: event.id, data: queued.map(presentQueued), has_more: false },
      }
    },
  },
]
