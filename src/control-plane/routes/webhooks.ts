// /webhooks: the merchant's signed-event receivers (secret shown once, rotation with overlap, deliveries).
// The /events routes live in events.ts and are exported from here too, so the handler registers one list.
import { lookup } from 'node:dns/promises'
import { isIP } from 'node:net'
import * as v from 'valibot'
import { EVENT_TYPES } from '../../db/events.ts'
import {
  type AttemptRow,
  type DeliveryRow,
  listAttempts,
  listDeliveries,
} from '../../db/webhook-deliveries.ts'
import {
  deleteWebhook,
  findOwnedWebhook,
  insertWebhook,
  listWebhooks,
  rotateWebhookSecret,
  updateWebhook,
  type WebhookChanges,
  type WebhookRow,
} from '../../db/webhooks.ts'
import { ApiError } from '../../errors.ts'
import { newId } from '../../ids.ts'
import { checkTargetUrl, isPrivateAddress } from '../../ssrf.ts'
import { DeletedObject, listOf, NullableTimestamp, Timestamp } from '../api-schemas.ts'
import { newWebhookSecret } from '../jobs/webhook-signature.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route, RouteContext } from '../route.ts'
import { parseBody } from '../validation.ts'
import { eventRoutes } from './events.ts'

/** How long a rotated-out secret keeps signing next to the new one. */
export const SECRET_ROTATION_OVERLAP_MS = 24 * 60 * 60 * 1000

const EventList = v.pipe(
  v.array(v.picklist(['*', ...EVENT_TYPES], `each must be "*" or one of ${EVENT_TYPES.join(', ')}`)),
  v.minLength(1, 'must list at least one event type (or "*")'),
  v.maxLength(EVENT_TYPES.length + 1),
)
const Url = v.pipe(v.string('must be a string'), v.maxLength(2048))

const CreateBody = v.strictObject({ url: Url, events: v.optional(EventList) })
const UpdateBody = v.strictObject({
  url: v.optional(Url),
  events: v.optional(EventList),
  status: v.optional(v.picklist(['enabled', 'disabled'], 'must be "enabled" or "disabled"')),
})

/** '*' alone stands for every type, including types added later. */
function normaliseEvents(events: string[] | undefined): string[] {
  if (!events || events.includes('*')) return ['*']
  return [...new Set(events)]
}

/**
 * https to a public address; plain http only to a private address and only with
 * proxy.allow_private_upstreams (a receiver on the developer's machine or in a test).
 */
async function readWebhookUrl(raw: string, allowPrivate: boolean): Promise<string> {
  const fail = (message: string): never => {
    throw new ApiError('invalid_webhook_url', `url: ${message}`, 'url')
  }
  const checked = await checkTargetUrl(raw, {
    allowPrivate,
    schemes: allowPrivate ? ['https:', 'http:'] : ['https:'],
  })
  if (!checked.ok) return fail(checked.message)
  if (checked.url.protocol === 'http:') {
    const host = checked.url.hostname.replace(/^\[|\]$/g, '')
    const addresses = isIP(host)
      ? [host]
      : await lookup(host, { all: true }).then(
          (a) => a.map((x) => x.address),
          () => [],
        )
    if (addresses.length === 0) return fail(`cannot resolve ${host}`)
    if (!addresses.every(isPrivateAddress))
      return fail('must be https (http is only allowed to private addresses)')
  }
  return checked.url.toString()
}

export const WebhookObject = v.strictObject({
  id: v.string(),
  object: v.literal('webhook'),
  url: v.string(),
  events: v.array(v.string()),
  status: v.picklist(['enabled', 'disabled']),
  enabled: v.boolean(),
  disabled_reason: v.nullable(v.string()),
  failing_since: NullableTimestamp,
  previous_secret_expires_at: NullableTimestamp,
  created_at: Timestamp,
})
const WebhookWithSecret = v.strictObject({
  ...WebhookObject.entries,
  secret: v.pipe(v.string(), v.regex(/^whsec_/), v.description('the signing secret, shown once')),
})
const AttemptObject = v.strictObject({
  attempted_at: Timestamp,
  status_code: v.nullable(v.number()),
  latency_ms: v.nullable(v.number()),
  error: v.nullable(v.string()),
  next_attempt_at: NullableTimestamp,
})
const DeliveryObject = v.strictObject({
  id: v.string(),
  object: v.literal('webhook_delivery'),
  webhook_id: v.string(),
  event_id: v.string(),
  event_type: v.string(),
  status: v.picklist(['pending', 'delivered', 'failed']),
  attempts_count: v.number(),
  next_attempt_at: NullableTimestamp,
  delivered_at: NullableTimestamp,
  created_at: Timestamp,
  attempts: v.array(AttemptObject),
})

export function presentWebhook(w: WebhookRow): v.InferOutput<typeof WebhookObject> {
  return {
    id: w.id,
    object: 'webhook',
    url: w.url,
    events: w.events,
    status: w.status,
    enabled: w.status === 'enabled',
    disabled_reason: w.disabled_reason,
    failing_since: w.failing_since?.toISOString() ?? null,
    previous_secret_expires_at:
      w.previous_secret_expires_at && w.previous_secret_expires_at > new Date()
        ? w.previous_secret_expires_at.toISOString()
        : null,
    created_at: w.created_at.toISOString(),
  }
}

function presentAttempt(a: AttemptRow): v.InferOutput<typeof AttemptObject> {
  return {
    attempted_at: a.attempted_at.toISOString(),
    status_code: a.status_code,
    latency_ms: a.latency_ms,
    error: a.error,
    next_attempt_at: a.next_attempt_at?.toISOString() ?? null,
  }
}

function presentDelivery(d: DeliveryRow, attempts: AttemptRow[]): v.InferOutput<typeof DeliveryObject> {
  return {
    id: d.id,
    object: 'webhook_delivery',
    webhook_id: d.webhook_id,
    event_id: d.event_id,
    event_type: d.event_type,
    status: d.status,
    attempts_count: d.attempts,
    next_attempt_at: d.status === 'pending' ? d.next_attempt_at.toISOString() : null,
    delivered_at: d.delivered_at?.toISOString() ?? null,
    created_at: d.created_at.toISOString(),
    attempts: attempts.map(presentAttempt),
  }
}

async function ownedOr404(ctx: Pick<RouteContext, 'db' | 'account'>, id: string): Promise<WebhookRow> {
  const w = await findOwnedWebhook(ctx.db, ctx.account.id, id)
  // Another account's webhook is indistinguishable from a missing one.
  if (!w) throw new ApiError('not_found', `no webhook ${id}`, 'id')
  return w
}

const DELIVERY_STATUSES = new Set(['pending', 'delivered', 'failed'])

export const webhookRoutes: Route[] = [
  {
    method: 'POST',
    path: '/webhooks',
    auth: true,
    idempotent: true,
    doc: {
      summary: 'Register a receiver of signed events; the answer holds its secret, shown once',
      body: CreateBody,
      response: { status: 201, schema: WebhookWithSecret },
    },
    async handler({ body, account, db, deps }) {
      const input = parseBody(CreateBody, body)
      const url = await readWebhookUrl(input.url, deps.config.proxy.allow_private_upstreams)
      const secret = newWebhookSecret()
      const row = await insertWebhook(db, {
        id: newId('wh'),
        accountId: account.id,
        url,
        events: normaliseEvents(input.events),
        secret,
      })
      // The only response that carries the secret (besides rotate-secret's new one).
      return { status: 201, body: { ...presentWebhook(row), secret } }
    },
  },
  {
    method: 'GET',
    path: '/webhooks',
    auth: true,
    doc: {
      summary: "The account's webhooks",
      list: true,
      response: { status: 200, schema: listOf(WebhookObject) },
    },
    async handler({ query, account, db }) {
      const page = readPage(query)
      const rows = await listWebhooks(db, {
        accountId: account.id,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      return { status: 200, body: listResponse(rows, page, presentWebhook) }
    },
  },
  {
    method: 'GET',
    path: '/webhooks/:id',
    auth: true,
    doc: { summary: 'One webhook', response: { status: 200, schema: WebhookObject } },
    async handler(ctx) {
      return { status: 200, body: presentWebhook(await ownedOr404(ctx, ctx.params.id!)) }
    },
  },
  {
    method: 'PATCH',
    path: '/webhooks/:id',
    auth: true,
    doc: {
      summary: 'Change url, events or status',
      body: UpdateBody,
      response: { status: 200, schema: WebhookObject },
    },
    async handler(ctx) {
      const input = parseBody(UpdateBody, ctx.body)
      const changes: WebhookChanges = {}
      if (input.url !== undefined)
        changes.url = await readWebhookUrl(input.url, ctx.deps.config.proxy.allow_private_upstreams)
      if (input.events !== undefined) changes.events = normaliseEvents(input.events)
      if (input.status !== undefined) changes.status = input.status
      const row = await updateWebhook(ctx.db, { accountId: ctx.account.id, id: ctx.params.id!, changes })
      if (!row) throw new ApiError('not_found', `no webhook ${ctx.params.id}`, 'id')
      return { status: 200, body: presentWebhook(row) }
    },
  },
  {
    method: 'DELETE',
    path: '/webhooks/:id',
    auth: true,
    doc: { summary: 'Delete a webhook', response: { status: 200, schema: DeletedObject } },
    async handler({ params, account, deps }) {
      const deleted = await deps.sql.begin((tx) => deleteWebhook(tx, account.id, params.id!))
      if (!deleted) throw new ApiError('not_found', `no webhook ${params.id}`, 'id')
      return { status: 200, body: { id: params.id, object: 'webhook', deleted: true } }
    },
  },
  {
    method: 'POST',
    path: '/webhooks/:id/rotate-secret',
    auth: true,
    doc: {
      summary: 'A new signing secret; the old one keeps signing beside it for 24 h',
      response: { status: 200, schema: WebhookWithSecret },
    },
    async handler({ params, account, db }) {
      const secret = newWebhookSecret()
      const row = await rotateWebhookSecret(db, {
        accountId: account.id,
        id: params.id!,
        secret,
        overlapMs: SECRET_ROTATION_OVERLAP_MS,
      })
      if (!row) throw new ApiError('not_found', `no webhook ${params.id}`, 'id')
      return { status: 200, body: { ...presentWebhook(row), secret } }
    },
  },
  {
    method: 'GET',
    path: '/webhooks/:id/deliveries',
    auth: true,
    doc: {
      summary: "A webhook's deliveries with every attempt",
      list: true,
      query: {
        status: v.optional(v.picklist(['pending', 'delivered', 'failed'])),
        event_id: v.optional(v.string()),
      },
      response: { status: 200, schema: listOf(DeliveryObject) },
    },
    async handler(ctx) {
      const { query } = ctx
      const webhook = await ownedOr404(ctx, ctx.params.id!)
      const page = readPage(query)
      const status = query.get('status')
      if (status !== null && !DELIVERY_STATUSES.has(status)) {
        throw new ApiError('invalid_parameter', 'status: must be pending, delivered or failed', 'status')
      }
      const eventId = query.get('event_id')
      if (eventId !== null && !/^evt_[0-9A-Za-z]+$/.test(eventId)) {
        throw new ApiError('invalid_parameter', 'event_id: must be an event id', 'event_id')
      }
      const rows = await listDeliveries(ctx.db, {
        webhookId: webhook.id,
        status,
        eventId,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      const attempts = await listAttempts(
        ctx.db,
        rows.slice(0, page.limit).map((d) => d.id),
      )
      const byDelivery = new Map<string, AttemptRow[]>()
      for (const a of attempts) {
        const list = byDelivery.get(a.delivery_id)
        if (list) list.push(a)
        else byDelivery.set(a.delivery_id, [a])
      }
      return {
        status: 200,
        body: listResponse(rows, page, (d) => presentDelivery(d, byDelivery.get(d.id) ?? [])),
      }
    },
  },
  ...eventRoutes,
]
