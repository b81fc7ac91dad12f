// Usage-priced calls measured on the stream by tollgate, against a real OpenAI-style upstream on loopback:
// tokens from SSE and JSON answers (OpenAI and Anthropic shapes), the usage asked for and taken out again,
// the missing / malformed / above-ceiling rules, upstream 5xx, a client leaving mid-stream, and a
// transaction hash paid at the ceiling whose unused part goes back to its payer in the payout batch.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { registry } from '../../src/observability/metrics.ts'
import { type Funded, fundedAccount, payUsdc, usdcBalance } from '../helpers/accounts.ts'
import { type OpenAiUpstream, startOpenAiUpstream } from '../helpers/openai-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'

let svc: TestService
let upstream: OpenAiUpstream
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

// $2 / M input, $1 / M cached input, $10 / M output; ceiling $0.05.
const TOKENS = {
  model: 'usage',
  unit: 'tokens',
  max_price: 0.05,
  input_price_per_million: 2,
  cached_input_price_per_million: 1,
  output_price_per_million: 10,
}
const CEILING = 50_000n
// 1,000 uncached input × 2 + 200 cached × 1 + 50 output × 10 (base units per million tokens = per token here).
const EXPECTED = 2_700n

async function endpoint(pricing: Record<string, unknown>, path = '/v1/chat/completions') {
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: `${upstream.url}${path}`, pricing },
  })
  if (r.status !== 201) throw new Error(`create endpoint: ${r.status} ${r.text}`)
  return r.body as { id: string; metered_url: string; pricing: Record<string, unknown> }
}

async function paidCall(url: string, body: Record<string, unknown>, value = CEILING) {
  const hash = await payUsdc(payer, svc.chain.treasury, value)
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'x-payment': hash, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  const text = await r.text()
  await svc.flushCaptures()
  return { r, text, hash }
}

async function callOf(hash: string) {
  const [row] = await svc.sql<
    {
      amount_atomic: bigint
      owner_share_atomic: bigint
      refund_atomic: bigint
      ceiling_atomic: bigint | null
      pricing_model: string
      usage_unit: string | null
      usage: { quantities: Record<string, number>; source: string; fallback: string | null; capped: boolean }
      receipt_id: string
      scheme: string
    }[]
  >`SELECT amount_atomic, owner_share_atomic, refund_atomic, ceiling_atomic, pricing_model, usage_unit, usage,
           call_receipt_id(id, receipt_id) AS receipt_id, scheme
    FROM calls WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
  return row
}

beforeAll(async () => {
  svc = await startTestService()
  upstream = await startOpenAiUpstream({ events: 50 })
  payer = await fundedAccount(100_000_000n)
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('a token-priced endpoint', () => {
  it('offers its ceiling in the 402 and says exact is not offered where the amount varies', async () => {
    const ep = await endpoint(TOKENS)
    const r = await fetch(ep.metered_url, { method: 'POST' })
    expect(r.status).toBe(402)
    const body = await r.json()
    expect(body).toMatchObject({
      price: 0.05,
      price_atomic: '50000',
      pricing: { model: 'usage', unit: 'tokens' },
    })
    expect(body.schemes_not_offered).toContainEqual({ scheme: 'exact', reason: 'amount_varies' })
    expect(body.accepts).toEqual([])
    const required = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    expect(required.accepts.map((a: { scheme: string }) => a.scheme)).not.toContain('exact')
  })

  it('streams 50 events, asks the upstream for usage and takes it out again, charges the tokens measured', async () => {
    const ep = await endpoint(TOKENS)
    const before = await usdcBalance(payer.address)
    const { r, text, hash } = await paidCall(ep.metered_url, { model: 'gpt', stream: true, messages: [] })
    expect(r.status).toBe(200)
    const receiptId = r.headers.get('x-receipt-id')
    expect(receiptId).toMatch(/^rcpt_/)
    // The upstream was asked for its usage; the client sees exactly what it asked for.
    expect(upstream.bodies.at(-1)).toMatchObject({ stream: true, stream_options: { include_usage: true } })
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '))
    expect(events).toHaveLength(51)
    expect(events.at(-1)).toBe('data: [DONE]')
    expect(text).not.toContain('usage')
    const call = await callOf(hash)
    expect(call).toMatchObject({
      amount_atomic: EXPECTED,
      owner_share_atomic: (EXPECTED * 9500n) / 10000n,
      refund_atomic: CEILING - EXPECTED,
      ceiling_atomic: CEILING,
      pricing_model: 'usage',
      usage_unit: 'tokens',
      receipt_id: receiptId,
      scheme: 'tx-hash',
    })
    expect(call!.usage).toMatchObject({
      quantities: { input_tokens: 1000, cached_input_tokens: 200, output_tokens: 50 },
      source: 'measured',
      capped: false,
    })
    // The receipt: public, final once the stream ended.
    const receipt = await fetch(`${svc.url}/receipts/${receiptId}`)
    expect(receipt.status).toBe(200)
    expect(await receipt.json()).toMatchObject({
      id: receiptId,
      status: 'final',
      endpoint_id: ep.id,
      payer: payer.address,
      scheme: 'tx-hash',
      amount_atomic: '2700',
      upstream_status: 200,
      usage: {
        unit: 'tokens',
        quantities: { input_tokens: 1000, cached_input_tokens: 200, output_tokens: 50 },
        charge_atomic: '2700',
        ceiling_atomic: '50000',
        refunded_atomic: '47300',
      },
    })
    // The unused part of the prepaid ceiling goes back to the payer in the next payout batch.
    await svc.jobs.runNow('payout-batch')
    expect(await usdcBalance(payer.address)).toBe(before - EXPECTED)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.claims.differences).toEqual([])
    expect(report.claims.unused_refund_mismatch).toBe(0)
  })

  it('passes the usage event through when the client asked for it', async () => {
    const ep = await endpoint(TOKENS)
    const { text, hash } = await paidCall(ep.metered_url, {
      model: 'gpt',
      stream: true,
      stream_options: { include_usage: true },
    })
    expect(text).toContain('"usage":{"prompt_tokens":1200')
    expect((await callOf(hash))!.amount_atomic).toBe(EXPECTED)
  })

  it('reads the usage of a plain JSON answer, and of an Anthropic-shaped stream', async () => {
    const json = await endpoint(TOKENS)
    const a = await paidCall(json.metered_url, { model: 'gpt' })
    expect(a.r.status).toBe(200)
    expect((await callOf(a.hash))!.amount_atomic).toBe(EXPECTED)
    const anthropic = await endpoint(TOKENS, '/v1/messages')
    const b = await paidCall(anthropic.metered_url, { model: 'claude', stream: true })
    expect(upstream.bodies.at(-1)).not.toHaveProperty('stream_options')
    expect((await callOf(b.hash))!.usage.quantities).toEqual({
      input_tokens: 1000,
      cached_input_tokens: 200,
      output_tokens: 50,
    })
    expect((await callOf(b.hash))!.amount_atomic).toBe(EXPECTED)
  })

  it('charges the ceiling when the usage is missing (the default rule)', async () => {
    const ep = await endpoint(TOKENS)
    const { hash } = await paidCall(ep.metered_url, { model: 'no-usage', stream: true })
    expect(await callOf(hash)).toMatchObject({
      amount_atomic: CEILING,
      refund_atomic: 0n,
      usage: { source: 'fallback', fallback: 'missing' },
    })
  })

  it('applies the missing-usage rule to a malformed usage object, never failing the call', async () => {
    const ep = await endpoint({ ...TOKENS, on_missing_usage: 'response_bytes', price_per_mb: 1 })
    const { r, text, hash } = await paidCall(ep.metered_url, { model: 'malformed-usage', stream: true })
    expect(r.status).toBe(200)
    const call = await callOf(hash)
    expect(call!.usage).toMatchObject({ source: 'fallback', fallback: 'malformed' })
    // $1 per MB of what was delivered, rounded up to the base unit.
    expect(call!.amount_atomic).toBe(BigInt(Math.ceil(Buffer.byteLength(text))))
  })

  it('charges the ceiling for usage above it, and counts it', async () => {
    const ep = await endpoint(TOKENS)
    const capped = async () => (await registry.getSingleMetricAsString('tollgate_usage_capped_total')).trim()
    const before = await capped()
    const { hash } = await paidCall(ep.metered_url, { model: 'huge-usage', stream: true })
    expect(await callOf(hash)).toMatchObject({
      amount_atomic: CEILING,
      usage: { capped: true, source: 'measured' },
    })
    expect(await capped()).not.toBe(before)
  })

  it('charges nothing when the upstream answers 5xx: the same payment may be retried', async () => {
    const ep = await endpoint(TOKENS)
    const { r, hash } = await paidCall(ep.metered_url, { model: 'fail', stream: true })
    expect(r.status).toBe(503)
    expect(await callOf(hash)).toBeUndefined()
    const retry = await fetch(ep.metered_url, {
      method: 'POST',
      headers: { 'x-payment': hash, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt', stream: true }),
    })
    expect(retry.status).toBe(200)
    await retry.text()
    await svc.flushCaptures()
    expect((await callOf(hash))!.amount_atomic).toBe(EXPECTED)
  })

  it('charges a client that leaves mid-stream for what was delivered', async () => {
    const ep = await endpoint(TOKENS)
    const hash = await payUsdc(payer, svc.chain.treasury, CEILING)
    const controller = new AbortController()
    const r = await fetch(ep.metered_url, {
      method: 'POST',
      headers: { 'x-payment': hash, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow', stream: true }),
      signal: controller.signal,
    })
    const reader = r.body!.getReader()
    let seen = ''
    while ((seen.match(/\n\n/g) ?? []).length < 10)
      seen += new TextDecoder().decode((await reader.read()).value)
    controller.abort()
    const call = await waitFor(
      async () => {
        await svc.flushCaptures()
        return callOf(hash)
      },
      { timeoutMs: 5_000, intervalMs: 50, what: 'the aborted call captured' },
    )
    expect(call.usage).toMatchObject({ source: 'fallback', fallback: 'client_aborted' })
    const delivered = call.usage.quantities.output_tokens!
    expect(delivered).toBeGreaterThanOrEqual(10)
    expect(delivered).toBeLessThan(50)
    expect(call.amount_atomic).toBe(BigInt(delivered) * 10n)
    expect(call.refund_atomic).toBe(CEILING - call.amount_atomic)
  })
})

describe('bytes and duration', () => {
  it('prices response_bytes per MB and duration_ms per second', async () => {
    const bytes = await endpoint({ model: 'usage', unit: 'response_bytes', max_price: 0.05, price_per_mb: 2 })
    const a = await paidCall(bytes.metered_url, { model: 'gpt' })
    expect((await callOf(a.hash))!.amount_atomic).toBe(BigInt(Buffer.byteLength(a.text) * 2))
    const time = await endpoint({
      model: 'usage',
      unit: 'duration_ms',
      max_price: 0.05,
      price_per_second: 0.01,
    })
    const b = await paidCall(time.metered_url, { model: 'slow', stream: true })
    const call = await callOf(b.hash)
    // 50 events 20 ms apart: about a second of upstream time at $0.01 per second.
    expect(call!.usage.quantities.duration_ms).toBeGreaterThanOrEqual(900)
    expect(call!.amount_atomic).toBe(BigInt(Math.ceil(call!.usage.quantities.duration_ms! * 10)))
  })
})

describe('pricing in the management API', () => {
  it('keeps price alone as fixed, and picks the first matching rule, else the default', async () => {
    const fixed = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/v1`, price: 0.01 },
    })
    expect(fixed.body.pricing).toEqual({ model: 'fixed', price: 0.01 })
    const rules = await endpoint(
      {
        model: 'rules',
        rules: [
          { method: 'POST', path_prefix: '/chat', price: 0.03 },
          { path_prefix: '/chat', price: 0.02 },
        ],
        default_price: 0.01,
      },
      '/v1',
    )
    const price = async (method: string, path: string) =>
      (await (await fetch(`${rules.metered_url}${path}`, { method })).json()).price_atomic
    expect(await price('POST', '/chat/completions')).toBe('30000')
    expect(await price('GET', '/chat/x')).toBe('20000')
    expect(await price('GET', '/models')).toBe('10000')
  })

  it('refuses incomplete or invalid pricing with the field named, and changes nothing', async () => {
    const bad = async (pricing: unknown, param: string) => {
      const r = await svc.api('/api/v1/endpoints', {
        key: merchant.key,
        body: { upstream_url: `${upstream.url}/v1`, pricing },
      })
      expect([r.status, r.body.error.param]).toEqual([400, param])
      return r.body.error.message as string
    }
    expect(
      await bad({ model: 'usage', unit: 'response_bytes', max_price: 1 }, 'pricing.price_per_mb'),
    ).toContain('required for unit response_bytes')
    await bad(
      { model: 'usage', unit: 'tokens', max_price: 1, input_price_per_million: 1 },
      'pricing.output_price_per_million',
    )
    await bad({ model: 'usage', unit: 'litres', max_price: 1 }, 'pricing.unit')
    await bad({ model: 'rules', rules: [], default_price: 1 }, 'pricing.rules')
    await bad(
      { model: 'rules', rules: [{ path_prefix: 'chat', price: 1 }], default_price: 1 },
      'pricing.rules.0.path_prefix',
    )
    await bad(
      {
        model: 'usage',
        unit: 'tokens',
        max_price: 10_000,
        input_price_per_million: 1,
        output_price_per_million: 1,
      },
      'pricing.max_price',
    )
    await bad({ model: 'auction' }, 'pricing.model')
  })
})
