// Discovery: the owner's declared fields (validated), the bazaar extension of a listed endpoint's 402 read by
// the published @x402/extensions code, /.well-known/x402.json, and /discovery/resources with its filters and
// the figures paid traffic left (paid calls, success and refund rates, latency, repeat payers).
import { decodePaymentRequiredHeader } from '@x402/core/http'
import {
  sanitizeResourceServiceMetadata,
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
} from '@x402/extensions/bazaar'
import {
  type EIP712SignedReceipt,
  extractReceiptFromResponse,
  verifyReceiptSignatureEIP712,
} from '@x402/extensions/offer-receipt'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { catalogedFrom } from '../helpers/bazaar.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

const WEATHER = {
  service_name: 'Acme Weather',
  tags: ['weather', 'forecast'],
  icon_url: 'https://acme.example/icon.png',
  method: 'GET',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
  },
  input_example: { city: 'Lisbon' },
  output_schema: { properties: { temp_c: { type: 'number' } }, required: ['temp_c'] },
  output_example: { temp_c: 21.5 },
}

const TRANSLATE = {
  service_name: 'Acme Translate',
  tags: ['language'],
  method: 'POST',
  body_type: 'json',
  input_schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
  input_example: { text: 'hello' },
}

describe('discovery', () => {
  let service: TestService
  let upstream: Upstream
  let key: string
  let payer: Funded
  const ids: Record<string, string> = {}

  const create = async (body: Record<string, unknown>) =>
    service.api('/api/v1/endpoints', { key, body: { upstream_url: `${upstream.url}/echo`, ...body } })

  beforeAll(async () => {
    service = await startTestService({ overrides: { proxy: { allow_private_upstreams: true } } })
    upstream = await startUpstream((req, res) => {
      if (!req.url?.startsWith('/fail')) return false
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":"down"}')
      return true
    })
    payer = await fundedAccount(10_000_000n)
    key = (await registerMerchant(service)).key
    for (const [name, body] of Object.entries({
      weather: { price: 0.01, listed: true, description: 'Weather by city', discovery: WEATHER },
      translate: { price: 0.05, listed: true, description: 'Translate text', discovery: TRANSLATE },
      hidden: { price: 0.01, discovery: WEATHER },
      failing: {
        price: 0.02,
        listed: true,
        upstream_url: `${upstream.url}/fail`,
        discovery: { tags: ['weather'] },
      },
    })) {
      const r = await create(body)
      expect(r.status, r.text).toBe(201)
      ids[name] = r.body.id
    }
  })
  afterAll(async () => {
    await service?.stop()
    await upstream?.close()
  })

  it('refuses bad discovery fields with a 400 naming the field, and changes nothing', async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ tags: ['a', 'b', 'c', 'd', 'e', 'f'] }, 'discovery.tags', /at most 5/],
      [{ tags: ['Weather', 'weather'] }, 'discovery.tags', /repeat/],
      [{ service_name: 'x'.repeat(33) }, 'discovery.service_name', /32/],
      [{ service_name: 'caf\u00e9' }, 'discovery.service_name', /printable ASCII/],
      [{ icon_url: 'http://localhost/icon.png' }, 'discovery.icon_url', /public host/],
      [{ icon_url: 'https://user:pw@acme.example/i.png' }, 'discovery.icon_url', /credentials/],
      [{ icon_url: 'ftp://acme.example/i.png' }, 'discovery.icon_url', /http\(s\)/],
      [{ input_schema: { type: 'string' } }, 'discovery.input_schema', /object/],
      [{ input_schema: { $ref: 'https://evil.example/s.json' } }, 'discovery.input_schema', /\$ref/],
      [{ method: 'TRACE' }, 'discovery.method', /one of/],
      [{ method: 'POST' }, 'discovery', /input_example/],
      [{ method: 'GET', body_type: 'json' }, 'discovery', /body_type goes with/],
      [{ output_example: [1, 2] }, 'discovery.output_example', /JSON object/],
      [{ colour: 'red' }, 'discovery.colour', /unknown field/],
    ]
    const before = await service.api('/api/v1/endpoints', { key })
    for (const [discovery, param, message] of cases) {
      const r = await create({ price: 0.01, discovery })
      expect(r.status, `${JSON.stringify(discovery)} ${r.text}`).toBe(400)
      expect([r.status, r.body.error.code, r.body.error.param], JSON.stringify(discovery)).toEqual([
        400,
        'invalid_parameter',
        param,
      ])
      expect(r.body.error.message).toMatch(message)
    }
    const listed = await create({ price: 0.01, listed: 'yes' })
    expect([listed.status, listed.body.error.param]).toEqual([400, 'listed'])
    const after = await service.api('/api/v1/endpoints', { key })
    expect(after.body.data.length).toBe(before.body.data.length)
  })

  it('a listed endpoint’s 402 carries the bazaar extension the published code validates and extracts', async () => {
    const r = await fetch(`${service.url}/m/${ids.weather}`)
    expect(r.status).toBe(402)
    const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
    const bazaar = required.extensions?.bazaar as Parameters<typeof validateDiscoveryExtension>[0]
    expect(validateDiscoveryExtension(bazaar)).toEqual({ valid: true })
    expect(validateDiscoveryExtensionSpec(bazaar as never)).toEqual({ valid: true })
    expect(sanitizeResourceServiceMetadata(required.resource)).toEqual({
      serviceName: 'Acme Weather',
      tags: ['weather', 'forecast'],
      iconUrl: 'https://acme.example/icon.png',
    })
    // What a facilitator catalogs from a payment that echoes the 402.
    const found = catalogedFrom(required)
    expect(found).toMatchObject({
      resourceUrl: `${service.url}/m/${ids.weather}`,
      description: 'Weather by city',
      serviceName: 'Acme Weather',
      method: 'GET',
      discoveryInfo: {
        input: { type: 'http', method: 'GET', queryParams: { city: 'Lisbon' } },
        output: { type: 'json', example: { temp_c: 21.5 } },
      },
    })
    // The body (v1 clients, agents reading JSON) carries the same extension.
    expect((await r.json()).extensions.bazaar).toEqual(bazaar)
  })

  it('a body method is declared with its body type and example body, valid for the published code', async () => {
    const r = await fetch(`${service.url}/m/${ids.translate}`)
    const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
    const bazaar = required.extensions?.bazaar as Parameters<typeof validateDiscoveryExtension>[0]
    expect(validateDiscoveryExtension(bazaar)).toEqual({ valid: true })
    expect(bazaar.info.input).toEqual({
      type: 'http',
      method: 'POST',
      bodyType: 'json',
      body: { text: 'hello' },
    })
  })

  it('an endpoint that is not listed offers no bazaar extension and is in no listing', async () => {
    const r = await fetch(`${service.url}/m/${ids.hidden}`)
    const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
    expect(required.extensions?.bazaar).toBeUndefined()
    expect(required.resource.serviceName).toBeUndefined()
    const manifest = await (await fetch(`${service.url}/.well-known/x402.json`)).json()
    expect(manifest.items.map((i: { resource: { url: string } }) => i.resource.url)).not.toContain(
      `${service.url}/m/${ids.hidden}`,
    )
  })

  it('/.well-known/x402.json lists the host’s listed endpoints in the draft manifest shape', async () => {
    const r = await fetch(`${service.url}/.well-known/x402.json`)
    expect(r.status).toBe(200)
    expect(r.headers.get('access-control-allow-origin')).toBe('*')
    const manifest = await r.json()
    expect(manifest.x402Version).toBe(2)
    expect(typeof manifest.lastUpdated).toBe('number')
    const weather = manifest.items.find((i: { resource: { url: string } }) =>
      i.resource.url.endsWith(ids.weather!),
    )
    expect(weather).toMatchObject({
      resource: {
        url: `${service.url}/m/${ids.weather}`,
        description: 'Weather by city',
        mimeType: 'application/json',
        serviceName: 'Acme Weather',
        tags: ['weather', 'forecast'],
      },
      type: 'http',
      input: { method: 'GET', queryParams: WEATHER.input_schema },
      output: { mimeType: 'application/json', example: { temp_c: 21.5 } },
    })
    // The live 402's requirements, as advertised.
    const live = decodePaymentRequiredHeader(
      (await fetch(`${service.url}/m/${ids.weather}`)).headers.get('payment-required')!,
    )
    expect(weather.accepts).toEqual(live.accepts)
    expect(manifest.items).toHaveLength(3)
  })

  it('/discovery/resources pages and filters by tag, network and price, in the facilitator shape', async () => {
    const get = async (q: string) => {
      const r = await fetch(`${service.url}/discovery/resources${q}`)
      return { status: r.status, body: await r.json() }
    }
    const all = await get('')
    expect(all.status).toBe(200)
    expect(all.body.x402Version).toBe(2)
    expect(all.body.pagination).toEqual({ limit: 20, offset: 0, total: 3 })
    const item = all.body.items.find((i: { resource: string }) => i.resource.endsWith(ids.translate!))
    expect(item).toMatchObject({
      type: 'http',
      x402Version: 2,
      description: 'Translate text',
      serviceName: 'Acme Translate',
      tags: ['language'],
    })
    expect(item.accepts.length).toBeGreaterThan(0)
    const page = await get('?limit=1&offset=1')
    expect(page.body.items).toHaveLength(1)
    expect(page.body.items[0].resource).toBe(all.body.items[1].resource)
    expect(page.body.pagination).toEqual({ limit: 1, offset: 1, total: 3 })
    const tagged = await get('?tag=weather')
    expect(tagged.body.items.map((i: { resource: string }) => i.resource.split('/').pop()).sort()).toEqual(
      [ids.weather, ids.failing].sort(),
    )
    const cheap = await get('?max_price=0.02')
    expect(cheap.body.pagination.total).toBe(2)
    const dear = await get('?min_price=0.03')
    expect(dear.body.items.map((i: { resource: string }) => i.resource.split('/').pop())).toEqual([
      ids.translate,
    ])
    const here = await get(`?network=${encodeURIComponent(all.body.items[0].accepts[0].network)}`)
    expect(here.body.pagination.total).toBe(3)
    const elsewhere = await get('?network=eip155:1')
    expect([elsewhere.status, elsewhere.body.items]).toEqual([200, []])
    for (const [q, param] of [
      ['?limit=0', 'limit'],
      ['?limit=101', 'limit'],
      ['?offset=-1', 'offset'],
      ['?min_price=abc', 'min_price'],
      ['?min_price=0.05&max_price=0.01', 'min_price'],
      ['?sort=price', 'sort'],
    ] as const) {
      const bad = await get(q)
      expect([bad.status, bad.body.error.code, bad.body.error.param], q).toEqual([
        400,
        'invalid_parameter',
        param,
      ])
    }
  })

  it('shows what paid traffic observed: paid calls, success and refund rates, latency, repeat payers', async () => {
    const pay = async (id: string) => {
      const hash = await payUsdc(payer, service.treasury.address, id === ids.failing ? 20_000n : 10_000n)
      const r = await fetch(`${service.url}/m/${id}?city=Lisbon`, { headers: { 'x-payment': hash } })
      await r.arrayBuffer()
      return r.status
    }
    expect(await pay(ids.weather!)).toBe(200)
    expect(await pay(ids.weather!)).toBe(200)
    const other = await fundedAccount(1_000_000n)
    const hash = await payUsdc(other, service.treasury.address, 10_000n)
    expect((await fetch(`${service.url}/m/${ids.weather}`, { headers: { 'x-payment': hash } })).status).toBe(
      200,
    )
    expect(await pay(ids.failing!)).toBe(500)
    await service.flushCaptures()
    // Past the listing's cache (a few seconds): a query string not asked before is read fresh.
    const r = await fetch(`${service.url}/discovery/resources?limit=20&offset=0`)
    const body = await r.json()
    const of = (id: string) => body.items.find((i: { resource: string }) => i.resource.endsWith(id)).observed
    const weather = of(ids.weather!)
    expect(weather).toMatchObject({
      window_days: 7,
      paid_calls: 3,
      success_rate: 1,
      refund_rate: 0,
      repeat_payers: 1,
    })
    expect(weather.p50_upstream_ms).toBeGreaterThan(0)
    expect(weather.p99_upstream_ms).toBeGreaterThanOrEqual(weather.p50_upstream_ms)
    expect(of(ids.failing!)).toMatchObject({
      paid_calls: 1,
      success_rate: 0,
      refund_rate: 1,
      repeat_payers: 0,
    })
    expect(of(ids.translate!)).toEqual({
      window_days: 7,
      paid_calls: 0,
      success_rate: null,
      refund_rate: null,
      p50_upstream_ms: null,
      p99_upstream_ms: null,
      repeat_payers: 0,
    })
  })

  it('a paid answer carries a receipt signed by the published key (the local chain’s dev key)', async () => {
    const hash = await payUsdc(payer, service.treasury.address, 10_000n)
    const r = await fetch(`${service.url}/m/${ids.hidden}`, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(200)
    const receipt = extractReceiptFromResponse(r) as EIP712SignedReceipt
    const keys = await (await fetch(`${service.url}/.well-known/x402-receipt-keys.json`)).json()
    const { signer, payload } = await verifyReceiptSignatureEIP712(receipt)
    expect(signer).toBe(keys.current.address)
    // A transaction-hash payment is its own settlement: the signed receipt names that transaction.
    expect(payload).toMatchObject({ resourceUrl: `${service.url}/m/${ids.hidden}`, transaction: hash })
    expect(payload.payer.toLowerCase()).toBe(payer.address.toLowerCase())
  })

  it('un-listing an endpoint takes it out of the listing and its 402', async () => {
    const r = await service.api(`/api/v1/endpoints/${ids.translate}`, {
      key,
      method: 'PATCH',
      body: { listed: false },
    })
    expect([r.status, r.body.listed]).toEqual([200, false])
    expect(r.body.discovery).toMatchObject({ service_name: 'Acme Translate' })
    const required = decodePaymentRequiredHeader(
      (await fetch(`${service.url}/m/${ids.translate}`)).headers.get('payment-required')!,
    )
    expect(required.extensions?.bazaar).toBeUndefined()
    const list = await (await fetch(`${service.url}/discovery/resources?limit=19`)).json()
    expect(list.pagination.total).toBe(2)
  })

  it('counts the paid calls of listed endpoints only: an unlisted one pays nothing for discovery', async () => {
    const call = async () => {
      const hash = await payUsdc(payer, service.treasury.address, 10_000n)
      const r = await fetch(`${service.url}/m/${ids.hidden}`, { headers: { 'x-payment': hash } })
      await r.arrayBuffer()
      expect(r.status).toBe(200)
    }
    const observed = async (limit: number) => {
      await service.flushCaptures()
      const body = await (await fetch(`${service.url}/discovery/resources?limit=${limit}`)).json()
      return body.items.find((i: { resource: string }) => i.resource.endsWith(`/m/${ids.hidden}`)).observed
    }
    await call()
    const listed = async (on: boolean) =>
      expect(
        (await service.api(`/api/v1/endpoints/${ids.hidden}`, { key, method: 'PATCH', body: { listed: on } }))
          .status,
      ).toBe(200)
    await listed(true)
    try {
      // Its calls before it was listed (this one and the receipt test's) were never counted.
      expect((await observed(17)).paid_calls).toBe(0)
      await call()
      expect((await observed(16)).paid_calls).toBe(1)
    } finally {
      await listed(false)
    }
  })
})
