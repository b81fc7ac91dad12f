// Credit running low on a paid WebSocket session, with the `ws` client against the demo-realtime upstream:
// the in-band request (x402 WebSocket transport shape), a top-up sent on the socket that lets the session go
// on (charged across its two payments to the base unit, the rest refunded), and a session that does not top
// up: paused when its credit is spent, then closed with 4402 once top_up_wait_ms is over, charged its credit.
import { createHash } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { registry } from '../../src/observability/metrics.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import {
  CACHED_TOKENS,
  INPUT_TOKENS,
  type RealtimeUpstream,
  startRealtimeUpstream,
} from '../helpers/realtime-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { openWs } from '../helpers/ws-client.ts'

const CREDIT = 50_000n
// $1,000 per million output tokens: 1,000 base units a token, 50 tokens of credit per payment.
const PRICING = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.05,
  input_price_per_million: 2,
  cached_input_price_per_million: 1,
  output_price_per_million: 1000,
}

describe('WebSocket session top-ups', () => {
  let svc: TestService
  let upstream: RealtimeUpstream
  let receiver: WebhookReceiver
  let payer: Funded
  let id: string
  let key: string

  const rows = async (hash: string) => {
    await svc.flushCaptures()
    return svc.sql<{ amount_atomic: bigint; refund_atomic: bigint; usage: Record<string, any> }[]>`
      SELECT amount_atomic, refund_atomic, usage FROM calls
      WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
  }

  beforeAll(async () => {
    svc = await startTestService()
    upstream = await startRealtimeUpstream()
    payer = await fundedAccount(100_000_000n)
    ;({ key } = await registerMerchant(svc))
    receiver = await startWebhookReceiver()
    const hook = await svc.api('/api/v1/webhooks', {
      key,
      body: { url: receiver.url, events: ['session.closed'] },
    })
    expect(hook.status).toBe(201)
    const r = await svc.api('/api/v1/endpoints', {
      key,
      body: {
        upstream_url: `${upstream.url}/v1/realtime`,
        pricing: PRICING,
        websocket: { top_up_wait_ms: 1500 },
      },
    })
    expect(r.body.websocket.top_up_wait_ms).toBe(1500)
    id = r.body.id
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
    await receiver?.close()
  })

  it('tops up on the socket when asked and goes on; charged across both payments to the base unit', async () => {
    const first = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const second = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await openWs(`${svc.url}/m/${id}`, { 'x-payment': first })
    let sent = false
    s.ws.on('message', (data) => {
      const m = data.toString()
      if (sent || !m.includes('"credit_low"')) return
      sent = true
      s.ws.send(JSON.stringify({ id: 7, method: 'tollgate.top_up', payment: second }))
    })
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 80 } }))
    await waitFor(() => s.count('response.done') === 1, { what: 'the whole answer after the top-up' })
    expect(s.count('response.text.delta')).toBe(80)
    // The upstream sends the whole answer at once: the credit is usually spent (the session paused,
    // credit_exhausted) before the top-up lands; either way it is answered by id and the rest delivered.
    const [low] = s.payment()
    const answer = s.payment().find((m) => m.id === 7)
    expect(low!.error).toMatchObject({ code: 402, message: 'credit_low' })
    expect(low!.error!.paymentRequired.x402Version).toBe(2)
    expect(answer).toMatchObject({ id: 7, result: { added_atomic: '50000', credit_atomic: '100000' } })
    // The top-up is tollgate's: never relayed upstream.
    expect(upstream.received.some((m) => m.includes('tollgate.top_up'))).toBe(false)
    s.ws.close(1000)
    await s.closed
    // 80 output tokens at 1,000, 8 input at 2, 2 cached at 1, per token: rounded once over the session.
    const charge =
      BigInt(80 * 1000) + BigInt(Math.ceil(((INPUT_TOKENS - CACHED_TOKENS) * 2 + CACHED_TOKENS) / 1))
    const [a] = await rows(first)
    const [b] = await rows(second)
    expect(a).toMatchObject({ amount_atomic: CREDIT, refund_atomic: 0n })
    expect(a!.usage.quantities).toMatchObject({
      output_tokens: 80,
      input_tokens: INPUT_TOKENS - CACHED_TOKENS,
    })
    expect(b).toMatchObject({ amount_atomic: charge - CREDIT, refund_atomic: 2n * CREDIT - charge })
    expect(b!.usage.quantities).toEqual({ top_up: 1 })
    // The signed final receipt: the usage, and the SHA-256 over the upstream's messages as delivered (the
    // in-band messages are tollgate's own, not in it).
    const relayed = s.messages.filter((m) => m.startsWith('{"type"'))
    const sha = createHash('sha256').update(relayed.join('')).digest('hex')
    const receipt = await (await fetch(`${svc.url}/receipts/${s.headers['x-receipt-id']}`)).json()
    expect(receipt).toMatchObject({
      amount_atomic: '50000',
      delivered: { body_sha256: sha, body_bytes: Buffer.byteLength(relayed.join('')) },
    })
    expect(receipt.signed.payload).toMatchObject({ bodySha256: sha, upstreamStatus: 101 })
    expect(JSON.parse(receipt.signed.payload.usage).quantities).toMatchObject({ output_tokens: 80 })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.claims.differences).toEqual([])
    expect(report.claims.unused_refund_mismatch).toBe(0)
    expect(await registry.metrics()).toMatch(/tollgate_websocket_top_ups_total\{outcome="taken"\} [1-9]/)
    // GET /calls: the opening row is the session's one row (its duration, who ended it, its whole charge);
    // the top-up's row names it.
    const calls = (await svc.api(`/api/v1/calls?endpoint_id=${id}&limit=100`, { key })).body.data as any[]
    const opening = calls.find((c) => c.id === `call_${String(s.headers['x-receipt-id']).slice(5)}`)
    expect(opening.session).toMatchObject({
      call_id: opening.id,
      ended_by: 'client',
      charge_atomic: charge.toString(),
      payments: 2,
    })
    expect(opening.session.duration_ms).toBeGreaterThan(0)
    const topUp = calls.find((c) => c.id === opening.session.top_up_call_ids[0])
    expect(topUp.session).toMatchObject({ call_id: opening.id, charge_atomic: null })
    // A session.closed webhook event, written with the row: its whole charge and usage.
    const events = (await svc.api('/api/v1/events?type=session.closed&limit=100', { key })).body.data as any[]
    const closedEvent = events.find((e) => e.data.call_id === opening.id)
    expect(closedEvent.data).toMatchObject({
      object: 'session',
      receipt_id: s.headers['x-receipt-id'],
      endpoint_id: id,
      ended_by: 'client',
      charge_atomic: charge.toString(),
      payments: 2,
      usage: { unit: 'tokens', quantities: { output_tokens: 80 } },
    })
    expect(events.filter((e) => e.data.call_id === topUp.id)).toEqual([])
    // Delivered by the webhook dispatcher, signed, as every event is.
    const delivered = await receiver.waitFor((c) => JSON.parse(c.body).id === closedEvent.id, 20_000)
    expect(JSON.parse(delivered.body)).toMatchObject({
      type: 'session.closed',
      data: { call_id: opening.id, charge_atomic: charge.toString() },
    })
    expect(delivered.headers['webhook-signature']).toMatch(/^v1,/)
  })

  it('asks, pauses when the credit is spent, refuses its own proof again, then closes with 4402 after the wait', async () => {
    const hash = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await openWs(`${svc.url}/m/${id}`, { 'x-payment': hash })
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 100 } }))
    await waitFor(() => s.payment().some((m) => m.error?.message === 'credit_exhausted'), {
      what: 'the credit spent',
    })
    const spentAtMs = Date.now()
    // Its own opening proof again: refused in band (its claim is this session's), the session waits on.
    s.ws.send(JSON.stringify({ id: 'again', method: 'tollgate.top_up', payment: hash }))
    await waitFor(() => s.payment().some((m) => m.id === 'again'), { what: 'the refusal' })
    const closed = await s.closed
    expect(closed).toEqual({ code: 4402, reason: 'payment required: no top-up in time' })
    // It waited top_up_wait_ms (1,500; a little less seen from here: the ask left before it was read).
    expect(Date.now() - spentAtMs).toBeGreaterThan(1200)
    const asks = s.payment().map((m) => [m.id ?? null, m.error?.message])
    expect(asks).toEqual([
      [null, 'credit_low'],
      [null, 'credit_exhausted'],
      ['again', 'payment_in_progress'],
    ])
    // Never past the credit: the crossing delta was the last one delivered; the rest was held, not sent.
    expect(s.count('response.text.delta')).toBe(50)
    expect(s.count('response.done')).toBe(0)
    const [row] = await rows(hash)
    expect(row).toMatchObject({ amount_atomic: CREDIT, refund_atomic: 0n })
  })

  it('closes with 1009 on an upstream message over max_message_bytes, charged what was delivered before', async () => {
    const { key } = await registerMerchant(svc)
    const r = await svc.api('/api/v1/endpoints', {
      key,
      body: {
        upstream_url: `${upstream.url}/v1/realtime`,
        pricing: { ...PRICING, output_price_per_million: 10 },
        websocket: { max_message_bytes: 4096 },
      },
    })
    const hash = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await openWs(`${svc.url}/m/${r.body.id}`, { 'x-payment': hash })
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 20 } }))
    await waitFor(() => s.count('response.done') === 1, { what: 'the answer' })
    s.ws.send(JSON.stringify({ type: 'test.big', bytes: 5000 }))
    expect(await s.closed).toEqual({ code: 1009, reason: 'message too big' })
    expect(s.messages.some((m) => m.startsWith('xxx'))).toBe(false)
    // The answer's usage, never the message that was not delivered: 20 output at 10, 8 input at 2, 2 at 1.
    const charge = BigInt(Math.ceil((20 * 10_000_000 + 8 * 2_000_000 + 2 * 1_000_000) / 1e6))
    const [row] = await rows(hash)
    expect(row).toMatchObject({ amount_atomic: charge, refund_atomic: CREDIT - charge })
  })
})
