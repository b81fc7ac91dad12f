// Identity rules on /m/<id>, end to end: mppx's Web Bot Auth client, unchanged, signs calls; a key directory
// on 127.0.0.1 publishes its key; the endpoint's rules make a verified signer free, block unsigned callers,
// or multiply the price its 402 quotes. A replayed signature is unsigned on a second instance.
import { createHash, type webcrypto } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Client } from 'mppx/attestation/web-bot-auth'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { agentIdentity } from '../../src/observability/metrics.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { type KeyDirectoryServer, startKeyDirectory } from '../helpers/key-directory.ts'
import { startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

const AGENT = 'https://bot.example'

async function agentKey() {
  const pair = (await crypto.subtle.generateKey({ name: 'Ed25519' }, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair
  const jwk = (await crypto.subtle.exportKey('jwk', pair.publicKey)) as Record<string, string>
  const keyId = createHash('sha256')
    .update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x }))
    .digest('base64url')
  return { privateKey: pair.privateKey, keyId, jwk: { kty: jwk.kty, crv: jwk.crv, x: jwk.x } }
}

let directory: KeyDirectoryServer
let upstream: Upstream
let key: Awaited<ReturnType<typeof agentKey>>

function identityConfig() {
  return {
    identity: {
      directories: [{ name: 'acme', signature_agent: AGENT, url: directory.url }],
      allow_private_directories: true,
    },
  }
}

async function signed(url: string): Promise<Headers> {
  const signer = Client.signer({ key: key.privateKey, keyId: key.keyId, signatureAgent: AGENT })
  return (await signer.sign(new Request(url))).headers
}

async function createEndpoint(svc: TestService, apiKey: string, rules: unknown): Promise<string> {
  const r = await svc.api('/api/v1/endpoints', {
    key: apiKey,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01, identity_rules: rules },
  })
  if (r.status !== 201) throw new Error(`create failed: ${r.status} ${r.text}`)
  return r.body.id as string
}

function headersOf(h: Headers): Record<string, string> {
  const out: Record<string, string> = {}
  h.forEach((v, k) => {
    out[k] = v
  })
  return out
}

/** The amount a 402 quotes (x402 v1 body). */
async function quoted(res: Response): Promise<string> {
  expect(res.status).toBe(402)
  const body = (await res.json()) as { accepts: Array<{ maxAmountRequired: string }> }
  return body.accepts[0]!.maxAmountRequired
}

beforeAll(async () => {
  key = await agentKey()
  directory = await startKeyDirectory([key.jwk])
  upstream = await startUpstream()
})
afterAll(async () => {
  await upstream?.close()
  await directory?.close()
})

describe('identity rules on metered calls', () => {
  let svc: TestService
  let apiKey: string
  beforeAll(async () => {
    svc = await startTestService({ overrides: identityConfig() as never })
    apiKey = (await registerMerchant(svc)).key
  })
  afterAll(async () => {
    await svc?.stop()
  })

  it('stores, shows and validates identity_rules with field-named errors', async () => {
    const id = await createEndpoint(svc, apiKey, [
      { match: 'signer', signer: 'acme', action: 'multiplier', multiplier: 0.5 },
      { match: 'unsigned', action: 'price', price: '0.02' },
    ])
    const got = await svc.api(`/api/v1/endpoints/${id}`, { key: apiKey })
    expect(got.body.identity_rules).toEqual([
      { match: 'signer', signer: 'acme', action: 'multiplier', multiplier: '0.5' },
      { match: 'unsigned', action: 'price', price: 0.02 },
    ])
    const bad = await svc.api(`/api/v1/endpoints/${id}`, {
      key: apiKey,
      method: 'PATCH',
      body: { identity_rules: [{ match: 'signer', action: 'free' }] },
    })
    expect(bad.status).toBe(400)
    expect(bad.body.error.param).toBe('identity_rules.0')
    // Refused: nothing changed.
    expect((await svc.api(`/api/v1/endpoints/${id}`, { key: apiKey })).body.identity_rules).toHaveLength(2)
    const cleared = await svc.api(`/api/v1/endpoints/${id}`, {
      key: apiKey,
      method: 'PATCH',
      body: { identity_rules: null },
    })
    expect(cleared.body.identity_rules).toBeNull()
  })

  it('serves a verified signer free, with x-tollgate-agent; blocks an unsigned call with 403 agent_blocked', async () => {
    const id = await createEndpoint(svc, apiKey, [
      { match: 'signer', signer: 'acme', action: 'free' },
      { match: 'unsigned', action: 'block' },
    ])
    const url = `${svc.url}/m/${id}`
    // The directory is fetched in the background at start: signed calls verify once it is held.
    let res: Response | null = null
    await waitFor(
      async () => {
        const before = upstream.count()
        res = await fetch(url, { headers: await signed(url) })
        return res.status === 200 && upstream.count() === before + 1
      },
      { what: 'a signed call served free' },
    )
    expect(upstream.last()!.headers['x-tollgate-agent']).toBe('acme')
    // A caller cannot claim an identity by sending the header itself.
    const unsigned = await fetch(url, { headers: { 'x-tollgate-agent': 'acme' } })
    expect(unsigned.status).toBe(403)
    expect(((await unsigned.json()) as { error: { code: string } }).error.code).toBe('agent_blocked')
  })

  it('a multiplier rule quotes the price × m in the 402; an unsigned call the endpoint price', async () => {
    const id = await createEndpoint(svc, apiKey, [
      { match: 'any_verified', action: 'multiplier', multiplier: '2.5' },
    ])
    const url = `${svc.url}/m/${id}`
    expect(await quoted(await fetch(url))).toBe('10000')
    await waitFor(async () => (await quoted(await fetch(url, { headers: await signed(url) }))) === '25000', {
      what: 'the signed call quoted × 2.5',
    })
    // The payment is verified against the identity's price: the endpoint price is not enough when signed.
    const payer: Funded = await fundedAccount(1_000_000n)
    const short = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const refused = await fetch(url, { headers: { ...headersOf(await signed(url)), 'x-payment': short } })
    expect(refused.status).toBe(402)
    const enough = await payUsdc(payer, svc.chain.treasury, 25_000n)
    const before = upstream.count()
    const paid = await fetch(url, { headers: { ...headersOf(await signed(url)), 'x-payment': enough } })
    expect(paid.status).toBe(200)
    expect(upstream.count()).toBe(before + 1)
    expect(upstream.last()!.headers['x-tollgate-agent']).toBe('acme')
    const receiptId = paid.headers.get('x-receipt-id')!
    // Unsigned, the endpoint price pays (the short payment was not used up by its refusal).
    expect((await fetch(url, { headers: { 'x-payment': short } })).status).toBe(200)

    // The books: each call row says who called and which rule priced it.
    const calls = await waitFor(
      async () => {
        const r = await svc.api(`/api/v1/calls?endpoint_id=${id}`, { key: apiKey })
        return r.body.data.length === 2 ? r.body.data : null
      },
      { what: 'both paid calls booked' },
    )
    const [unsignedCall, signedCall] = calls
    expect(signedCall.amount_atomic).toBe('25000')
    expect(signedCall.agent).toEqual({
      signer: 'acme',
      keyid: key.keyId,
      failure: null,
      rule: 0,
      action: 'multiplier',
    })
    expect(unsignedCall.amount_atomic).toBe('10000')
    expect(unsignedCall.agent).toEqual({
      signer: 'unsigned',
      keyid: null,
      failure: null,
      rule: null,
      action: 'endpoint_price',
    })
    // The receipt shows it, and the signed final receipt signs it.
    const receipt = await waitFor(
      async () => {
        const r = await fetch(`${svc.url}/receipts/${receiptId}`)
        return r.status === 200 ? ((await r.json()) as Record<string, any>) : null
      },
      { what: 'the receipt written' },
    )
    expect(receipt.agent).toEqual(signedCall.agent)
    if (receipt.signed !== null) expect(JSON.parse(receipt.signed.payload.agent)).toEqual(signedCall.agent)
  })

  it("splits a listed endpoint's observed figures by who paid; an endpoint without rules has no split", async () => {
    const create = async (rules: unknown) => {
      const r = await svc.api('/api/v1/endpoints', {
        key: apiKey,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01, listed: true, identity_rules: rules },
      })
      expect(r.status).toBe(201)
      return r.body.id as string
    }
    const ruled = await create([{ match: 'any_verified', action: 'endpoint_price' }])
    const plain = await create(null)
    const payer: Funded = await fundedAccount(1_000_000n)
    const pay = async (id: string, sign: boolean) => {
      const url = `${svc.url}/m/${id}`
      const proof = await payUsdc(payer, svc.chain.treasury, 10_000n)
      const headers = sign ? { ...headersOf(await signed(url)), 'x-payment': proof } : { 'x-payment': proof }
      const r = await fetch(url, { headers })
      await r.arrayBuffer()
      expect(r.status).toBe(200)
    }
    // The directory may still be on its first fetch: a signed call counts as acme once it verifies.
    await waitFor(
      async () => {
        await pay(ruled, true)
        return upstream.last()!.headers['x-tollgate-agent'] === 'acme'
      },
      { what: 'a signed call verified' },
    )
    await pay(ruled, true)
    await pay(ruled, false)
    await pay(plain, true)
    await svc.flushCaptures()
    const body = await (await fetch(`${svc.url}/discovery/resources?limit=47&offset=0`)).json()
    const observed = (id: string) =>
      body.items.find((i: { resource: string }) => i.resource.endsWith(`/m/${id}`)).observed
    const split = observed(ruled).by_agent as Array<{
      signer: string
      paid_calls: number
      success_rate: number
    }>
    const acme = split.find((a) => a.signer === 'acme')!
    const unsigned = split.find((a) => a.signer === 'unsigned')!
    expect(acme.paid_calls).toBeGreaterThanOrEqual(2)
    expect(unsigned.paid_calls).toBeGreaterThanOrEqual(1)
    // Every paid call counted once, under one signer; busiest first.
    expect(acme.paid_calls + unsigned.paid_calls).toBe(observed(ruled).paid_calls)
    expect(split[0]!.paid_calls).toBeGreaterThanOrEqual(split[split.length - 1]!.paid_calls)
    expect(acme.success_rate).toBe(1)
    expect(observed(plain).paid_calls).toBe(1)
    expect(observed(plain).by_agent).toBeUndefined()
  })

  it("prices an MCP endpoint by who calls: a tool at the rule's price, a usage-priced tool by its measure", async () => {
    const mcp = await startMcpUpstream({ json: true })
    try {
      const created = await svc.api('/api/v1/endpoints', {
        key: apiKey,
        body: {
          upstream_url: mcp.url,
          kind: 'mcp',
          mcp: {
            tools: {
              weather: 0.01,
              report: { model: 'usage', unit: 'response_bytes', max_price: 0.05, price_per_mb: 1 },
            },
            default_price: 0.003,
            free_tools: ['echo'],
          },
          identity_rules: [{ match: 'any_verified', action: 'multiplier', multiplier: '0.5' }],
        },
      })
      expect(created.status).toBe(201)
      const url = created.body.metered_url as string
      const call = (name: string, headers: Record<string, string> = {}) =>
        fetch(url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            ...headers,
          },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name, arguments: {} },
          }),
        })
      const priceOf = async (r: Response) => {
        expect(r.status).toBe(402)
        return ((await r.json()) as { price_atomic: string }).price_atomic
      }
      expect(await priceOf(await call('weather'))).toBe('10000')
      await waitFor(
        async () => (await priceOf(await call('weather', headersOf(await signed(url))))) === '5000',
        {
          what: 'the signed tool call quoted × 0.5',
        },
      )
      // A usage-priced tool is charged what it measures: its ceiling is quoted whoever calls.
      expect(await priceOf(await call('report', headersOf(await signed(url))))).toBe('50000')

      // The SDK's client, unchanged, over a fetch that signs each request and pays a 402 by transfer.
      const payer: Funded = await fundedAccount(1_000_000n)
      const hashes: string[] = []
      const agentFetch: typeof fetch = async (input, init) => {
        const headers = new Headers(init?.headers)
        for (const [k, v] of await signed(url)) headers.set(k, v)
        const first = await fetch(input, { ...init, headers })
        if (first.status !== 402) return first
        const { price_atomic } = (await first.json()) as { price_atomic: string }
        const hash = await payUsdc(payer, svc.chain.treasury, BigInt(price_atomic))
        hashes.push(hash)
        const again = new Headers(init?.headers)
        for (const [k, v] of await signed(url)) again.set(k, v)
        again.set('x-payment', hash)
        return fetch(input, { ...init, headers: again })
      }
      const client = new McpClient({ name: 'signed-agent', version: '1.0.0' })
      await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: agentFetch }))
      expect((await client.callTool({ name: 'echo', arguments: { text: 'hi' } })).content).toEqual([
        { type: 'text', text: 'hi' },
      ])
      expect((await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })).content).toEqual([
        { type: 'text', text: 'sunny in Lyon' },
      ])
      await client.callTool({ name: 'report', arguments: {} })
      await client.close()
      expect(hashes).toHaveLength(2)
      expect(mcp.served.get('weather')).toBe(1)

      await svc.flushCaptures()
      const rows = await svc.sql<
        { tool: string; amount_atomic: bigint; pricing_model: string; agent: unknown }[]
      >`
        SELECT tool, amount_atomic, pricing_model, agent FROM calls
        WHERE call_proof_key(proof_key, proof) = ANY(${hashes.map((h) => `tx:${h.toLowerCase()}`)})
        ORDER BY tool DESC`
      expect(rows.map((r) => [r.tool, r.pricing_model])).toEqual([
        ['weather', 'fixed'],
        ['report', 'usage'],
      ])
      expect(rows[0]!.amount_atomic).toBe(5_000n)
      expect(rows[0]!.agent).toMatchObject({ signer: 'acme', rule: 0, action: 'multiplier' })
      expect(rows[1]!.amount_atomic).toBeGreaterThan(5_000n)
      expect(rows[1]!.agent).toMatchObject({ signer: 'acme', rule: 0, action: 'endpoint_price' })
    } finally {
      await mcp.close()
    }
  })

  it('an endpoint without identity rules books no agent', async () => {
    const id = await createEndpoint(svc, apiKey, null)
    const url = `${svc.url}/m/${id}`
    const payer: Funded = await fundedAccount(1_000_000n)
    const proof = await payUsdc(payer, svc.chain.treasury, 10_000n)
    // A signature sent to an endpoint without rules is not read: the call is the endpoint's, as before.
    expect(
      (await fetch(url, { headers: { ...headersOf(await signed(url)), 'x-payment': proof } })).status,
    ).toBe(200)
    expect(upstream.last()!.headers['x-tollgate-agent']).toBeUndefined()
    const calls = await waitFor(
      async () => {
        const r = await svc.api(`/api/v1/calls?endpoint_id=${id}`, { key: apiKey })
        return r.body.data.length === 1 ? r.body.data : null
      },
      { what: 'the paid call booked' },
    )
    expect(calls[0].agent).toBeNull()
  })

  it('refuses a price rule on a usage-priced endpoint', async () => {
    const usage = await svc.api('/api/v1/endpoints', {
      key: apiKey,
      body: {
        upstream_url: `${upstream.url}/echo`,
        pricing: {
          model: 'usage',
          unit: 'tokens',
          max_price: 0.05,
          input_price_per_million: 2,
          cached_input_price_per_million: 1,
          output_price_per_million: 10,
        },
        identity_rules: [{ match: 'any_verified', action: 'price', price: 0.01 }],
      },
    })
    expect(usage.status).toBe(400)
    expect(usage.body.error.param).toBe('identity_rules')
  })
})

/** Sends `headers` to `url` with the Host header given (fetch would put the URL's own). */
async function sendWithHost(url: string, host: string, headers: Headers): Promise<number> {
  return (await exchangeWithHost(url, host, headers)).status
}

/** The amount a 402 answered with the Host header given quotes. */
async function quotedWithHost(url: string, host: string, headers: Headers): Promise<string> {
  const { status, body } = await exchangeWithHost(url, host, headers)
  return quoted(new Response(body, { status }))
}

function exchangeWithHost(
  url: string,
  host: string,
  headers: Headers,
): Promise<{ status: number; body: string }> {
  const h: Record<string, string> = { host }
  headers.forEach((v, k) => {
    h[k] = v
  })
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers: h }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        body += chunk
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

function replays(): number {
  const m = (
    agentIdentity as unknown as { hashMap: Record<string, { value: number; labels: { outcome: string } }> }
  ).hashMap
  return Object.values(m)
    .filter((e) => e.labels.outcome === 'replayed_nonce')
    .reduce((n, e) => n + e.value, 0)
}

describe.runIf(usingServer)('identity rules, two instances on one database', () => {
  let a: TestService
  let b: TestService
  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl, overrides: identityConfig() as never })
    b = await startTestService({ databaseUrl, treasury: a.treasury, overrides: identityConfig() as never })
  })
  afterAll(async () => {
    await b?.stop()
    await a?.stop()
  })

  it('a signature replayed to the second instance is treated as unsigned there', async () => {
    const apiKey = (await registerMerchant(a)).key
    const id = await createEndpoint(a, apiKey, [
      { match: 'signer', signer: 'acme', action: 'free' },
      { match: 'unsigned', action: 'block' },
    ])
    const urlA = `${a.url}/m/${id}`
    const urlB = `${b.url}/m/${id}`
    const hostA = new URL(a.url).host
    // Both instances hold the directory's key: a fresh signature is served free on each.
    for (const url of [urlA, urlB])
      await waitFor(async () => (await fetch(url, { headers: await signed(url) })).status === 200, {
        what: 'a signed call served free',
      })
    const headers = await signed(urlA)
    expect(await sendWithHost(urlA, hostA, headers)).toBe(200)
    const before = replays()
    // The same signature, for the same host, at the other instance: its nonce is taken, so it is unsigned.
    expect(await sendWithHost(urlB, hostA, headers)).toBe(403)
    expect(replays()).toBe(before + 1)
  })

  it('books who called on either instance: a replayed signature pays as unsigned and says why', async () => {
    const apiKey = (await registerMerchant(a)).key
    const id = await createEndpoint(a, apiKey, [
      { match: 'signer', signer: 'acme', action: 'multiplier', multiplier: '0.5' },
    ])
    const urlA = `${a.url}/m/${id}`
    const urlB = `${b.url}/m/${id}`
    const hostA = new URL(a.url).host
    await waitFor(async () => (await quoted(await fetch(urlB, { headers: await signed(urlB) }))) === '5000', {
      what: 'the second instance holding the directory',
    })
    const payer: Funded = await fundedAccount(1_000_000n)
    const half = await payUsdc(payer, a.chain.treasury, 5_000n)
    const headers = await signed(urlA)
    // A 402 serves nothing, so it claims no nonce: the same signature is quoted the signer's price again on
    // either instance, and still pays once.
    for (const url of [urlA, urlB, urlA]) expect(await quotedWithHost(url, hostA, headers)).toBe('5000')
    headers.set('x-payment', half)
    expect(await sendWithHost(urlA, hostA, headers)).toBe(200)
    // The same signature at the other instance, paying the endpoint price: served, booked as unsigned.
    const full = await payUsdc(payer, a.chain.treasury, 10_000n)
    headers.set('x-payment', full)
    expect(await sendWithHost(urlB, hostA, headers)).toBe(200)
    const calls = await waitFor(
      async () => {
        const r = await a.api(`/api/v1/calls?endpoint_id=${id}`, { key: apiKey })
        return r.body.data.length === 2 ? r.body.data : null
      },
      { what: 'both calls booked' },
    )
    const byAmount = new Map(calls.map((c: { amount_atomic: string }) => [c.amount_atomic, c]))
    expect((byAmount.get('5000') as { agent: unknown }).agent).toEqual({
      signer: 'acme',
      keyid: key.keyId,
      failure: null,
      rule: 0,
      action: 'multiplier',
    })
    expect((byAmount.get('10000') as { agent: unknown }).agent).toEqual({
      signer: 'unsigned',
      keyid: null,
      failure: 'replayed_nonce',
      rule: null,
      action: 'endpoint_price',
    })
  })
})
