// x-request-id on every answer of every route family, request_id in every error body, and the one log line
// an upstream failure leaves (read from the service's real pino output).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { refusedPort } from '../helpers/child-service.ts'
import { type CapturedLogs, captureLogs } from '../helpers/log-capture.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

let svc: TestService
let upstream: Upstream
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>
let logs: CapturedLogs

beforeAll(async () => {
  logs = captureLogs({ level: 'info', access: 'all' })
  svc = await startTestService({ logger: logs.logger, overrides: { verify: { wait_ms: 1500 } } })
  upstream = await startUpstream()
  payer = await fundedAccount(10_000_000n)
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

const GENERATED = /^req_[0-9a-f]{12}[0-9a-z]{6,}$/

/** The header is there, and an error body carries the same id. */
async function expectIdentified(r: Response, options: { errorBody?: boolean } = {}) {
  const id = r.headers.get('x-request-id')
  expect(id, `${r.status} ${r.url}`).toBeTruthy()
  const text = await r.text()
  if (options.errorBody) {
    const body = JSON.parse(text)
    expect(body.request_id).toBe(id)
    if (r.status !== 402) {
      expect(body.error).toMatchObject({ code: expect.any(String), type: expect.any(String) })
      expect(body.error.message).toEqual(expect.any(String))
    }
  }
  return { id: id!, text }
}

async function createEndpoint(upstreamUrl: string) {
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: upstreamUrl, price: 0.01 },
  })
  expect(r.status).toBe(201)
  return r.body as { id: string; metered_url: string }
}

describe('API routes', () => {
  it('answers successes and errors with x-request-id; errors carry it as request_id', async () => {
    await expectIdentified(
      await fetch(`${svc.url}/api/v1/account`, { headers: { authorization: `Bearer ${merchant.key}` } }),
    )
    await expectIdentified(await fetch(`${svc.url}/api/v1/account`), { errorBody: true })
    await expectIdentified(await fetch(`${svc.url}/api/v1/nowhere`), { errorBody: true })
    await expectIdentified(
      await fetch(`${svc.url}/api/v1/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: 'x'.repeat(2 * 1024 * 1024),
      }),
      { errorBody: true },
    )
    await expectIdentified(await fetch(`${svc.url}/not-a-route`), { errorBody: true })
    await expectIdentified(await fetch(`${svc.url}/`))
  })

  it("takes the caller's sane x-request-id and replaces one that is not", async () => {
    const own = await fetch(`${svc.url}/api/v1/account`, { headers: { 'x-request-id': 'trace-me.42' } })
    expect(own.headers.get('x-request-id')).toBe('trace-me.42')
    expect((await own.json()).request_id).toBe('trace-me.42')
    for (const bad of ['has space', 'quote"inside', 'x'.repeat(129)]) {
      const r = await fetch(`${svc.url}/api/v1/account`, { headers: { 'x-request-id': bad } })
      expect(r.headers.get('x-request-id')).toMatch(GENERATED)
      expect((await r.json()).request_id).toBe(r.headers.get('x-request-id'))
    }
  })
})

describe('metered routes', () => {
  it('402 and 404 carry the header and request_id in the body', async () => {
    const ep = await createEndpoint(`${upstream.url}/echo`)
    const challenge = await expectIdentified(await fetch(ep.metered_url), { errorBody: true })
    expect(JSON.parse(challenge.text).error).toBe('payment_required')
    const notFound = await expectIdentified(await fetch(`${svc.url}/m/ep_nope`), { errorBody: true })
    expect(JSON.parse(notFound.text).error.code).toBe('endpoint_not_found')
  })

  it('a proxied 2xx carries the header, and the upstream received the same id', async () => {
    const ep = await createEndpoint(`${upstream.url}/echo`)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash, 'x-request-id': 'client-id-1' } })
    expect(r.status).toBe(200)
    expect(r.headers.get('x-request-id')).toBe('client-id-1')
    expect(upstream.last()!.headers['x-request-id']).toBe('client-id-1')
  })

  it('502 upstream_unreachable carries the id and is logged once with request id, endpoint id and reason', async () => {
    const closed = await refusedPort()
    const ep = await createEndpoint(`http://127.0.0.1:${closed}/gone`)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(502)
    const { id, text } = await expectIdentified(r, { errorBody: true })
    expect(JSON.parse(text).error.code).toBe('upstream_unreachable')
    const line = await logs.waitFor((l) => l.request_id === id)
    expect(line).toMatchObject({
      level: 'error',
      msg: 'metered call failed',
      request_id: id,
      endpoint_id: ep.id,
      status: 502,
      reason: 'upstream_unreachable',
    })
    expect(logs.lines.filter((l) => l.request_id === id)).toHaveLength(1)
  })
})

describe('access log (log.access = all)', () => {
  it('writes one line per metered and checkout answer with the request id', async () => {
    const ep = await createEndpoint(`${upstream.url}/echo`)
    const r = await fetch(ep.metered_url, { headers: { 'x-request-id': 'access-1' } })
    expect(r.status).toBe(402)
    const line = await logs.waitFor((l) => l.msg === 'access' && l.request_id === 'access-1')
    expect(line).toMatchObject({
      level: 'info',
      route: 'metered',
      endpoint_id: ep.id,
      status: 402,
      reason: 'payment_required',
    })
    expect(line.duration_ms).toEqual(expect.any(Number))
    await fetch(`${svc.url}/pay/pay_nothere/status`, { headers: { 'x-request-id': 'access-2' } })
    expect(await logs.waitFor((l) => l.msg === 'access' && l.request_id === 'access-2')).toMatchObject({
      route: 'checkout',
      payment_id: 'pay_nothere',
      status: 404,
    })
  })
})

describe('checkout routes', () => {
  it('page, status, agent POST and errors all carry the id', async () => {
    const created = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 1.5, description: 'Widget' },
    })
    expect(created.status).toBe(201)
    const url = created.body.payment_url as string
    await expectIdentified(await fetch(url, { headers: { accept: 'text/html' } }))
    await expectIdentified(await fetch(`${url}/status`))
    const paid = await expectIdentified(
      await fetch(url, {
        method: 'POST',
        headers: { accept: 'application/json', 'x-payment': 'not-a-proof' },
      }),
      { errorBody: true },
    )
    expect(JSON.parse(paid.text).error).toBe('invalid_proof')
    const missing = await expectIdentified(await fetch(`${svc.url}/pay/pay_doesnotexist`), {
      errorBody: true,
    })
    expect(JSON.parse(missing.text).error.code).toBe('payment_not_found')
    const method = await expectIdentified(await fetch(url, { method: 'DELETE' }), { errorBody: true })
    expect(JSON.parse(method.text).error.code).toBe('method_not_allowed')
  })
})

describe('admin routes', () => {
  it('health, readiness, metrics and unknown paths carry the id', async () => {
    const admin = `http://127.0.0.1:${svc.adminPort}`
    await expectIdentified(await fetch(`${admin}/healthz`))
    await expectIdentified(await fetch(`${admin}/readyz`))
    await expectIdentified(await fetch(`${admin}/metrics`))
    const missing = await expectIdentified(await fetch(`${admin}/nope`), { errorBody: true })
    expect(JSON.parse(missing.text).error.code).toBe('route_not_found')
  })
})
