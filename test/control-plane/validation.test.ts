// What a 400 says: a missing field is "missing field X", an unknown one "unknown field X", a wrong type says
// what was expected; on register, payments, endpoints and webhooks, against a real service. Nothing is written.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
let key: string
const WALLET = '0x52908400098527886E0F7030069857D2E4169EE7'

beforeAll(async () => {
  svc = await startTestService({ overrides: { proxy: { allow_private_upstreams: true } } })
  key = (await registerMerchant(svc)).key
})
afterAll(async () => {
  await svc?.stop()
})

const cases: Array<[string, string, Record<string, unknown>, string, string]> = [
  // route, name, body, param, message
  ['/register', 'missing', { wallet_address: WALLET }, 'business_name', 'missing field business_name'],
  [
    '/register',
    'unknown',
    { wallet_address: WALLET, business_name: 'x', admin: true },
    'admin',
    'unknown field admin',
  ],
  [
    '/register',
    'wrong type',
    { wallet_address: 42, business_name: 'x' },
    'wallet_address',
    'wallet_address must be a string',
  ],
  ['/payments', 'missing', { amount: 1 }, 'description', 'missing field description'],
  ['/payments', 'missing amount', { description: 'x' }, 'amount', 'missing field amount'],
  [
    '/payments',
    'unknown',
    { amount: 1, description: 'x', currency: 'EUR' },
    'currency',
    'unknown field currency',
  ],
  [
    '/payments',
    'wrong type',
    { amount: true, description: 'x' },
    'amount',
    'amount must be a number or decimal string',
  ],
  [
    '/payments',
    'wrong type in a nested field',
    { amount: 1, description: 'x', metadata: { n: 1 } },
    'metadata.n',
    'metadata.n values must be strings',
  ],
  [
    '/payments',
    'out of range',
    { amount: 1, description: 'x', expires_in: 5 },
    'expires_in',
    'expires_in must be at least 60 seconds',
  ],
  ['/endpoints', 'missing', { price: 0.01 }, 'upstream_url', 'missing field upstream_url'],
  [
    '/endpoints',
    'unknown',
    { upstream_url: 'http://127.0.0.1:9/', price: 0.01, cost: 1 },
    'cost',
    'unknown field cost',
  ],
  [
    '/endpoints',
    'wrong type',
    { upstream_url: 'http://127.0.0.1:9/', price: [1] },
    'price',
    'price must be a number or decimal string',
  ],
  [
    '/endpoints',
    'default valibot message reworded',
    { upstream_url: 'http://127.0.0.1:9/', price: 0.01, timeout_ms: 5 },
    'timeout_ms',
    'timeout_ms must be at least 100',
  ],
  ['/webhooks', 'missing', { events: ['*'] }, 'url', 'missing field url'],
  ['/webhooks', 'unknown', { url: 'http://127.0.0.1:9/', secret: 'x' }, 'secret', 'unknown field secret'],
  ['/webhooks', 'wrong type', { url: 7 }, 'url', 'url must be a string'],
  [
    '/webhooks',
    'wrong element',
    { url: 'http://127.0.0.1:9/', events: ['payment.nope'] },
    'events.0',
    'events.0 each must be "*" or one of',
  ],
]

describe('validation messages', () => {
  it.each(cases)('POST %s, %s field: 400 naming it', async (route, _name, body, param, message) => {
    const before = await counts()
    const r = await svc.api(`/api/v1${route}`, { key: route === '/register' ? undefined : key, body })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({ code: 'invalid_parameter', param })
    expect(r.body.error.message).toContain(message)
    expect(r.body.request_id).toBe(r.headers.get('x-request-id'))
    expect(await counts()).toEqual(before)
  })

  it('a PATCH with a wrong type names the field and what it expects', async () => {
    const r = await svc.api('/api/v1/endpoints/ep_nope', {
      method: 'PATCH',
      key,
      body: { active: 'yes' },
    })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({ param: 'active', message: 'active must be true or false' })
  })
})

async function counts() {
  const [row] = await svc.sql<{ a: number; p: number; e: number; w: number }[]>`
    SELECT (SELECT count(*)::int FROM accounts) AS a, (SELECT count(*)::int FROM payments) AS p,
           (SELECT count(*)::int FROM endpoints) AS e, (SELECT count(*)::int FROM webhooks) AS w`
  return row
}
