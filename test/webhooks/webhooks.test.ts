// Webhooks end to end on one instance: CRUD, Standard Webhooks signatures checked with the
// `standardwebhooks` library, retries through a receiver that is down / failing / slow, Retry-After,
// 410, disabling, per-webhook concurrency, secret rotation, and the events API.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { Webhook } from 'standardwebhooks'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { signPayload } from '../../src/control-plane/jobs/webhook-signature.ts'
import { type EventType, insertEvent } from '../../src/db/events.ts'
import { freePort } from '../helpers/child-service.ts'
import { usingServer } from '../helpers/database.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type Captured, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

const POLL_MS = usingServer ? 1000 : 200
let svc: TestService
const receivers: WebhookReceiver[] = []

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      webhooks: {
        retry_schedule_ms: [100, 200, 300, 400],
        timeout_ms: 500,
        concurrency: 2,
        poll_interval_ms: POLL_MS,
      },
    },
  })
})
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.close()))
  await svc?.stop()
})

async function merchant() {
  const m = await registerMerchant(svc, privateKeyToAccount(generatePrivateKey()).address)
  return { key: m.key, accountId: m.account.id as string }
}

async function receiver(options: Parameters<typeof startWebhookReceiver>[0] = {}) {
  const r = await startWebhookReceiver(options)
  receivers.push(r)
  return r
}

async function createWebhook(key: string, url: string, events?: string[]) {
  const r = await svc.api('/api/v1/webhooks', { key, body: { url, ...(events ? { events } : {}) } })
  expect(r.status, r.text).toBe(201)
  return r.body as { id: string; secret: string; url: string; events: string[] }
}

function emit(accountId: string, data: Record<string, unknown> = {}, type: EventType = 'payment.received') {
  return insertEvent(svc.sql, { accountId, type, data })
}

const byEvent = (id: string) => (c: Captured) => c.headers['webhook-id'] === id

/**
 * The event's delivery to this webhook once it reads delivered with `attempts` attempts (each attempt is
 * recorded just after the receiver answered, so a count read at once may be one short).
 */
function deliveredAfter(key: string, webhookId: string, eventId: string, attempts: number) {
  return waitFor(
    async () => {
      const res = await svc.api(`/api/v1/webhooks/${webhookId}/deliveries?event_id=${eventId}`, { key })
      const d = res.body.data[0]
      return d?.status === 'delivered' && d.attempts.length === attempts && res
    },
    { what: `the delivery delivered after ${attempts} attempts`, timeoutMs: 8000, intervalMs: 25 },
  )
}

describe('webhook endpoints', () => {
  it('creates a webhook and shows its whsec_ secret once', async () => {
    const { key } = await merchant()
    const wh = await createWebhook(key, 'https://127.0.0.1:9/hook')
    expect(wh.id).toMatch(/^wh_/)
    expect(wh.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/)
    expect(Buffer.from(wh.secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24)
    expect(wh.events).toEqual(['*'])
    const one = await svc.api(`/api/v1/webhooks/${wh.id}`, { key })
    expect(one.status).toBe(200)
    expect(one.body).toMatchObject({ id: wh.id, status: 'enabled', url: 'https://127.0.0.1:9/hook' })
    expect(one.text).not.toContain(wh.secret.slice(6))
    const list = await svc.api('/api/v1/webhooks', { key })
    expect(list.body.data.map((w: { id: string }) => w.id)).toEqual([wh.id])
    expect(list.text).not.toContain(wh.secret.slice(6))
    const patched = await svc.api(`/api/v1/webhooks/${wh.id}`, {
      key,
      method: 'PATCH',
      body: { events: ['payout.sent', 'payout.sent'], url: 'https://127.0.0.1:9/v2' },
    })
    expect(patched.body).toMatchObject({
      events: ['payout.sent'],
      url: 'https://127.0.0.1:9/v2',
      status: 'enabled',
    })
    const other = await merchant()
    expect((await svc.api(`/api/v1/webhooks/${wh.id}`, { key: other.key })).status).toBe(404)
    expect((await svc.api(`/api/v1/webhooks/${wh.id}`, { key, method: 'DELETE' })).status).toBe(200)
    expect((await svc.api(`/api/v1/webhooks/${wh.id}`, { key })).status).toBe(404)
  })

  it('refuses bad URLs and unknown event types', async () => {
    const { key } = await merchant()
    const bad = async (body: unknown) => (await svc.api('/api/v1/webhooks', { key, body })).body.error
    expect(await bad({ url: 'ftp://example.com/x' })).toMatchObject({
      code: 'invalid_webhook_url',
      param: 'url',
    })
    expect(await bad({ url: 'not a url' })).toMatchObject({ code: 'invalid_webhook_url' })
    // Plain http only to a private address (and only with allow_private_upstreams, as in tests).
    expect(await bad({ url: 'http://8.8.8.8/hook' })).toMatchObject({ code: 'invalid_webhook_url' })
    expect(await bad({ url: 'https://x.test/', events: ['payment.nope'] })).toMatchObject({
      code: 'invalid_parameter',
      param: 'events.0',
    })
    expect(await bad({ url: 'https://x.test/', events: [] })).toMatchObject({ code: 'invalid_parameter' })
  })
})

describe('delivery and signatures', () => {
  it('every delivery verifies with the standardwebhooks library; tampering, a wrong secret or an old timestamp fail', async () => {
    const { key, accountId } = await merchant()
    const r = await receiver()
    const wh = await createWebhook(key, `${r.url}/hook`)
    const ids = [
      await emit(accountId, { n: 1 }),
      await emit(accountId, { n: 2 }),
      await emit(accountId, { n: 3 }),
    ]
    const got = await Promise.all(ids.map((id) => r.waitFor(byEvent(id))))
    const verifier = new Webhook(wh.secret)
    for (const [i, c] of got.entries()) {
      const payload = verifier.verify(c.body, c.headers) as Record<string, unknown>
      expect(payload).toMatchObject({ id: ids[i], type: 'payment.received', data: { n: i + 1 } })
      expect(Object.keys(payload).sort()).toEqual(['created_at', 'data', 'id', 'type'])
      expect(c.headers['content-type']).toBe('application/json')
      expect(c.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/)
    }
    const c = got[0]!
    expect(() => verifier.verify(c.body.replace('"n":1', '"n":9'), c.headers)).toThrow()
    expect(() =>
      new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(c.body, c.headers),
    ).toThrow()
    // A correctly signed message whose timestamp is 6 minutes old fails on the timestamp alone.
    const old = Math.floor(Date.now() / 1000) - 6 * 60
    const stale = {
      ...c.headers,
      'webhook-timestamp': String(old),
      'webhook-signature': signPayload({
        id: ids[0]!,
        timestampSeconds: old,
        body: c.body,
        secrets: [wh.secret],
      }),
    }
    expect(() => verifier.verify(c.body, stale)).toThrow(/timestamp/i)
    // By hand with node:crypto, as docs/webhooks.md shows.
    const keyBytes = Buffer.from(wh.secret.slice('whsec_'.length), 'base64')
    const expected = createHmac('sha256', keyBytes)
      .update(`${c.headers['webhook-id']}.${c.headers['webhook-timestamp']}.${c.body}`)
      .digest()
    const sig = Buffer.from(c.headers['webhook-signature']!.split(' ')[0]!.slice(3), 'base64')
    expect(timingSafeEqual(sig, expected)).toBe(true)
  })

  it('only subscribed webhooks get an event', async () => {
    const { key, accountId } = await merchant()
    const all = await receiver()
    const payouts = await receiver()
    await createWebhook(key, `${all.url}/a`)
    await createWebhook(key, `${payouts.url}/p`, ['payout.sent', 'payout.failed'])
    const pay = await emit(accountId, {}, 'payment.received')
    const po = await emit(accountId, {}, 'payout.sent')
    await all.waitFor(byEvent(pay))
    await all.waitFor(byEvent(po))
    await payouts.waitFor(byEvent(po))
    expect(payouts.received.some(byEvent(pay))).toBe(false)
  })

  it.runIf(usingServer)(
    'a written event wakes the dispatcher at once (LISTEN), not at the next poll',
    async () => {
      const { key, accountId } = await merchant()
      const r = await receiver()
      await createWebhook(key, `${r.url}/hook`)
      // A fixed pause on purpose: a poll the creation may have started passes, so the time measured below
      // is the LISTEN wake-up alone.
      await new Promise((res) => setTimeout(res, 50))
      const started = Date.now()
      const id = await emit(accountId)
      const c = await r.waitFor(byEvent(id))
      expect(c.receivedAt - started).toBeLessThan(POLL_MS / 2)
    },
  )
})

describe('retries', () => {
  it('receiver refusing, then 500, then too slow, then up: delivered once up, same webhook-id, attempts listed', async () => {
    const { key, accountId } = await merchant()
    const port = await freePort()
    const wh = await createWebhook(key, `http://127.0.0.1:${port}/hook`)
    const id = await emit(accountId, { order: 42 })
    const deliveries = () => svc.api(`/api/v1/webhooks/${wh.id}/deliveries`, { key })
    // Nothing listens yet: the first attempt is refused.
    await waitFor(async () => (await deliveries()).body.data[0]?.attempts.length >= 1, {
      what: 'the condition',
      timeoutMs: 8000,
      intervalMs: 25,
    })
    const undelivered = await svc.api('/api/v1/events?delivery_success=false', { key })
    expect(undelivered.body.data.map((e: { id: string }) => e.id)).toEqual([id])
    // Then 500, then no answer within the 500 ms timeout, then 200.
    const r = await receiver({
      port,
      answer: (c) => (c.n === 1 ? { status: 500 } : c.n === 2 ? 'hang' : { status: 200 }),
    })
    await r.waitFor((c) => c.n === 3)
    const list = await waitFor(
      async () => {
        const d = await deliveries()
        return d.body.data[0]?.status === 'delivered' && d
      },
      { what: 'the condition', timeoutMs: 8000, intervalMs: 25 },
    )
    expect(r.received.every((c) => c.headers['webhook-id'] === id)).toBe(true)
    expect(r.received).toHaveLength(3)
    new Webhook(wh.secret).verify(r.received[2]!.body, r.received[2]!.headers)
    const delivery = list.body.data[0]
    expect(delivery).toMatchObject({ event_id: id, event_type: 'payment.received', status: 'delivered' })
    const attempts = delivery.attempts as Array<{
      status_code: number | null
      error: string | null
      latency_ms: number
      next_attempt_at: string | null
    }>
    const refused = attempts.filter((a) => a.error?.startsWith('connection_refused'))
    expect(refused.length).toBeGreaterThanOrEqual(1)
    expect(attempts.slice(refused.length).map((a) => a.status_code)).toEqual([500, null, 200])
    expect(attempts[refused.length + 1]!.error).toMatch(/^timeout/)
    expect(attempts.at(-1)!.error).toBeNull()
    expect(delivery.attempts_count).toBe(attempts.length)
    // Each failed attempt says when the next one is due; the successful one has none.
    for (const a of attempts.slice(0, -1)) expect(a.next_attempt_at).not.toBeNull()
    expect(attempts.at(-1)!.next_attempt_at).toBeNull()
    const after = await svc.api('/api/v1/events?delivery_success=false', { key })
    expect(after.body.data).toEqual([])
    const ok = await svc.api('/api/v1/events?delivery_success=true', { key })
    expect(ok.body.data.map((e: { id: string }) => e.id)).toEqual([id])
    expect(ok.body.data[0].pending_webhooks).toBe(0)
  })

  it("honours the receiver's Retry-After over a shorter schedule", async () => {
    const { key, accountId } = await merchant()
    const r = await receiver({
      answer: (c) => (c.n === 1 ? { status: 503, headers: { 'retry-after': '1' } } : { status: 200 }),
    })
    await createWebhook(key, `${r.url}/hook`)
    await emit(accountId)
    const second = await r.waitFor((c) => c.n === 2)
    expect(second.receivedAt - r.received[0]!.receivedAt).toBeGreaterThanOrEqual(950)
  })

  it('410 Gone disables the webhook at once; re-enabling resumes delivery', async () => {
    const { key, accountId } = await merchant()
    let gone = true
    const r = await receiver({ answer: () => (gone ? { status: 410 } : { status: 200 }) })
    const wh = await createWebhook(key, `${r.url}/hook`)
    const id = await emit(accountId)
    await r.waitFor(byEvent(id))
    const disabled = await waitFor(
      async () => {
        const w = await svc.api(`/api/v1/webhooks/${wh.id}`, { key })
        return w.body.status === 'disabled' && w
      },
      { what: 'the condition', timeoutMs: 8000, intervalMs: 25 },
    )
    expect(disabled.body).toMatchObject({ enabled: false, disabled_reason: 'gone' })
    // A fixed wait on purpose: what is checked is that no further delivery follows.
    await new Promise((res) => setTimeout(res, 400))
    expect(r.received).toHaveLength(1)
    gone = false
    const re = await svc.api(`/api/v1/webhooks/${wh.id}`, {
      key,
      method: 'PATCH',
      body: { status: 'enabled' },
    })
    expect(re.body).toMatchObject({ status: 'enabled', disabled_reason: null, failing_since: null })
    await r.waitFor((c) => c.n === 2)
  })

  it('disables a webhook that has been failing longer than disable_after_ms, with the reason visible', async () => {
    const { key, accountId } = await merchant()
    const r = await receiver({ answer: () => ({ status: 500 }) })
    const wh = await createWebhook(key, `${r.url}/hook`)
    // Five days and a minute of failures already behind it.
    await svc.sql`UPDATE webhooks SET failing_since = now() - interval '5 days 1 minute' WHERE id = ${wh.id}`
    await emit(accountId)
    const w = await waitFor(
      async () => {
        const res = await svc.api(`/api/v1/webhooks/${wh.id}`, { key })
        return res.body.status === 'disabled' && res
      },
      { what: 'the condition', timeoutMs: 8000, intervalMs: 25 },
    )
    expect(w.body.disabled_reason).toBe('failing')
    expect(w.body.failing_since).not.toBeNull()
  })

  it('one slow receiver does not hold back another, and gets at most `concurrency` requests at once', async () => {
    const { key, accountId } = await merchant()
    const slow = await receiver({ answer: () => 'hang' })
    const fast = await receiver()
    await createWebhook(key, `${slow.url}/slow`)
    await createWebhook(key, `${fast.url}/fast`)
    const ids = await Promise.all(Array.from({ length: 6 }, (_, i) => emit(accountId, { i })))
    const started = Date.now()
    await Promise.all(ids.map((id) => fast.waitFor(byEvent(id))))
    // All six reached the fast receiver while the slow one was still holding its first requests.
    expect(Date.now() - started).toBeLessThan(2500)
    // A fixed wait on purpose: the slow receiver is watched a while longer for extra concurrent requests.
    await new Promise((res) => setTimeout(res, 300))
    expect(slow.maxActive()).toBeLessThanOrEqual(2)
    expect(slow.maxActive()).toBeGreaterThanOrEqual(1)
  })
})

describe('secret rotation', () => {
  it('during the overlap each delivery carries two v1 signatures and verifies with either secret', async () => {
    const { key, accountId } = await merchant()
    const r = await receiver()
    const wh = await createWebhook(key, `${r.url}/hook`)
    const rotated = await svc.api(`/api/v1/webhooks/${wh.id}/rotate-secret`, { key, method: 'POST' })
    expect(rotated.status).toBe(200)
    const newSecret = rotated.body.secret as string
    expect(newSecret).toMatch(/^whsec_/)
    expect(newSecret).not.toBe(wh.secret)
    const expires = Date.parse(rotated.body.previous_secret_expires_at)
    expect(expires - Date.now()).toBeGreaterThan(23.9 * 3600_000)
    const id = await emit(accountId)
    const c = await r.waitFor(byEvent(id))
    expect(c.headers['webhook-signature']!.split(' ')).toHaveLength(2)
    expect(new Webhook(wh.secret).verify(c.body, c.headers)).toMatchObject({ id })
    expect(new Webhook(newSecret).verify(c.body, c.headers)).toMatchObject({ id })
    // After the overlap only the new secret signs.
    await svc.sql`UPDATE webhooks SET previous_secret_expires_at = now() - interval '1 second' WHERE id = ${wh.id}`
    const id2 = await emit(accountId)
    const c2 = await r.waitFor(byEvent(id2))
    expect(c2.headers['webhook-signature']!.split(' ')).toHaveLength(1)
    expect(() => new Webhook(wh.secret).verify(c2.body, c2.headers)).toThrow()
    new Webhook(newSecret).verify(c2.body, c2.headers)
  })
})

describe('events API', () => {
  it('lists events newest first with cursor pagination, shows one, and hides other accounts', async () => {
    const { key, accountId } = await merchant()
    const ids = [] as string[]
    for (let i = 0; i < 3; i++) {
      ids.push(await emit(accountId, { i }))
      // Distinct created_at: equal timestamps order by (random) id. The clock moving is what is awaited.
      await new Promise((r) => setTimeout(r, 5))
    }
    const first = await svc.api('/api/v1/events?limit=2', { key })
    expect(first.status).toBe(200)
    expect(first.body.has_more).toBe(true)
    expect(first.body.data.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]])
    const next = await svc.api(`/api/v1/events?limit=2&starting_after=${ids[1]}`, { key })
    expect(next.body).toMatchObject({
      has_more: false,
      data: [{ id: ids[0], object: 'event', data: { i: 0 } }],
    })
    const one = await svc.api(`/api/v1/events/${ids[0]}`, { key })
    expect(one.body).toMatchObject({
      id: ids[0],
      type: 'payment.received',
      data: { i: 0 },
      pending_webhooks: 0,
    })
    const other = await merchant()
    expect((await svc.api(`/api/v1/events/${ids[0]}`, { key: other.key })).status).toBe(404)
    expect((await svc.api('/api/v1/events?delivery_success=maybe', { key })).status).toBe(400)
    expect((await svc.api('/api/v1/events?type=nope', { key })).status).toBe(400)
    const typed = await svc.api('/api/v1/events?type=payout.sent', { key })
    expect(typed.body.data).toEqual([])
  })

  it('a redeliver asked while an attempt is in flight is sent, not overwritten by that attempt', async () => {
    const { key, accountId } = await merchant()
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    // The first attempt's answer waits until the redeliver is queued: its result is recorded after it.
    const r = await receiver({
      answer: (c) => (c.n === 1 ? held.then(() => ({ status: 200 })) : { status: 200 }),
    })
    const wh = await createWebhook(key, `${r.url}/hook`)
    const id = await emit(accountId)
    await r.waitFor(byEvent(id))
    const res = await svc.api(`/api/v1/events/${id}/redeliver`, { key, method: 'POST' })
    expect(res.status).toBe(202)
    release()
    const again = await r.waitFor((c) => c.n === 2)
    expect(again.headers['webhook-id']).toBe(id)
    const d = await deliveredAfter(key, wh.id, id, 2)
    expect(d.body.data).toHaveLength(1)
  })

  it('redeliver sends an event again with the same webhook-id', async () => {
    const { key, accountId } = await merchant()
    const r = await receiver()
    const wh = await createWebhook(key, `${r.url}/hook`)
    const id = await emit(accountId)
    await r.waitFor(byEvent(id))
    const res = await svc.api(`/api/v1/events/${id}/redeliver`, { key, method: 'POST' })
    expect(res.status).toBe(202)
    expect(res.body.data).toMatchObject([{ webhook_id: wh.id, event_id: id, status: 'pending' }])
    const again = await r.waitFor((c) => c.n === 2)
    expect(again.headers['webhook-id']).toBe(id)
    // Let that redelivery be recorded before asking for another (a redeliver during an attempt in flight may
    // send twice, which at-least-once allows, but would make the counts below racy).
    await deliveredAfter(key, wh.id, id, 2)
    const one = await svc.api(`/api/v1/events/${id}/redeliver`, { key, body: { webhook_id: wh.id } })
    expect(one.status).toBe(202)
    await r.waitFor((c) => c.n === 3)
    // The attempt is recorded just after the receiver answered.
    const d = await deliveredAfter(key, wh.id, id, 3)
    expect(d.body.data).toHaveLength(1)
    expect(d.body.data[0]).toMatchObject({ status: 'delivered', attempts_count: 1 })
    expect((await svc.api('/api/v1/events/evt_nope/redeliver', { key, method: 'POST' })).status).toBe(404)
  })
})
