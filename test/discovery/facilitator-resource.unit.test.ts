// What the facilitator catalogs from a payload: the checks the published bazaar code applies, by hand; a v1
// payment's requirements read as the published code reads them, checked against it.
import { extractDiscoveryInfo } from '@x402/extensions/bazaar'
import { describe, expect, it } from 'vitest'
import { facilitatorResourceOf } from '../../src/discovery/facilitator-resource.ts'

const accepted = { scheme: 'exact', network: 'eip155:8453', amount: '1000', asset: '0x1', payTo: '0x2' }
const info = { input: { type: 'http', method: 'GET', queryParams: { city: 'Lisbon' } } }
const payload = (
  over: Record<string, unknown> = {},
  bazaar: Record<string, unknown> = { info, schema: {} },
) => ({
  x402Version: 2,
  accepted,
  payload: {},
  resource: {
    url: 'https://shop.example/weather?city=Lisbon',
    description: 'weather',
    mimeType: 'application/json',
  },
  extensions: { bazaar, 'payment-identifier': { info: { id: 'secret-order-id' } } },
  ...over,
})

describe('facilitatorResourceOf', () => {
  it('keys by origin and path, echoes only the bazaar extension, prices by the accepted amount', () => {
    const r = facilitatorResourceOf(payload())!
    expect(r.url).toBe('https://shop.example/weather')
    expect(r.type).toBe('http')
    expect(r.extensions).toEqual({ bazaar: { info, schema: {} } })
    expect(r.priceAtomic).toBe(1000n)
    expect(r.accepted).toBe(accepted)
  })

  it('keys by a valid route template, never by one that climbs or names a scheme', () => {
    expect(facilitatorResourceOf(payload({}, { info, schema: {}, routeTemplate: '/users/:id' }))!.url).toBe(
      'https://shop.example/users/:id',
    )
    for (const t of ['/a/%2e%2e/b', '/x/..', 'users', '/a?b']) {
      expect(facilitatorResourceOf(payload({}, { info, schema: {}, routeTemplate: t }))!.url).toBe(
        'https://shop.example/weather',
      )
    }
  })

  it('lists nothing without a valid extension, a usable URL, or on v1', () => {
    expect(facilitatorResourceOf(payload({ extensions: {} }))).toBeNull()
    expect(facilitatorResourceOf(payload({}, { info: { input: { type: 'ftp' } } }))).toBeNull()
    expect(
      facilitatorResourceOf(payload({}, { info: { input: { type: 'http', method: 'POST' } } })),
    ).toBeNull()
    expect(facilitatorResourceOf(payload({}, { info: { input: { type: 'mcp', toolName: 'x' } } }))).toBeNull()
    expect(facilitatorResourceOf(payload({ resource: { url: 'ftp://shop.example/x' } }))).toBeNull()
    expect(facilitatorResourceOf(payload({ resource: { url: 'https://u:p@shop.example/x' } }))).toBeNull()
    expect(facilitatorResourceOf(payload({ x402Version: 1 }))).toBeNull()
    expect(facilitatorResourceOf(payload({ x402Version: 3 }))).toBeNull()
    expect(
      facilitatorResourceOf(payload({}, { info, schema: { $ref: 'https://evil.example/s' } })),
    ).toBeNull()
  })

  it('keeps service metadata only within the listing’s limits', () => {
    const r = facilitatorResourceOf(
      payload({
        resource: {
          url: 'https://shop.example/w',
          serviceName: 'x'.repeat(33),
          tags: ['ok', 7, 'a'.repeat(40)],
          iconUrl: 'http://127.0.0.1/icon.png',
        },
      }),
    )!
    expect([r.serviceName, r.tags, r.iconUrl, r.description]).toEqual([null, ['ok'], null, null])
  })
})

describe('facilitatorResourceOf, a v1 payment (outputSchema in its requirements)', () => {
  const v1Payload = { x402Version: 1, scheme: 'exact', network: 'base', payload: {} }
  const requirements = (input: Record<string, unknown> | null, over: Record<string, unknown> = {}) => ({
    scheme: 'exact',
    network: 'base',
    maxAmountRequired: '2500',
    resource: 'https://shop.example/v1/quote?symbol=ETH',
    description: 'a quote',
    mimeType: 'application/json',
    payTo: '0x2',
    maxTimeoutSeconds: 60,
    asset: '0x1',
    ...(input === null ? {} : { outputSchema: { input, output: { price: 1 } } }),
    ...over,
  })

  // The v1 spellings servers used, each read as the published catalog code reads it.
  const inputs: Record<string, unknown>[] = [
    { type: 'http', method: 'get', queryParams: { symbol: { type: 'string' } } },
    { type: 'http', method: 'DELETE', query_params: { id: 'x' }, headerFields: { 'x-key': 'k' } },
    { type: 'http', method: 'HEAD', params: { a: 1 }, headers: { h: 'v' } },
    { type: 'http', method: 'POST', bodyType: 'json', bodyFields: { text: { type: 'string' } } },
    { type: 'http', method: 'put', body_type: 'multipart/form-data', body_fields: { file: 'f' } },
    { type: 'http', method: 'PATCH', bodyType: 'text/plain', data: { t: 1 }, query: { q: 1 } },
    { type: 'http', method: 'POST', properties: { p: 1 }, header_fields: 'not an object', headers: { h: 1 } },
    { type: 'http', method: 'POST' },
  ]
  for (const input of inputs) {
    it(`reads ${JSON.stringify(input)} as the published code does`, () => {
      const req = requirements(input)
      const published = extractDiscoveryInfo(v1Payload as never, req as never)
      expect(published).not.toBeNull()
      const r = facilitatorResourceOf(v1Payload, req)!
      expect(r.url).toBe(published!.resourceUrl)
      expect(r.x402Version).toBe(1)
      expect(r.type).toBe('http')
      expect(r.extensions).toEqual(published!.extensions)
      expect(r.extensions.bazaar.info).toEqual(published!.discoveryInfo)
      expect([r.description, r.mimeType]).toEqual([published!.description, published!.mimeType])
      expect(r.accepted).toBe(req)
      expect(r.priceAtomic).toBe(2500n)
    })
  }

  it('lists nothing the published code does not, nor what the listing refuses', () => {
    const none = (req: unknown) => {
      expect(extractDiscoveryInfo(v1Payload as never, req as never)).toBeNull()
      expect(facilitatorResourceOf(v1Payload, req)).toBeNull()
    }
    none(requirements(null))
    none(requirements({ type: 'http', method: 'GET', discoverable: false }))
    none(requirements({ type: 'http' }))
    none(requirements({ type: 'mcp', method: 'GET' }))
    none(requirements({ type: 'http', method: 'OPTIONS' }))
    // Published, refused here: an amount that is not base units, a URL that is not http(s), an external ref.
    const ok = { type: 'http', method: 'GET' }
    expect(facilitatorResourceOf(v1Payload, requirements(ok, { maxAmountRequired: '1.5' }))).toBeNull()
    expect(
      facilitatorResourceOf(v1Payload, requirements(ok, { resource: 'ftp://shop.example/x' })),
    ).toBeNull()
    expect(
      facilitatorResourceOf(
        v1Payload,
        requirements({ ...ok, queryParams: { $ref: 'https://evil.example/s' } }),
      ),
    ).toBeNull()
    expect(facilitatorResourceOf(v1Payload, undefined)).toBeNull()
  })
})
