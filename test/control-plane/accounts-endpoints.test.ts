import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
let key: string
let wallet: string

async function counts() {
  const [r] = await svc.sql<{ accounts: number; endpoints: number; keys: number }[]>`
    SELECT (SELECT count(*) FROM accounts)::int AS accounts, (SELECT count(*) FROM endpoints)::int AS endpoints,
           (SELECT count(*) FROM api_keys)::int AS keys`
  return r!
}

beforeAll(async () => {
  svc = await startTestService()
  ;({ key, wallet } = await registerMerchant(svc))
})
afterAll(() => svc?.stop())

describe('register and account', () => {
  it('registers a merchant and returns a test key once, stored only as a hash', async () => {
    const w = (await fundedAccount(0n)).address
    const r = await svc.api('/api/v1/register', { body: { wallet_address: w, business_name: '  Acme  ' } })
    expect(r.status).toBe(201)
    expect(r.headers.get('x-request-id')).toMatch(/^req_/)
    expect(r.body.api_key).toMatch(/^sk_test_[0-9A-Za-z]{30,}$/)
    expect(r.body.account).toMatchObject({
      object: 'account',
      wallet_address: w,
      business_name: 'Acme',
      livemode: false,
    })
    expect(r.body.account.id).toMatch(/^acct_/)
    const stored = await svc.sql`SELECT key_hash, hint FROM api_keys WHERE account_id = ${r.body.account.id}`
    expect(stored).toHaveLength(1)
    expect(JSON.stringify(stored)).not.toContain(r.body.api_key)
    const me = await svc.api('/api/v1/account', { key: r.body.api_key })
    expect(me.status).toBe(200)
    expect(me.body.id).toBe(r.body.account.id)
  })

  it('accepts an all-lowercase address and stores its checksummed form', async () => {
    const w = (await fundedAccount(0n)).address
    const r = await svc.api('/api/v1/register', {
      body: { wallet_address: w.toLowerCase(), business_name: 'x' },
    })
    expect(r.status).toBe(201)
    expect(r.body.account.wallet_address).toBe(w)
  })

  it.each([
    [
      'invalid address',
      { wallet_address: '0x1234', business_name: 'x' },
      400,
      'invalid_wallet_address',
      'wallet_address',
    ],
    // Flip the case of one letter of a valid checksummed address: the checksum no longer matches.
    [
      'bad checksum',
      {
        wallet_address: '0x52908400098527886E0F7030069857D2E4169EE7'.replace('E0F', 'e0F'),
        business_name: 'x',
      },
      400,
      'invalid_wallet_address',
      'wallet_address',
    ],
    [
      'empty name',
      { wallet_address: '0x52908400098527886E0F7030069857D2E4169EE7', business_name: '   ' },
      400,
      'invalid_parameter',
      'business_name',
    ],
    [
      'long name',
      { wallet_address: '0x52908400098527886E0F7030069857D2E4169EE7', business_name: 'x'.repeat(201) },
      400,
      'invalid_parameter',
      'business_name',
    ],
    ['wrong type', { wallet_address: 42, business_name: 'x' }, 400, 'invalid_parameter', 'wallet_address'],
    [
      'unknown field',
      { wallet_address: '0x52908400098527886E0F7030069857D2E4169EE7', business_name: 'x', admin: true },
      400,
      'invalid_parameter',
      'admin',
    ],
  ])('refuses %s and writes nothing', async (_name, body, status, code, param) => {
    const before = await counts()
    const r = await svc.api('/api/v1/register', { body })
    expect(r.status).toBe(status)
    expect(r.body.error).toMatchObject({ code, param })
    expect(r.body.request_id).toBe(r.headers.get('x-request-id'))
    expect(await counts()).toEqual(before)
  })

  it('refuses malformed JSON, a non-JSON content type, an empty body and a 2 MB body', async () => {
    const before = await counts()
    const bad = await svc.api('/api/v1/register', {
      rawBody: '{"wallet_address": ',
      headers: { 'content-type': 'application/json' },
    })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe('invalid_json')
    const form = await svc.api('/api/v1/register', {
      rawBody: 'wallet_address=0x1',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    })
    expect(form.status).toBe(415)
    expect(form.body.error.code).toBe('unsupported_media_type')
    const empty = await svc.api('/api/v1/register', { method: 'POST' })
    expect(empty.status).toBe(400)
    expect(empty.body.error.code).toBe('invalid_body')
    const array = await svc.api('/api/v1/register', { body: [1, 2] })
    expect(array.status).toBe(400)
    const huge = await svc
      .api('/api/v1/register', {
        rawBody: JSON.stringify({ wallet_address: wallet, business_name: 'x'.repeat(2 * 1024 * 1024) }),
        headers: { 'content-type': 'application/json' },
      })
      .catch((err) => ({ status: -1, body: null, err }))
    expect(huge.status).toBe(413)
    expect(huge.body.error.code).toBe('body_too_large')
    expect(await counts()).toEqual(before)
  })

  it('refuses a missing, malformed or unknown key with 401', async () => {
    const missing = await svc.api('/api/v1/account')
    expect(missing.status).toBe(401)
    expect(missing.body.error.code).toBe('missing_api_key')
    const wrong = await svc.api('/api/v1/account', { key: 'sk_test_0000000000000000000000000000000' })
    expect(wrong.status).toBe(401)
    expect(wrong.body.error.code).toBe('invalid_api_key')
    // The credential is not echoed. A word no request id can hold (ids are hex and base-32 digits: a check
    // for 'abc' failed once on req_6903567abc030000h8).
    const junk = await svc.api('/api/v1/account', { headers: { authorization: 'Basic not-echoed' } })
    expect(junk.status).toBe(401)
    expect(junk.text).not.toContain('not-echoed')
  })

  it('rolls the key: the new one works, the old one stops', async () => {
    const m = await registerMerchant(svc)
    const rolled = await svc.api('/api/v1/account/api-keys/roll', { key: m.key, method: 'POST' })
    expect(rolled.status).toBe(201)
    expect(rolled.body.api_key).not.toBe(m.key)
    expect((await svc.api('/api/v1/account', { key: m.key })).status).toBe(401)
    expect((await svc.api('/api/v1/account', { key: rolled.body.api_key })).status).toBe(200)
  })

  it('rolls the key with a grace period during which both work', async () => {
    const m = await registerMerchant(svc)
    const rolled = await svc.api('/api/v1/account/api-keys/roll', {
      key: m.key,
      body: { grace_period_ms: 60_000 },
    })
    expect(rolled.status).toBe(201)
    expect((await svc.api('/api/v1/account', { key: m.key })).status).toBe(200)
    expect((await svc.api('/api/v1/account', { key: rolled.body.api_key })).status).toBe(200)
  })

  it('a key remembered as valid still stops at the end of its grace period', async () => {
    // A TTL far longer than the grace: only the key's own expiry, as the database counted it, ends the entry.
    const long = await startTestService({ overrides: { caches: { api_keys_ttl_ms: 60_000 } } })
    try {
      const m = await registerMerchant(long)
      expect((await long.api('/api/v1/account', { key: m.key })).status).toBe(200)
      const rolled = await long.api('/api/v1/account/api-keys/roll', {
        key: m.key,
        body: { grace_period_ms: 1_000 },
      })
      expect(rolled.status).toBe(201)
      expect((await long.api('/api/v1/account', { key: m.key })).status).toBe(200)
      const graceEnds = Date.parse(rolled.body.previous_keys_expire_at)
      await new Promise((r) => setTimeout(r, Math.max(0, graceEnds - Date.now()) + 50))
      expect((await long.api('/api/v1/account', { key: m.key })).status).toBe(401)
      expect((await long.api('/api/v1/account', { key: rolled.body.api_key })).status).toBe(200)
    } finally {
      await long.stop()
    }
  })

  it('answers unknown routes and methods with JSON', async () => {
    const r = await svc.api('/api/v1/nope', { key })
    expect(r.status).toBe(404)
    expect(r.body.error.code).toBe('route_not_found')
    const m = await svc.api('/api/v1/register', { method: 'GET' })
    expect(m.status).toBe(405)
    const outside = await svc.api('/nothing-here')
    expect(outside.status).toBe(404)
    expect(outside.body.error.code).toBe('route_not_found')
  })
})

describe('endpoints', () => {
  it('creates an endpoint, reads it back, lists it, and masks injected secrets', async () => {
    const r = await svc.api('/api/v1/endpoints', {
      key,
      body: {
        upstream_url: 'http://127.0.0.1:9/v1/weather',
        price: 0.01,
        name: 'Weather',
        upstream_headers: { Authorization: 'Bearer upstream-secret-123456' },
      },
    })
    expect(r.status).toBe(201)
    expect(r.body).toMatchObject({
      object: 'endpoint',
      name: 'Weather',
      price: 0.01,
      price_atomic: '10000',
      currency: 'USDC',
      status: 'active',
      upstream_url: 'http://127.0.0.1:9/v1/weather',
    })
    expect(r.body.id).toMatch(/^ep_/)
    expect(r.body.metered_url).toBe(`${svc.url}/m/${r.body.id}`)
    expect(r.text).not.toContain('upstream-secret')
    expect(r.body.upstream_headers.Authorization).toBe('••••3456')
    const one = await svc.api(`/api/v1/endpoints/${r.body.id}`, { key })
    expect(one.status).toBe(200)
    expect(one.body).toEqual(r.body)
    const list = await svc.api('/api/v1/endpoints?limit=100', { key })
    expect(list.body.object).toBe('list')
    expect(list.body.data.map((e: { id: string }) => e.id)).toContain(r.body.id)
  })

  it('paginates with limit and starting_after', async () => {
    const m = await registerMerchant(svc)
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      const r = await svc.api('/api/v1/endpoints', {
        key: m.key,
        body: { upstream_url: 'http://127.0.0.1:9/', price: '0.5' },
      })
      ids.push(r.body.id)
    }
    const first = await svc.api('/api/v1/endpoints?limit=2', { key: m.key })
    expect(first.body.data).toHaveLength(2)
    expect(first.body.has_more).toBe(true)
    const seen = [...first.body.data]
    let cursor = first.body.data.at(-1).id
    for (;;) {
      const next = await svc.api(`/api/v1/endpoints?limit=2&starting_after=${cursor}`, { key: m.key })
      seen.push(...next.body.data)
      if (!next.body.has_more) break
      cursor = next.body.data.at(-1).id
    }
    expect(seen.map((e) => e.id).sort()).toEqual([...ids].sort())
    expect((await svc.api('/api/v1/endpoints?limit=0', { key: m.key })).status).toBe(400)
  })

  it('hides another account’s endpoint behind a 404', async () => {
    const other = await registerMerchant(svc)
    const created = await svc.api('/api/v1/endpoints', {
      key: other.key,
      body: { upstream_url: 'http://127.0.0.1:9/', price: 1 },
    })
    for (const method of ['GET', 'PATCH', 'DELETE']) {
      const r = await svc.api(`/api/v1/endpoints/${created.body.id}`, {
        key,
        method,
        ...(method === 'PATCH' ? { body: { price: 2 } } : {}),
      })
      expect(r.status, method).toBe(404)
      expect(r.body.error.code).toBe('not_found')
    }
    const still = await svc.api(`/api/v1/endpoints/${created.body.id}`, { key: other.key })
    expect(still.body.price).toBe(1)
  })

  it.each([
    [
      'a non-http scheme',
      { upstream_url: 'ftp://example.com/x', price: 1 },
      'invalid_upstream_url',
      'upstream_url',
    ],
    ['a zero price', { upstream_url: 'http://127.0.0.1:9/', price: 0 }, 'invalid_parameter', 'price'],
    [
      'seven decimals',
      { upstream_url: 'http://127.0.0.1:9/', price: '0.0000001' },
      'invalid_parameter',
      'price',
    ],
    ['a huge price', { upstream_url: 'http://127.0.0.1:9/', price: 1e9 }, 'invalid_parameter', 'price'],
    [
      'a price of the wrong type',
      { upstream_url: 'http://127.0.0.1:9/', price: [1] },
      'invalid_parameter',
      'price',
    ],
    [
      'an injected host header',
      { upstream_url: 'http://127.0.0.1:9/', price: 1, upstream_headers: { Host: 'x' } },
      'invalid_parameter',
      'upstream_headers',
    ],
    [
      'a header with CRLF',
      { upstream_url: 'http://127.0.0.1:9/', price: 1, upstream_headers: { 'X-Key': 'a\r\nb: c' } },
      'invalid_parameter',
      'upstream_headers',
    ],
  ])('refuses %s and writes nothing', async (_name, body, code, param) => {
    const before = await counts()
    const r = await svc.api('/api/v1/endpoints', { key, body })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({ code, param })
    expect(await counts()).toEqual(before)
  })

  it('changes price, target, headers and status, and deletes', async () => {
    const created = await svc.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: 'http://127.0.0.1:9/a', price: 1 },
    })
    const id = created.body.id
    const patched = await svc.api(`/api/v1/endpoints/${id}`, {
      key,
      method: 'PATCH',
      body: {
        price: '2.5',
        upstream_url: 'http://127.0.0.1:9/b',
        upstream_headers: { 'x-api-key': 'k' },
        active: false,
      },
    })
    expect(patched.status).toBe(200)
    expect(patched.body).toMatchObject({
      price: 2.5,
      price_atomic: '2500000',
      upstream_url: 'http://127.0.0.1:9/b',
      status: 'disabled',
    })
    const [row] = await svc.sql`SELECT quote_floor_atomic, quote_floor_until FROM endpoints WHERE id = ${id}`
    expect(row!.quote_floor_atomic).toBe(1_000_000n)
    const del = await svc.api(`/api/v1/endpoints/${id}`, { key, method: 'DELETE' })
    expect(del.body).toEqual({ id, object: 'endpoint', deleted: true })
    expect((await svc.api(`/api/v1/endpoints/${id}`, { key })).status).toBe(404)
  })

  it('settles before the answer by default, in any shape; stores each choice, refuses a bad one', async () => {
    const created = await svc.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: 'http://127.0.0.1:9/s', price: 0.01 },
    })
    // No choice made: the service default (settle before the answer), shown as such.
    expect(created.body.x402_settlement).toBe('before_answer')
    // No SETTLER_PRIVATE_KEY here: the settler slots derive from the treasury key, so it is accepted.
    const chosen = await svc.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: 'http://127.0.0.1:9/s', price: 0.01, x402_settlement: 'before_answer' },
    })
    expect(chosen.status).toBe(201)
    expect(chosen.body.x402_settlement).toBe('before_answer')
    const id = created.body.id
    const patch = (x402_settlement: unknown) =>
      svc.api(`/api/v1/endpoints/${id}`, { key, method: 'PATCH', body: { x402_settlement, name: 'changed' } })
    const before = await counts()
    const bad = await patch('sometime')
    expect(bad.status).toBe(400)
    expect(bad.body.error).toMatchObject({ code: 'invalid_parameter', param: 'x402_settlement' })
    expect(await counts()).toEqual(before)
    // The refusal changed nothing.
    const [row] = await svc.sql`SELECT name, x402_settlement, version FROM endpoints WHERE id = ${id}`
    expect(row).toMatchObject({ name: null, x402_settlement: null, version: 1 })
    // Settling after is an explicit choice, stored as the endpoint's own; null goes back to the default.
    const after = await patch('after')
    expect(after.status).toBe(200)
    expect(after.body.x402_settlement).toBe('after')
    expect((await svc.sql`SELECT x402_settlement FROM endpoints WHERE id = ${id}`)[0]).toEqual({
      x402_settlement: 'after',
    })
    expect((await patch(null)).body.x402_settlement).toBe('before_answer')
    expect((await svc.sql`SELECT x402_settlement FROM endpoints WHERE id = ${id}`)[0]).toEqual({
      x402_settlement: null,
    })
  })

  it('replays an idempotent create and refuses the key with another body', async () => {
    const body = { upstream_url: 'http://127.0.0.1:9/idem', price: 0.02 }
    const headers = { 'idempotency-key': `k-${Date.now()}` }
    const [a, b] = await Promise.all([
      svc.api('/api/v1/endpoints', { key, body, headers }),
      svc.api('/api/v1/endpoints', { key, body, headers }),
    ])
    expect(a.status).toBe(201)
    expect(b.status).toBe(201)
    expect(b.body.id).toBe(a.body.id)
    const rows = await svc.sql`SELECT id FROM endpoints WHERE upstream_url = 'http://127.0.0.1:9/idem'`
    expect(rows).toHaveLength(1)
    const conflict = await svc.api('/api/v1/endpoints', { key, body: { ...body, price: 0.03 }, headers })
    expect(conflict.status).toBe(409)
    expect(conflict.body.error.code).toBe('idempotency_key_reused')
  })
})

describe('SSRF guard on endpoint targets', () => {
  let strict: TestService
  beforeAll(async () => {
    strict = await startTestService({ overrides: { proxy: { allow_private_upstreams: false } } })
  })
  afterAll(() => strict?.stop())

  it.each([
    'http://127.0.0.1:8080/',
    'http://169.254.169.254/latest/meta-data',
    'http://10.0.0.5/',
    'http://localhost/',
    'http://[::1]/',
  ])('refuses %s without ALLOW_PRIVATE_UPSTREAMS', async (url) => {
    const m = await registerMerchant(strict)
    const r = await strict.api('/api/v1/endpoints', { key: m.key, body: { upstream_url: url, price: 1 } })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({ code: 'upstream_not_allowed', param: 'upstream_url' })
  })
})
