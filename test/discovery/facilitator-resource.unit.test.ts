// What the facilitator catalogs from a payload: the checks the published bazaar code applies, by hand.
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
