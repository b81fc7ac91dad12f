import { createHash } from 'node:crypto'
import { createServer, request as httpRequest, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

checkPaymentProtocol()

type Upstream = Awaited<ReturnType<typeof startUpstream>>

let svc: TestService
let upstream: Upstream
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

async function createEndpoint(body: Record<string, unknown>, service = svc, key = merchant.key) {
  const r = await service.api('/api/v1/endpoints', { key, body })
  if (r.status !== 201) throw new Error(`create endpoint: ${r.status} ${r.text}`)
  return r.body as { id: string; metered_url: string; price_atomic: string }
}

async function claimsFor(proof: string) {
  return svc.sql`SELECT status, target_id, amount_atomic FROM claims WHERE proof_key = ${`tx:${proof.toLowerCase()}`}`
}

beforeAll(async () => {
  svc = await startTestService({ overrides: { verify: { wait_ms: 1500 } } })
  upstream = await startUpstream()
  payer = await fundedAccount(100_000_000n)
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('402 without proof', () => {
  it('answers the payment requirement with every field and forwards nothing', async () => {
    const ep = await createEndpoint({
      upstream_url: `${upstream.url}/echo`,
      price: 0.01,
      description: 'Echo API',
    })
    const before = upstream.count()
    const r = await fetch(ep.metered_url, {
      method: 'POST',
      body: '{"q":1}',
      headers: { 'content-type': 'application/json' },
    })
    expect(r.status).toBe(402)
    const body = await r.json()
    expect(body).toMatchObject({
      error: 'payment_required',
      price: 0.01,
      price_atomic: '10000',
      recipient: svc.chain.treasury,
      currency: 'USDC',
      asset: svc.chain.usdc.address,
      network: 'local',
      chain_id: svc.chain.chainId,
      endpoint_id: ep.id,
      x402Version: 1,
    })
    expect(Date.parse(body.expires_at)).toBeGreaterThan(Date.now())
    expect(body.accepts[0]).toMatchObject({
      scheme: 'exact',
      maxAmountRequired: '10000',
      payTo: svc.chain.treasury,
      asset: svc.chain.usdc.address,
      resource: ep.metered_url,
      extra: { name: svc.chain.usdc.name, version: svc.chain.usdc.version },
    })
    const v2 = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    expect(v2).toMatchObject({
      x402Version: 2,
      accepts: [{ network: `eip155:${svc.chain.chainId}`, amount: '10000' }],
    })
    expect(upstream.count()).toBe(before)
  })

  it('answers 404 JSON for an unknown or disabled endpoint', async () => {
    const r = await fetch(`${svc.url}/m/ep_doesnotexist`)
    expect(r.status).toBe(404)
    expect((await r.json()).error.code).toBe('endpoint_not_found')
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 })
    await svc.api(`/api/v1/endpoints/${ep.id}`, {
      key: merchant.key,
      method: 'PATCH',
      body: { active: false },
    })
    expect((await fetch(ep.metered_url)).status).toBe(404)
  })
})

describe('paid calls', () => {
  it('forwards a paid call: the upstream’s exact status, headers and body, with a receipt', async () => {
    const ep = await createEndpoint({
      upstream_url: `${upstream.url}/echo`,
      price: 0.01,
      upstream_headers: { 'x-upstream-key': 'owner-secret' },
    })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(`${ep.metered_url}/sub/path?a=1&b=two`, {
      method: 'POST',
      body: '{"question":"weather"}',
      headers: {
        'content-type': 'application/json',
        'x-payment': hash,
        connection: 'keep-alive',
        'x-custom': 'yes',
      },
    })
    expect(r.status).toBe(200)
    const echoed = await r.json()
    expect(echoed.method).toBe('POST')
    expect(echoed.url).toBe('/echo/sub/path?a=1&b=two')
    expect(echoed.body).toBe('{"question":"weather"}')
    expect(echoed.headers['x-custom']).toBe('yes')
    expect(echoed.headers['x-upstream-key']).toBe('owner-secret')
    expect(echoed.headers['x-payment']).toBeUndefined()
    expect(echoed.headers['x-forwarded-for']).toBeDefined()
    const receipt = JSON.parse(Buffer.from(r.headers.get('x-payment-response')!, 'base64').toString())
    expect(receipt).toMatchObject({ success: true, transaction: hash, payer: payer.address })
    await svc.flushCaptures()
    const claims = await claimsFor(hash)
    expect(claims).toEqual([{ status: 'captured', target_id: ep.id, amount_atomic: 10_000n }])
    const calls = await svc.api(`/api/v1/calls?endpoint_id=${ep.id}`, { key: merchant.key })
    expect(calls.body.data).toHaveLength(1)
    expect(calls.body.data[0]).toMatchObject({
      payer: payer.address,
      amount_atomic: '10000',
      owner_share_atomic: '9500',
      fee_atomic: '500',
      upstream_status: 200,
    })
  })

  it('forwards each caller its own address, calls from two addresses interleaved', async () => {
    // The peer address is read once a request and remembered by its response object: a response
    // answered from another connection's address would show here.
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 })
    const callers = ['127.0.0.2', '127.0.0.3', '127.0.0.2', '127.0.0.3', '127.0.0.3', '127.0.0.2']
    const hashes: string[] = []
    for (const _ of callers) hashes.push(await payUsdc(payer, svc.chain.treasury, 10_000n))
    const forwarded = await Promise.all(
      callers.map(
        (from, i) =>
          new Promise<string>((resolve, reject) => {
            const req = httpRequest(
              ep.metered_url,
              { localAddress: from, headers: { 'x-payment': hashes[i]! } },
              (r) => {
                let text = ''
                r.setEncoding('utf8')
                r.on('data', (c: string) => {
                  text += c
                })
                r.on('end', () => {
                  if (r.statusCode !== 200) reject(new Error(`${r.statusCode} ${text}`))
                  else resolve(JSON.parse(text).headers['x-forwarded-for'])
                })
              },
            )
            req.on('error', reject)
            req.end()
          }),
      ),
    )
    expect(forwarded).toEqual(callers)
  })

  it('refuses a replayed hash with proof_already_used and does not forward it', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    expect((await fetch(ep.metered_url, { headers: { 'x-payment': hash } })).status).toBe(200)
    const before = upstream.count()
    const replay = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(replay.status).toBe(402)
    expect((await replay.json()).error).toBe('proof_already_used')
    // The same hash on another endpoint is just as spent.
    const other = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 })
    const elsewhere = await fetch(other.metered_url, { headers: { 'x-payment': hash } })
    expect((await elsewhere.json()).error).toBe('proof_already_used')
    expect(upstream.count()).toBe(before)
  })

  it('forwards exactly one of 50 concurrent requests carrying one hash', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const before = upstream.count()
    const results = await Promise.all(
      Array.from({ length: 50 }, () =>
        fetch(ep.metered_url, { headers: { 'x-payment': hash } }).then(async (r) => ({
          status: r.status,
          body: await r.text(),
        })),
      ),
    )
    expect(results.filter((r) => r.status === 200)).toHaveLength(1)
    // The others are told the proof is spent (402) or, while the winner is still in flight, to retry (409).
    const refused = results.filter(
      (r) =>
        (r.status === 402 && r.body.includes('proof_already_used')) ||
        (r.status === 409 && r.body.includes('payment_in_progress')),
    )
    expect(refused).toHaveLength(49)
    expect(upstream.count() - before).toBe(1)
  })

  it('relays a 5 MB response intact', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/big`, price: 0.01 })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const direct = Buffer.from(await (await fetch(`${upstream.url}/big?bytes=5242880`)).arrayBuffer())
    const r = await fetch(`${ep.metered_url}?bytes=5242880`, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(200)
    const body = Buffer.from(await r.arrayBuffer())
    expect(body.length).toBe(5_242_880)
    expect(createHash('sha256').update(body).digest('hex')).toBe(
      createHash('sha256').update(direct).digest('hex'),
    )
  })

  it('streams server-sent events in order, the first before the upstream finished', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/sse`, price: 0.01 })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash, accept: 'text/event-stream' } })
    expect(r.status).toBe(200)
    expect(r.headers.get('content-type')).toContain('text/event-stream')
    const reader = r.body!.getReader()
    const first = await reader.read()
    const firstAt = Date.now()
    let text = new TextDecoder().decode(first.value)
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      text += new TextDecoder().decode(value)
    }
    const finishedAt = upstream.sseFinishedAt()
    expect(firstAt).toBeLessThan(finishedAt!)
    const events = text.split('\n\n').filter(Boolean)
    expect(events.map((e) => e.replace(/^data: /, ''))).toEqual(['0', '1', '2', '3', '4'])
  })
})

describe('proofs that do not pay', () => {
  let ep: { id: string; metered_url: string }
  beforeAll(async () => {
    ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.05 })
  })

  async function expectRefused(proof: string, reason: string) {
    const before = upstream.count()
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': proof } })
    expect(r.status).toBe(402)
    const body = await r.json()
    expect(body.error).toBe(reason)
    expect(body.price).toBe(0.05)
    expect(upstream.count()).toBe(before)
    if (/^0x[0-9a-f]{64}$/i.test(proof)) expect(await claimsFor(proof)).toEqual([])
    return r
  }

  it('underpaid', async () => {
    await expectRefused(await payUsdc(payer, svc.chain.treasury, 49_999n), 'underpaid')
  })
  it('wrong recipient', async () => {
    const someoneElse = (await fundedAccount(0n)).address
    await expectRefused(await payUsdc(payer, someoneElse, 50_000n), 'wrong_recipient')
  })
  it('a different ERC-20 token', async () => {
    const { deployToken } = await import('../helpers/tokens.ts')
    const fake = await deployToken()
    await fake.mint(payer.address, 1_000_000n)
    await expectRefused(
      await payUsdc(payer, svc.chain.treasury, 50_000n, { token: fake.address }),
      'wrong_asset',
    )
  })
  it('a reverted transaction', async () => {
    const { sendRevertingTransfer } = await import('../helpers/tokens.ts')
    await expectRefused(await sendRevertingTransfer(payer, svc.chain.treasury), 'transaction_failed')
  })
  it('a hash not on chain (after waiting): transaction_not_found, final, without Retry-After', async () => {
    const r = await expectRefused(`0x${'ab'.repeat(32)}`, 'transaction_not_found')
    expect(r.headers.get('retry-after')).toBeNull()
  })
  it('an x402 authorization with a forged signature is refused', async () => {
    const payload = {
      x402Version: 1,
      scheme: 'exact',
      network: 'local',
      payload: {
        signature: `0x${'11'.repeat(65)}`,
        authorization: {
          from: payer.address,
          to: svc.chain.treasury,
          value: '50000',
          validAfter: '0',
          validBefore: '9999999999',
          nonce: `0x${'22'.repeat(32)}`,
        },
      },
    }
    await expectRefused(Buffer.from(JSON.stringify(payload)).toString('base64'), 'invalid_signature')
  })
  it('a malformed header', async () => {
    await expectRefused('0x1234', 'invalid_proof')
    await expectRefused('not a proof at all', 'invalid_proof')
  })
})

describe('proof age', () => {
  it('refuses a proof older than chain.max_proof_age_ms', async () => {
    // The service's clock, moved past the proof's maximum age instead of waiting for it (the age is the
    // clock less the block's time).
    let ahead_ms = 0
    const strict = await startTestService({
      overrides: { chain: { max_proof_age_ms: 60_000 } },
      now: () => Date.now() + ahead_ms,
    })
    try {
      const m = await registerMerchant(strict)
      const ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 }, strict, m.key)
      // The same payment, on time, serves: the clock is what refuses the second.
      const fresh = await payUsdc(payer, strict.chain.treasury, 10_000n)
      expect((await fetch(ep.metered_url, { headers: { 'x-payment': fresh } })).status).toBe(200)
      const hash = await payUsdc(payer, strict.chain.treasury, 10_000n)
      ahead_ms = 61_000
      const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
      expect(r.status).toBe(402)
      expect((await r.json()).error).toBe('proof_too_old')
    } finally {
      await strict.stop()
    }
  })
})

describe('upstream failures and retry', () => {
  let port: number
  let server: Server | null = null
  let hits = 0

  function startFlakyUpstream(): Promise<void> {
    server = createServer((req, res) => {
      hits++
      req.resume()
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'))
    })
    return new Promise((resolve) => server!.listen(port, '127.0.0.1', () => resolve()))
  }

  beforeAll(async () => {
    const probe = createServer()
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()))
    port = (probe.address() as AddressInfo).port
    await new Promise((r) => probe.close(r))
  })
  afterAll(async () => {
    if (server) await new Promise((r) => server!.close(r))
  })

  it('502 while the upstream is down; the same proof succeeds once it is back, and only then is captured', async () => {
    const ep = await createEndpoint({ upstream_url: `http://127.0.0.1:${port}/api`, price: 0.012345 })
    const hash = await payUsdc(payer, svc.chain.treasury, 12_345n)
    const down = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(down.status).toBe(502)
    expect((await down.json()).error.code).toBe('upstream_unreachable')
    await svc.flushCaptures()
    expect(await claimsFor(hash)).toEqual([{ status: 'claimed', target_id: ep.id, amount_atomic: 12_345n }])

    await startFlakyUpstream()
    const up = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(up.status).toBe(200)
    expect(hits).toBe(1)
    await svc.flushCaptures()
    expect((await claimsFor(hash))[0]!.status).toBe('captured')
    const again = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(again.status).toBe(402)
    expect(hits).toBe(1)

    // Owner share: floor(12345 × 9500 / 10000) = 11727, the fee the remaining 618.
    const [call] = await svc.sql`
      SELECT id, owner_share_atomic, fee_atomic, ledger_batch_id::text AS batch FROM calls
      WHERE call_proof_key(proof_key, proof) = ${`tx:${hash}`}`
    expect(call).toMatchObject({ owner_share_atomic: 11_727n, fee_atomic: 618n })
    // Booked by its capture batch (it was flushed alone: the batch holds this one call of the account).
    const entries = await svc.sql`
      SELECT kind, wallet, amount_atomic FROM ledger_entries
      WHERE source_type = 'capture_batch' AND source_id = ${call!.batch} AND account_id = ${merchant.account.id}
      ORDER BY kind`
    expect(entries).toEqual([
      { kind: 'fee', wallet: null, amount_atomic: 618n },
      { kind: 'owner_share', wallet: merchant.wallet, amount_atomic: 11_727n },
    ])
  })

  it('a 5xx from the upstream is passed on and not captured', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/status/503`, price: 0.01 })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(503)
    await svc.flushCaptures()
    expect((await claimsFor(hash))[0]!.status).toBe('claimed')
  })

  it('a proof never captured within the retry window is marked for refund to its payer', async () => {
    const quick = await startTestService({ overrides: { proxy: { retry_window_ms: 500 } } })
    try {
      const m = await registerMerchant(quick)
      const ep = await createEndpoint({ upstream_url: 'http://127.0.0.1:9/', price: 0.02 }, quick, m.key)
      const hash = await payUsdc(payer, quick.chain.treasury, 20_000n)
      expect((await fetch(ep.metered_url, { headers: { 'x-payment': hash } })).status).toBe(502)
      // The sweep runs until the window has run out and it marks the claim.
      await waitFor(
        async () => {
          await quick.jobs.runNow('claim-expiry')
          const [claim] = await quick.sql`SELECT status FROM claims WHERE proof_key = ${`tx:${hash}`}`
          return claim!.status === 'refund_due'
        },
        { timeoutMs: 5_000, intervalMs: 100, what: 'the claim marked refund_due' },
      )
      const refunds =
        await quick.sql`SELECT wallet, amount_atomic FROM ledger_entries WHERE kind = 'refund' AND source_id = ${`tx:${hash}`}`
      expect(refunds).toEqual([{ wallet: payer.address, amount_atomic: 20_000n }])
      // Past the window the proof no longer buys a retry.
      expect((await fetch(ep.metered_url, { headers: { 'x-payment': hash } })).status).toBe(402)
    } finally {
      await quick.stop()
    }
  })
})

describe('aborts and quotes', () => {
  it('a caller that disconnects mid-response makes the upstream see the abort', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/hang-body`, price: 0.01 })
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const url = new URL(ep.metered_url)
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, headers: { 'x-payment': hash } },
        (res) => {
          res.once('data', () => {
            req.destroy()
            resolve()
          })
        },
      )
      req.on('error', () => {})
      req.setTimeout(5000, () => reject(new Error('no response')))
      req.end()
    })
    await waitFor(() => upstream.hangAborted(), {
      timeoutMs: 2000,
      what: 'the hung upstream request aborted',
    })
    // Headers had arrived: the call counts as served.
    await svc.flushCaptures()
    expect((await claimsFor(hash))[0]!.status).toBe('captured')
  })

  it('a proof paying the price quoted before an increase is still accepted within proxy.quote_ttl_ms', async () => {
    const ep = await createEndpoint({ upstream_url: `${upstream.url}/echo`, price: 0.01 })
    const quote = await fetch(ep.metered_url)
    expect((await quote.json()).price).toBe(0.01)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    await svc.api(`/api/v1/endpoints/${ep.id}`, { key: merchant.key, method: 'PATCH', body: { price: 0.02 } })
    const after = await fetch(ep.metered_url)
    expect((await after.json()).price).toBe(0.02)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(200)
  })
})
