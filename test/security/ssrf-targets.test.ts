// Upstream and webhook URLs naming an IPv6 address that embeds an IPv4 one (mapped, translated, 6to4, Teredo,
// NAT64) or lies in another special-purpose range are refused by the API with 400 and nothing stored.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

const FORMS: Array<[string, string]> = [
  ['[::ffff:0:7f00:1]', 'IPv4-translated 127.0.0.1'],
  ['[::ffff:7f00:1]', 'IPv4-mapped 127.0.0.1'],
  ['[::ffff:169.254.169.254]', 'IPv4-mapped metadata address'],
  ['[2002:7f00:1::1]', '6to4 of 127.0.0.1'],
  ['[2001::1]', 'Teredo'],
  ['[64:ff9b::7f00:1]', 'NAT64 of 127.0.0.1'],
  ['[64:ff9b::169.254.169.254]', 'NAT64 of the metadata address'],
  ['[64:ff9b:1::a00:1]', 'local-use NAT64'],
  ['[100::1]', 'discard-only'],
  ['[2001:2::1]', 'benchmarking'],
  ['[2001:db8::1]', 'documentation'],
  ['[3fff::1]', 'documentation 3fff::/20'],
  ['[5f00::1]', 'segment routing'],
  ['[fec0::1]', 'site-local'],
  ['[fd00::1]', 'unique local'],
  ['[::]', 'unspecified'],
]

describe('SSRF: special-purpose IPv6 targets', () => {
  let strict: TestService
  let key: string
  beforeAll(async () => {
    strict = await startTestService({ overrides: { proxy: { allow_private_upstreams: false } } })
    key = (await registerMerchant(strict)).key
  })
  afterAll(() => strict?.stop())

  it.each(FORMS)('upstream_url http://%s (%s) is refused', async (host) => {
    const r = await strict.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: `http://${host}:8080/v1`, price: 1 },
    })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({ code: 'upstream_not_allowed', param: 'upstream_url' })
  })

  it.each(FORMS)('webhook url https://%s (%s) is refused', async (host) => {
    const r = await strict.api('/api/v1/webhooks', { key, body: { url: `https://${host}/hook` } })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({ code: 'invalid_webhook_url', param: 'url' })
  })

  it('an endpoint moved onto such a target is refused too, and nothing was stored', async () => {
    const ok = await strict.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: 'https://[2606:4700:4700::1111]/v1', price: 1 },
    })
    expect(ok.status).toBe(201)
    const moved = await strict.api(`/api/v1/endpoints/${ok.body.id}`, {
      key,
      method: 'PATCH',
      body: { upstream_url: 'http://[2002:7f00:1::1]/v1' },
    })
    expect(moved.status).toBe(400)
    expect(moved.body.error.code).toBe('upstream_not_allowed')
    const list = await strict.api('/api/v1/endpoints', { key })
    expect(list.body.data.map((e: { upstream_url: string }) => e.upstream_url)).toEqual([
      'https://[2606:4700:4700::1111]/v1',
    ])
    const hooks = await strict.api('/api/v1/webhooks', { key })
    expect(hooks.body.data).toEqual([])
  })
})
