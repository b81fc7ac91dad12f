// MPP's discovery extension: GET /openapi.json, an OpenAPI 3.1 document with `x-payment-info` per payable
// operation, read with the published mppx discovery code (its document schema, its validator and its
// PaymentInfo reader, which turns either form into offers) and compared with each endpoint's live 402.
import { Challenge } from 'mppx'
import { DiscoveryDocument, PaymentInfo, ServiceInfo, validate } from 'mppx/discovery'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

const WEATHER = {
  method: 'GET',
  tags: ['Weather', 'data'],
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  output_schema: { properties: { temp_c: { type: 'number' } } },
}
const TRANSLATE = {
  method: 'POST',
  tags: ['Language Tools', 'data'],
  body_type: 'json',
  input_schema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
  input_example: { text: 'hello' },
}

describe('MPP discovery: /openapi.json', () => {
  let service: TestService
  let upstream: Upstream
  const ids: Record<string, string> = {}

  beforeAll(async () => {
    service = await startTestService({ overrides: { proxy: { allow_private_upstreams: true } } })
    upstream = await startUpstream()
    const { key } = await registerMerchant(service)
    for (const [name, body] of Object.entries({
      weather: { price: 0.01, listed: true, description: 'Weather by city', discovery: WEATHER },
      translate: { price: 0.05, listed: true, description: 'Translate text', discovery: TRANSLATE },
      hidden: { price: 0.01, discovery: WEATHER },
      x402Only: { price: 0.02, listed: true, protocols: ['x402'] },
      rules: {
        listed: true,
        pricing: { model: 'rules', rules: [{ path_prefix: '/big', price: 0.5 }], default_price: 0.01 },
      },
      mcp: {
        listed: true,
        kind: 'mcp',
        mcp: { tools: { weather: 0.01, forecast: 0.04 }, default_price: 0.003 },
      },
    })) {
      const r = await service.api('/api/v1/endpoints', {
        key,
        body: { upstream_url: `${upstream.url}/echo`, ...body },
      })
      expect(r.status, r.text).toBe(201)
      ids[name] = r.body.id
    }
  })
  afterAll(async () => {
    await service?.stop()
    await upstream?.close()
  })

  async function document() {
    const r = await fetch(`${service.url}/openapi.json`)
    expect(r.status).toBe(200)
    expect(r.headers.get('content-type')).toMatch(/^application\/json/)
    expect(r.headers.get('access-control-allow-origin')).toBe('*')
    return (await r.json()) as Record<string, any>
  }

  it('is a discovery document mppx validates with no error, each payable operation with a 402', async () => {
    const doc = await document()
    expect(DiscoveryDocument.safeParse(doc).success).toBe(true)
    const issues = validate(doc)
    expect(issues.filter((i) => i.severity === 'error')).toEqual([])
    expect(doc.openapi).toBe('3.1.0')
    expect(doc.servers).toEqual([{ url: service.url }])
  })

  it('x-service-info: categories from the listed endpoints’ tags (most used first), /llms.txt as the docs', async () => {
    const doc = await document()
    const info = ServiceInfo.parse(doc['x-service-info'])
    // `hidden` (unlisted) carries the weather tags too: it counts for nothing.
    expect(info.categories).toEqual(['data', 'language-tools', 'weather'])
    expect(info.docs).toEqual({ llms: `${service.url}/llms.txt` })
  })

  it('GET /llms.txt lists the same operations in Markdown, with their prices, and the machine documents', async () => {
    const r = await fetch(`${service.url}/llms.txt`)
    expect(r.status).toBe(200)
    expect(r.headers.get('content-type')).toMatch(/^text\/markdown/)
    const text = await r.text()
    expect(text).toMatch(/^# Metered APIs at /)
    expect(text).toContain(`- [Weather by city](${service.url}/m/${ids.weather}): GET (10000 base units of `)
    expect(text).toContain(
      `- [Translate text](${service.url}/m/${ids.translate}): POST (50000 base units of `,
    )
    expect(text).toContain(`${service.url}/m/${ids.mcp}): POST JSON-RPC (MCP)`)
    expect(text).toContain(`${service.url}/m/${ids.rules}): GET (price: see the 402`)
    expect(text).not.toContain(ids.hidden!)
    expect(text).not.toContain(ids.x402Only!)
    expect(text).toContain(`(${service.url}/openapi.json)`)
  })

  it('lists the listed endpoints that take MPP, at their metered paths; not the unlisted nor the x402-only', async () => {
    const doc = await document()
    const paths = Object.keys(doc.paths)
    for (const name of ['weather', 'translate', 'rules', 'mcp']) expect(paths).toContain(`/m/${ids[name]}`)
    expect(paths).not.toContain(`/m/${ids.hidden}`)
    expect(paths).not.toContain(`/m/${ids.x402Only}`)
  })

  it("each offer is what the endpoint's live 402 challenges (method, intent, amount, currency)", async () => {
    const doc = await document()
    for (const [name, verb] of [
      ['weather', 'get'],
      ['translate', 'post'],
    ] as const) {
      const op = doc.paths[`/m/${ids[name]}`][verb]
      const { offers } = PaymentInfo.parse(op['x-payment-info'])
      const live = await fetch(`${service.url}/m/${ids[name]}`, { method: verb.toUpperCase() })
      expect(live.status).toBe(402)
      const challenge = Challenge.fromResponse(live)
      const request = challenge.request as { amount: string; currency: string }
      expect(offers).toEqual([
        {
          intent: challenge.intent,
          method: challenge.method,
          amount: request.amount,
          currency: request.currency,
        },
      ])
    }
  })

  it("says how to call each operation: the owner's query parameters or body, and its output", async () => {
    const doc = await document()
    const weather = doc.paths[`/m/${ids.weather}`].get
    expect(weather.summary).toBe('Weather by city')
    expect(weather.parameters).toEqual([
      { name: 'city', in: 'query', required: true, schema: { type: 'string' } },
    ])
    expect(weather.responses['200'].content['application/json'].schema).toEqual(WEATHER.output_schema)
    expect(weather.responses['402']).toBeDefined()
    const translate = doc.paths[`/m/${ids.translate}`].post
    expect(translate.requestBody.content['application/json'].schema).toEqual(TRANSLATE.input_schema)
  })

  it('a price that depends on the request is null, with a note; an MCP endpoint is one POST priced per tool', async () => {
    const doc = await document()
    const rules = PaymentInfo.parse(doc.paths[`/m/${ids.rules}`].get['x-payment-info']).offers[0]!
    expect(rules.amount).toBeNull()
    expect(rules.description).toMatch(/path and method/)
    const mcp = doc.paths[`/m/${ids.mcp}`].post
    const offer = PaymentInfo.parse(mcp['x-payment-info']).offers[0]!
    expect(offer).toMatchObject({ intent: 'charge', method: 'evm', amount: null })
    expect(offer.description).toMatch(/weather 10000/)
    expect(offer.description).toMatch(/forecast 40000/)
    expect(mcp.requestBody.content['application/json'].schema.required).toEqual(['jsonrpc', 'method'])
  })
})
