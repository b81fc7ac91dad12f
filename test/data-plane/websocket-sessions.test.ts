// Paid WebSocket sessions with a real client (undici's WebSocket) against the demo-realtime upstream: the
// unpaid upgrade gets the 402, a paid session relays both ways and is charged exactly the usage events it
// delivered (the rest refunded, reconcile clean), credit runs out in band then 4402, a client that leaves
// mid-answer pays what it received, an oversize message closes with 1009, and a proof opens one session.
import { WebSocket } from 'undici'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { registry } from '../../src/observability/metrics.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import {
  CACHED_TOKENS,
  INPUT_TOKENS,
  type RealtimeUpstream,
  startRealtimeUpstream,
} from '../helpers/realtime-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { upgradeAnswer } from '../helpers/ws-client.ts'

const CREDIT = 50_000n
const TOKENS = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.05,
  input_price_per_million: 2,
  cached_input_price_per_million: 1,
  output_price_per_million: 10,
}

interface Opened {
  ws: WebSocket
  messages: string[]
  closed: Promise<{ code: number; reason: string }>
}

function open(url: string, headers: Record<string, string>, protocols: string[] = []): Promise<Opened> {
  const ws = new WebSocket(url.replace(/^http/, 'ws'), { headers, protocols })
  const messages: string[] = []
  ws.addEventListener('message', (e) => messages.push(String(e.data)))
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.addEventListener('close', (e) => resolve({ code: e.code, reason: e.reason })),
  )
  return new Promise((resolve, reject) => {
    ws.addEventListener('open', () => resolve({ ws, messages, closed }))
    ws.addEventListener('error', () => reject(new Error('the WebSocket did not open')))
  })
}

async function callRow(svc: TestService, hash: string) {
  await svc.flushCaptures()
  const rows = await svc.sql<
    {
      amount_atomic: bigint
      refund_atomic: bigint
      upstream_status: number
      usage: Record<string, unknown>
    }[]
  >`SELECT amount_atomic, refund_atomic, upstream_status, usage FROM calls
    WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
  return rows
}

describe('paid WebSocket sessions', () => {
  let svc: TestService
  let upstream: RealtimeUpstream
  let payer: Funded
  let key: string

  const endpoint = async (body: Record<string, unknown>) => {
    const r = await svc.api('/api/v1/endpoints', {
      key,
      body: {
        upstream_url: `${upstream.url}/v1/realtime`,
        upstream_headers: { authorization: 'Bearer sk-up' },
        ...body,
      },
    })
    if (r.status !== 201) throw new Error(`endpoint: ${r.status} ${r.text}`)
    return r.body as { id: string; metered_url: string; websocket: unknown }
  }

  beforeAll(async () => {
    svc = await startTestService()
    upstream = await startRealtimeUpstream()
    payer = await fundedAccount(100_000_000n)
    key = (await registerMerchant(svc)).key
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
  })

  it('refuses an unpaid upgrade with the 402 of an HTTP call, and an endpoint without sessions', async () => {
    const ep = await endpoint({ pricing: TOKENS, websocket: {} })
    expect(ep.websocket).toEqual({
      max_message_bytes: 1_048_576,
      price_per_message: 0,
      price_per_message_atomic: '0',
      top_up_wait_ms: 10_000,
    })
    const unpaid = await upgradeAnswer(ep.metered_url)
    expect(unpaid.status).toBe(402)
    expect(JSON.parse(unpaid.body)).toMatchObject({ error: 'payment_required', price_atomic: '50000' })
    expect(unpaid.headers['payment-required']).toBeTruthy()
    // A plain GET on the same URL is still the HTTP hot path.
    expect((await fetch(ep.metered_url)).status).toBe(402)
    const plain = await endpoint({ pricing: TOKENS })
    const refused = await upgradeAnswer(plain.metered_url)
    expect([refused.status, JSON.parse(refused.body).error.code]).toEqual([400, 'websocket_not_allowed'])
    const fixed = await svc.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: `${upstream.url}/v1/realtime`, price: 0.01, websocket: {} },
    })
    expect([fixed.status, fixed.body.error.param]).toEqual([400, 'websocket'])
    // A session endpoint keeps usage pricing; turning sessions off refuses the next upgrade.
    const toFixed = await svc.api(`/api/v1/endpoints/${ep.id}`, {
      key,
      method: 'PATCH',
      body: { price: 0.01 },
    })
    expect([toFixed.status, toFixed.body.error.param]).toEqual([400, 'pricing'])
    const off = await svc.api(`/api/v1/endpoints/${ep.id}`, {
      key,
      method: 'PATCH',
      body: { websocket: null },
    })
    expect([off.status, off.body.websocket]).toEqual([200, null])
    const after = await upgradeAnswer(ep.metered_url)
    expect([after.status, JSON.parse(after.body).error.code]).toEqual([400, 'websocket_not_allowed'])
  })

  it('relays both ways and charges exactly the usage events delivered; the rest is refunded', async () => {
    const ep = await endpoint({ pricing: TOKENS, websocket: {} })
    const hash = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await open(ep.metered_url, { 'x-payment': hash }, ['realtime'])
    expect(s.ws.protocol).toBe('realtime')
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 100 } }))
    await waitFor(() => s.messages.filter((m) => m.includes('"response.done"')).length === 1, {
      what: 'the first response.done',
    })
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 100 } }))
    s.ws.send('hello')
    await waitFor(() => s.messages.includes('hello'), { what: 'the echo' })
    expect(s.messages.filter((m) => m.includes('"response.done"'))).toHaveLength(2)
    expect(s.messages[0]).toContain('session.created')
    const seen = upstream.upgrades.at(-1)!
    expect(seen.authorization).toBe('Bearer sk-up')
    expect(seen['x-payment']).toBeUndefined()
    s.ws.close(1000, 'bye')
    await s.closed
    await waitFor(() => upstream.closes.some((c) => c.reason === 'bye'), { what: 'the close upstream' })
    // 2 × (8 input, 2 cached, 100 output) at $2 / $1 / $10 per million, rounded up once.
    const input = 2 * (INPUT_TOKENS - CACHED_TOKENS)
    const charge = BigInt(
      Math.ceil((input * 2_000_000 + 2 * CACHED_TOKENS * 1_000_000 + 200 * 10_000_000) / 1e6),
    )
    const rows = await callRow(svc, hash)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      amount_atomic: charge,
      refund_atomic: CREDIT - charge,
      upstream_status: 101,
    })
    expect(rows[0]!.usage).toMatchObject({
      quantities: { input_tokens: input, cached_input_tokens: 4, output_tokens: 200 },
      source: 'measured',
    })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.claims.differences).toEqual([])
    expect(report.claims.unused_refund_mismatch).toBe(0)
    const metrics = await registry.metrics()
    expect(metrics).toMatch(/tollgate_websocket_frames_total\{direction="to_client"\} [1-9]/)
    expect(metrics).toMatch(/tollgate_websocket_sessions_open 0/)
    // The proof opened one session: a second upgrade with it is refused.
    const replay = await upgradeAnswer(ep.metered_url, { 'x-payment': hash })
    expect([replay.status, JSON.parse(replay.body).error]).toEqual([402, 'proof_already_used'])
  })

  it('asks for credit in band when it runs low, then closes with 4402 when it runs out', async () => {
    // $1,000 per million output tokens: 1,000 base units a token, 50 tokens of credit.
    // top_up_wait_ms 0: closed as soon as the credit is spent (websocket-top-ups.test.ts waits for one).
    const ep = await endpoint({
      pricing: { ...TOKENS, output_price_per_million: 1000 },
      websocket: { top_up_wait_ms: 0 },
    })
    const hash = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await open(ep.metered_url, { 'x-payment': hash })
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 100 } }))
    const closed = await s.closed
    expect(closed).toEqual({ code: 4402, reason: 'payment required: credit exhausted' })
    const asks = s.messages.filter((m) => m.includes('"code":402'))
    expect(asks.map((m) => JSON.parse(m).error.message)).toEqual(['credit_low', 'credit_exhausted'])
    const ask = JSON.parse(asks[0]!)
    expect(ask.error.message).toBe('credit_low')
    expect(ask.error.paymentRequired.x402Version).toBe(2)
    expect(ask.metadata.tollgate.credit_atomic).toBe('50000')
    // Never past the credit: 50 deltas delivered, at one token each.
    expect(s.messages.filter((m) => m.includes('response.text.delta'))).toHaveLength(50)
    const rows = await callRow(svc, hash)
    expect(rows[0]).toMatchObject({ amount_atomic: CREDIT, refund_atomic: 0n })
  })

  it('charges a client that leaves mid-answer for what it received', async () => {
    const ep = await endpoint({ pricing: TOKENS, websocket: {} })
    const hash = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await open(ep.metered_url, { 'x-payment': hash })
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 30, hold: true } }))
    await waitFor(() => s.messages.filter((m) => m.includes('response.text.delta')).length === 30, {
      what: '30 deltas',
    })
    s.ws.close(1000)
    await s.closed
    // 30 deltas delivered, no usage yet: one output token each at $10 per million.
    const rows = await callRow(svc, hash)
    expect(rows[0]).toMatchObject({ amount_atomic: 300n, refund_atomic: CREDIT - 300n })
    expect(rows[0]!.usage).toMatchObject({
      quantities: { output_tokens: 30, estimated: 1 },
      fallback: 'client_aborted',
    })
  })

  it('closes with 1009 on a message over max_message_bytes', async () => {
    const ep = await endpoint({ pricing: TOKENS, websocket: { max_message_bytes: 1024 } })
    const hash = await payUsdc(payer, svc.chain.treasury, CREDIT)
    const s = await open(ep.metered_url, { 'x-payment': hash })
    s.ws.send('x'.repeat(2000))
    expect((await s.closed).code).toBe(1009)
    const rows = await callRow(svc, hash)
    expect(rows[0]).toMatchObject({ amount_atomic: 0n, refund_atomic: CREDIT })
  })
})

describe.runIf(usingServer)('a WebSocket session proof over two instances', () => {
  let a: TestService
  let b: TestService
  let upstream: RealtimeUpstream

  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl })
    b = await startTestService({ databaseUrl, treasury: a.treasury })
    upstream = await startRealtimeUpstream()
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
    await upstream?.close()
  })

  it('refuses the opening proof on another instance', async () => {
    const key = (await registerMerchant(a)).key
    const ep = await a.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: `${upstream.url}/v1/realtime`, pricing: TOKENS, websocket: {} },
    })
    const payer = await fundedAccount(100_000_000n)
    const hash = await payUsdc(payer, a.chain.treasury, CREDIT)
    const s = await open(`${a.url}/m/${ep.body.id}`, { 'x-payment': hash })
    // While a's session holds the claim, b says it is in use (as for an HTTP call in flight): retry, do not pay.
    const during = await upgradeAnswer(`${b.url}/m/${ep.body.id}`, { 'x-payment': hash })
    expect([during.status, JSON.parse(during.body).error.code]).toEqual([409, 'payment_in_progress'])
    s.ws.close(1000)
    await s.closed
    // Once the session is captured the proof is spent on every instance.
    const after = await waitFor(
      async () => {
        const r = await upgradeAnswer(`${b.url}/m/${ep.body.id}`, { 'x-payment': hash })
        return r.status === 409 ? null : r
      },
      { what: 'the session captured, seen from b' },
    )
    expect([after.status, JSON.parse(after.body).error]).toEqual([402, 'proof_already_used'])
  })
})
