// The API contract cannot drift: the checked-in docs/openapi.json is what the routes generate and what the
// service serves; it passes the OpenAPI 3.1 structural lint (Redocly, through openapi-typescript) and ajv
// compiles every schema in it; and real answers of every operation in it (its success and one documented
// error each) validate against it, on a real service with a real chain, upstream and webhook receiver.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Ajv2020 } from 'ajv/dist/2020.js'
import formats from 'ajv-formats'
import openapiTS, { astToString } from 'openapi-typescript'
import tsc from 'typescript'
import type { Address } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OPENAPI_PATH, renderOpenApi } from '../../src/cli/openapi.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { callApi, registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

type Json = Record<string, any>
const doc: Json = JSON.parse(readFileSync(OPENAPI_PATH, 'utf8'))
const METHODS = ['get', 'post', 'patch', 'delete', 'put']

const ajv = new Ajv2020({ strict: false, allErrors: true })
formats.default(ajv)
ajv.addSchema(doc, 'openapi.json')

const pointer = (...parts: string[]) =>
  parts.map((p) => p.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')

/** The response object of an operation for a status, following a $ref into components/responses. */
function responseOf(path: string, method: string, status: number): { at: string; response: Json } | null {
  let response = doc.paths[path]?.[method]?.responses?.[status]
  let at = `#/${pointer('paths', path, method, 'responses', String(status))}`
  if (!response) return null
  if (response.$ref) {
    at = response.$ref
    response = response.$ref
      .slice(2)
      .split('/')
      .reduce((o: Json, k: string) => o[k.replaceAll('~1', '/').replaceAll('~0', '~')], doc)
  }
  return { at, response }
}

/** Operations seen answering: "get /api/v1/endpoints/{id}" → statuses. */
const seen = new Map<string, Set<number>>()

interface Call {
  method?: string
  key?: string
  body?: unknown
  headers?: Record<string, string>
}

/** Calls a route by its template and concrete path and validates the answer against the document. */
async function call(template: string, concrete: string, init: Call = {}) {
  const method = (init.method ?? (init.body !== undefined ? 'POST' : 'GET')).toLowerCase()
  const r = await callApi(svc.url, concrete, { ...init, method: method.toUpperCase() })
  const found = responseOf(template, method, r.status)
  expect(
    found,
    `${method} ${template} answered ${r.status}, which the document does not list: ${r.text}`,
  ).not.toBeNull()
  const type = (r.headers.get('content-type') ?? '').split(';')[0]!
  const content = found!.response.content as Json
  expect(Object.keys(content), `${method} ${template} ${r.status}: content type ${type}`).toContain(
    type in content ? type : '*/*',
  )
  if (type === 'application/json' && type in content) {
    const validate = ajv.compile({ $ref: `openapi.json${found!.at}/${pointer('content', type, 'schema')}` })
    if (!validate(r.body)) {
      throw new Error(
        `${method} ${template} ${r.status} does not match the document: ${ajv.errorsText(validate.errors)}\n${r.text}`,
      )
    }
  }
  if (template.startsWith('/api/v1')) expect(r.headers.get('x-request-id')).toBeTruthy()
  const op = `${method} ${template}`
  if (!seen.has(op)) seen.set(op, new Set())
  seen.get(op)!.add(r.status)
  return r
}

let svc: TestService
let upstream: Upstream
let receiver: WebhookReceiver
let payer: Funded
let key: string

beforeAll(async () => {
  ;[upstream, receiver, payer] = await Promise.all([
    startUpstream(),
    startWebhookReceiver(),
    fundedAccount(1_000_000_000n),
  ])
  svc = await startTestService({
    overrides: {
      proxy: { allow_private_upstreams: true },
      payouts: { interval_ms: 500, threshold_check_interval_ms: 500 },
      webhooks: { poll_interval_ms: 100 },
    } as never,
  })
  key = (await registerMerchant(svc)).key
})
afterAll(async () => {
  await svc?.stop()
  await Promise.all([upstream?.close(), receiver?.close()])
})

const pay = (atomic: bigint) => payUsdc(payer, svc.chain.treasury as Address, atomic)

describe('the OpenAPI document', () => {
  it('is what the routes generate, checked in and served unchanged', async () => {
    expect(readFileSync(OPENAPI_PATH, 'utf8'), 'docs/openapi.json is stale: run npm run openapi').toBe(
      renderOpenApi(),
    )
    const served = await call('/api/v1/openapi.json', '/api/v1/openapi.json')
    expect(served.body).toEqual(doc)
  })

  it('compiles: every schema under ajv 2020 with formats, every $ref resolves, operation ids unique', () => {
    expect(doc.openapi).toBe('3.1.0')
    for (const name of Object.keys(doc.components.schemas)) {
      expect(() => ajv.compile({ $ref: `openapi.json#/components/schemas/${name}` }), name).not.toThrow()
    }
    const ids = new Set<string>()
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      for (const method of METHODS.filter((m) => item[m])) {
        const op = item[method]
        expect(ids.has(op.operationId), op.operationId).toBe(false)
        ids.add(op.operationId)
        for (const status of Object.keys(op.responses)) {
          const { at, response } = responseOf(path, method, Number(status))!
          for (const type of Object.keys(response.content ?? {})) {
            expect(() =>
              ajv.compile({ $ref: `openapi.json${at}/${pointer('content', type, 'schema')}` }),
            ).not.toThrow()
          }
        }
        const body = op.requestBody?.content?.['application/json']?.schema
        if (body) expect(() => ajv.compile(body)).not.toThrow()
      }
    }
    // Every $ref in the document points at something.
    const refs = JSON.stringify(doc).match(/"\$ref":"#\/[^"]+"/g) ?? []
    for (const r of new Set(refs)) {
      const target = r
        .slice(10, -1)
        .split('/')
        .reduce((o: any, k: string) => o?.[k.replaceAll('~1', '/').replaceAll('~0', '~')], doc)
      expect(target, r).toBeDefined()
    }
  })

  it('passes the OpenAPI 3.1 lint and generates TypeScript types (openapi-typescript)', async () => {
    const ast = await openapiTS(structuredClone(doc) as never, { silent: true })
    const ts = astToString(ast)
    expect(ts).toContain('"/api/v1/endpoints/{id}"')
    expect(ts).toContain('Idempotency-Key')
    // docs/api.md's typed-client example compiles against these types (strict, as the project is compiled).
    const apiDoc = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'api.md'), 'utf8')
    const example = /```ts\n(import createClient from 'openapi-fetch'[\s\S]*?)```/.exec(apiDoc)?.[1]
    expect(example, 'docs/api.md shows a typed client').toBeDefined()
    mkdirSync(join(import.meta.dirname, '..', '..', '.data'), { recursive: true })
    const dir = mkdtempSync(join(import.meta.dirname, '..', '..', '.data', 'client-'))
    try {
      writeFileSync(join(dir, 'tollgate-api.d.ts'), ts)
      writeFileSync(join(dir, 'example.ts'), example!)
      // And a wrong call (a required field left out) does not.
      writeFileSync(join(dir, 'wrong.ts'), example!.replace(", description: 'Order #1'", ''))
      const check = (file: string) => {
        const program = tsc.createProgram([join(dir, file)], {
          module: tsc.ModuleKind.NodeNext,
          moduleResolution: tsc.ModuleResolutionKind.NodeNext,
          target: tsc.ScriptTarget.ES2023,
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          allowImportingTsExtensions: true,
          types: ['node'],
        })
        return tsc
          .getPreEmitDiagnostics(program)
          .map((d) => tsc.flattenDiagnosticMessageText(d.messageText, '\n'))
      }
      expect(check('example.ts')).toEqual([])
      expect(check('wrong.ts').join('\n')).toMatch(/description/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
    // The lint can fail: a document with a broken operation is refused.
    const broken = structuredClone(doc)
    broken.paths['/api/v1/account'].get.responses = 'none'
    await expect(openapiTS(broken as never, { silent: true })).rejects.toThrow()
  })
})

describe('real answers of every operation validate against it', () => {
  const ids: Record<string, string> = {}

  it('account and keys', async () => {
    const wallet = (await fundedAccount(0n)).address
    const reg = await call('/api/v1/register', '/api/v1/register', {
      body: { wallet_address: wallet, business_name: 'Contract Co' },
    })
    expect(reg.status).toBe(201)
    await call('/api/v1/register', '/api/v1/register', { body: { wallet_address: wallet } })
    expect((await call('/api/v1/account', '/api/v1/account', { key })).status).toBe(200)
    expect((await call('/api/v1/account', '/api/v1/account')).status).toBe(401)
    const roll = '/api/v1/account/api-keys/roll'
    expect((await call(roll, roll, { key: reg.body.api_key, body: { grace_period_ms: -1 } })).status).toBe(
      400,
    )
    expect((await call(roll, roll, { key: reg.body.api_key, body: {} })).status).toBe(201)
  })

  it('endpoints, a paid metered call, calls', async () => {
    const ep = await call('/api/v1/endpoints', '/api/v1/endpoints', {
      key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.05, name: 'contract' },
      headers: { 'idempotency-key': 'contract-ep-1' },
    })
    expect(ep.status).toBe(201)
    ids.ep = ep.body.id
    await call('/api/v1/endpoints', '/api/v1/endpoints', { key, body: { price: 1 } })
    expect((await call('/api/v1/endpoints', '/api/v1/endpoints?limit=2', { key })).body.data).toHaveLength(1)
    await call('/api/v1/endpoints', '/api/v1/endpoints?limit=0', { key })
    const one = '/api/v1/endpoints/{id}'
    await call(one, `/api/v1/endpoints/${ids.ep}`, { key })
    await call(one, '/api/v1/endpoints/ep_missing', { key })
    await call(one, `/api/v1/endpoints/${ids.ep}`, { key, method: 'PATCH', body: { name: 'renamed' } })
    await call(one, `/api/v1/endpoints/${ids.ep}`, { key, method: 'PATCH', body: { price: 'lots' } })
    const spare = await call('/api/v1/endpoints', '/api/v1/endpoints', {
      key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    expect((await call(one, `/api/v1/endpoints/${spare.body.id}`, { key, method: 'DELETE' })).status).toBe(
      200,
    )
    expect((await call(one, `/api/v1/endpoints/${spare.body.id}`, { key, method: 'DELETE' })).status).toBe(
      404,
    )

    // Listed before it is paid: discovery counts the paid calls of listed endpoints only.
    const listed = await call(one, `/api/v1/endpoints/${ids.ep}`, {
      key,
      method: 'PATCH',
      body: { listed: true, discovery: { service_name: 'Contract', tags: ['test'] } },
    })
    expect(listed.body.listed).toBe(true)
    const m = '/m/{endpoint_id}'
    expect((await call(m, `/m/${ids.ep}`)).status).toBe(402)
    expect((await call(m, '/m/ep_missing', { method: 'POST' })).status).toBe(404)
    const tx1 = await pay(50_000n)
    const served = await call(m, `/m/${ids.ep}`, { headers: { 'x-payment': tx1 } })
    expect(served.status).toBe(200)
    const tx2 = await pay(50_000n)
    expect(
      (await call(m, `/m/${ids.ep}`, { method: 'POST', headers: { 'x-payment': tx2 }, body: {} })).status,
    ).toBe(200)
    await svc.flushCaptures()
    const receipt = '/receipts/{receipt_id}'
    const receiptId = served.headers.get('x-receipt-id')
    expect((await call(receipt, `/receipts/${receiptId}`)).status).toBe(200)
    expect((await call(receipt, '/receipts/rcpt_unknown')).status).toBe(404)
    expect((await call(m, `/m/${ids.ep}`)).body.extensions.bazaar).toBeDefined()
    await svc.flushCaptures()
    const found = await call('/discovery/resources', '/discovery/resources?tag=test')
    expect(found.body.items[0].observed.paid_calls).toBe(2)
    await call('/discovery/resources', '/discovery/resources?limit=0')
    expect((await call('/.well-known/x402.json', '/.well-known/x402.json')).body.items).toHaveLength(1)
    // MPP's discovery document lists the same endpoint, as the schema says.
    expect(Object.keys((await call('/openapi.json', '/openapi.json')).body.paths)).toContain(`/m/${ids.ep}`)
    expect((await call('/llms.txt', '/llms.txt')).text).toContain(`/m/${ids.ep}`)
    const keys = '/.well-known/x402-receipt-keys.json'
    expect((await call(keys, keys)).body.current.kid).toMatch(/^did:pkh:eip155:1:0x/)
    const calls = await call('/api/v1/calls', `/api/v1/calls?endpoint_id=${ids.ep}`, { key })
    expect(calls.body.data).toHaveLength(2)
    // A pass of that endpoint, bought with a transaction hash; the same hash again buys no second one.
    await call(one, `/api/v1/endpoints/${ids.ep}`, {
      key,
      method: 'PATCH',
      body: { pass: { price: 0.05, calls: 3 } },
    })
    const passPath = '/pass/{endpoint_id}'
    expect((await call(passPath, `/pass/${ids.ep}`, { method: 'POST' })).status).toBe(402)
    expect((await call(passPath, '/pass/ep_missing', { method: 'POST' })).status).toBe(404)
    const tx3 = await pay(50_000n)
    const bought = await call(passPath, `/pass/${ids.ep}`, { method: 'POST', headers: { 'x-payment': tx3 } })
    expect(bought.status).toBe(201)
    expect(bought.body).toMatchObject({ object: 'pass', uses_left: 3 })
    const again = await call(passPath, `/pass/${ids.ep}`, { method: 'POST', headers: { 'x-payment': tx3 } })
    expect([200, 402]).toContain(again.status)
    await call('/api/v1/calls', '/api/v1/calls?endpoint_id=nope', { key })
  })

  it('webhooks (registered before the payment, so its event is delivered)', async () => {
    const hooks = '/api/v1/webhooks'
    const wh = await call(hooks, hooks, { key, body: { url: receiver.url } })
    expect(wh.status).toBe(201)
    ids.wh = wh.body.id
    await call(hooks, hooks, { key, body: { url: receiver.url, events: ['nope'] } })
    await call(hooks, hooks, { key })
    await call(hooks, `${hooks}?limit=101`, { key })
    const one = '/api/v1/webhooks/{id}'
    await call(one, `${hooks}/${ids.wh}`, { key })
    await call(one, `${hooks}/wh_missing`, { key })
    await call(one, `${hooks}/${ids.wh}`, { key, method: 'PATCH', body: { events: ['*'] } })
    await call(one, `${hooks}/wh_missing`, { key, method: 'PATCH', body: { events: ['*'] } })
    const rotate = '/api/v1/webhooks/{id}/rotate-secret'
    expect((await call(rotate, `${hooks}/${ids.wh}/rotate-secret`, { key, method: 'POST' })).status).toBe(200)
    await call(rotate, `${hooks}/wh_missing/rotate-secret`, { key, method: 'POST' })
    const spare = await call(hooks, hooks, { key, body: { url: receiver.url } })
    expect((await call(one, `${hooks}/${spare.body.id}`, { key, method: 'DELETE' })).status).toBe(200)
    await call(one, `${hooks}/${spare.body.id}`, { key, method: 'DELETE' })
  })

  it('payments and the checkout', async () => {
    const list = '/api/v1/payments'
    const p = await call(list, list, { key, body: { amount: 0.25, description: 'Contract test' } })
    expect(p.status).toBe(201)
    ids.pay = p.body.id
    await call(list, list, { key, body: { amount: 0.25 } })
    await call(list, `${list}?status=pending`, { key })
    await call(list, `${list}?status=lost`, { key })

    const page = '/pay/{payment_id}'
    const json = { accept: 'application/json' }
    expect((await call(page, `/pay/${ids.pay}`, { headers: json })).status).toBe(402)
    expect((await call(page, '/pay/pay_missing', { headers: json })).status).toBe(404)
    const qr = '/pay/{payment_id}/qr.svg'
    expect((await call(qr, `/pay/${ids.pay}/qr.svg`)).status).toBe(200)
    const tx = await pay(250_000n)
    const paid = await call(page, `/pay/${ids.pay}`, {
      method: 'POST',
      headers: { ...json, 'x-payment': tx },
    })
    expect(paid.status).toBe(200)
    expect((await call(page, `/pay/${ids.pay}`, { headers: json })).status).toBe(200)
    const late = await pay(10_000n)
    const refused = await call(page, `/pay/${ids.pay}`, {
      method: 'POST',
      headers: { ...json, 'x-payment': late },
    })
    expect(refused.status).toBe(409)
    expect((await call(qr, `/pay/${ids.pay}/qr.svg`)).status).toBe(410)
    const status = '/pay/{payment_id}/status'
    expect((await call(status, `/pay/${ids.pay}/status`)).body.status).toBe('paid')
    await call(status, '/pay/pay_missing/status')

    const one = '/api/v1/payments/{id}'
    expect((await call(one, `${list}/${ids.pay}`, { key })).body.timeline.length).toBeGreaterThan(0)
    await call(one, `${list}/pay_missing`, { key })
    const cancel = '/api/v1/payments/{id}/cancel'
    const other = await call(list, list, { key, body: { amount: 1, description: 'to cancel' } })
    expect((await call(cancel, `${list}/${other.body.id}/cancel`, { key, method: 'POST' })).status).toBe(200)
    expect((await call(cancel, `${list}/${other.body.id}/cancel`, { key, method: 'POST' })).status).toBe(409)
  })

  it('events, deliveries and redelivery', async () => {
    await receiver.waitFor((c) => c.body.includes('payment.received'), 20_000)
    const events = '/api/v1/events'
    const list = await call(events, `${events}?type=payment.received`, { key })
    expect(list.body.data.length).toBeGreaterThan(0)
    ids.evt = list.body.data[0].id
    await call(events, `${events}?type=nope`, { key })
    await call('/api/v1/events/{id}', `${events}/${ids.evt}`, { key })
    await call('/api/v1/events/{id}', `${events}/evt_missing`, { key })
    const redeliver = '/api/v1/events/{id}/redeliver'
    expect((await call(redeliver, `${events}/${ids.evt}/redeliver`, { key, method: 'POST' })).status).toBe(
      202,
    )
    await call(redeliver, `${events}/evt_missing/redeliver`, { key, method: 'POST' })
    const deliveries = '/api/v1/webhooks/{id}/deliveries'
    // Newest first: the redelivery just asked for may not be attempted yet, and the receiver can see the
    // first delivery before its attempt is written. Asked again until an attempt shows (bounded).
    let attempted = false
    for (let i = 0; i < 100 && !attempted; i++) {
      const d = await call(deliveries, `/api/v1/webhooks/${ids.wh}/deliveries`, { key })
      attempted = d.body.data.some((x: { attempts: unknown[] }) => x.attempts.length > 0)
      if (!attempted) await new Promise((r) => setTimeout(r, 100))
    }
    expect(attempted).toBe(true)
    await call(deliveries, '/api/v1/webhooks/wh_missing/deliveries', { key })
  })

  it('payouts, once the batcher has paid the owner', async () => {
    const payouts = '/api/v1/payouts'
    const list = await waitFor(
      async () => {
        const list = await call(payouts, payouts, { key })
        return list.body.data.length > 0 && list
      },
      { timeoutMs: 30_000, intervalMs: 250, what: 'a payout listed' },
    )
    await call(payouts, `${payouts}?status=lost`, { key })
    await call('/api/v1/payouts/{id}', `${payouts}/${list.body.data[0].id}`, { key })
    await call('/api/v1/payouts/{id}', `${payouts}/po_missing`, { key })
  })

  it('dashboard sessions and the revenue report', async () => {
    const sessions = '/api/v1/dashboard/sessions'
    const signIn = await call(sessions, sessions, { body: { api_key: key } })
    expect(signIn.status).toBe(201)
    expect((await call(sessions, sessions, { body: { api_key: 'sk_test_nope' } })).status).toBe(401)
    const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!
    const session = '/api/v1/dashboard/session'
    expect((await call(session, session, { headers: { cookie } })).status).toBe(200)
    expect((await call(session, session)).status).toBe(401)
    const csrf = signIn.body.csrf_token as string
    expect((await call(session, session, { method: 'DELETE', headers: { cookie } })).status).toBe(403)
    const out = await call(session, session, { method: 'DELETE', headers: { cookie, 'x-csrf-token': csrf } })
    expect(out.status).toBe(200)
    const revenue = '/api/v1/reports/revenue'
    const report = await call(revenue, `${revenue}?days=7`, { key })
    expect(report.body.days).toHaveLength(7)
    expect(report.body.top_endpoints[0].endpoint_id).toBe(ids.ep)
    await call(revenue, `${revenue}?days=0`, { key })
  })

  it('refunds', async () => {
    const refunds = '/api/v1/refunds'
    // One base unit: all of it is the fee's part, so it needs none of the (paid out) merchant balance.
    const r = await call(refunds, refunds, { key, body: { payment_id: ids.pay, amount: 0.000001 } })
    expect(r.status).toBe(201)
    expect((await call(refunds, refunds, { key, body: { payment_id: ids.pay, amount: 1 } })).status).toBe(400)
    await call(refunds, `${refunds}?payment_id=${ids.pay}`, { key })
    await call(refunds, `${refunds}?status=lost`, { key })
    await call('/api/v1/refunds/{id}', `${refunds}/${r.body.id}`, { key })
    await call('/api/v1/refunds/{id}', `${refunds}/re_missing`, { key })
  })

  it('the x402 facilitator and its settlements', async () => {
    const f = '/api/v1/facilitator'
    const supported = await call(`${f}/supported`, `${f}/supported`, { key })
    expect(supported.body.kinds.length).toBeGreaterThan(0)
    await call(`${f}/supported`, `${f}/supported`)
    // Terms of another network: the spec's answers (200), nothing claimed.
    const body = {
      x402Version: 1,
      paymentPayload: { x402Version: 1, scheme: 'exact', network: 'nowhere', payload: {} },
      paymentRequirements: {
        scheme: 'exact',
        network: 'nowhere',
        maxAmountRequired: '1000',
        asset: '0x0000000000000000000000000000000000000001',
        payTo: '0x0000000000000000000000000000000000000002',
      },
    }
    const verify = await call(`${f}/verify`, `${f}/verify`, { key, body })
    expect(verify.body).toMatchObject({ isValid: false, invalidReason: 'invalid_network' })
    await call(`${f}/verify`, `${f}/verify`, { key, body: { x402Version: 3 } })
    const settle = await call(`${f}/settle`, `${f}/settle`, { key, body })
    expect(settle.body).toMatchObject({ success: false, errorReason: 'invalid_network' })
    await call(`${f}/settle`, `${f}/settle`, { key, body: { x402Version: 1 } })
    await call('/api/v1/settlements', '/api/v1/settlements', { key })
    await call('/api/v1/settlements', '/api/v1/settlements?limit=0', { key })
  })

  it('covered every operation: its success and, where it documents one, an error', () => {
    const missing: string[] = []
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      for (const method of METHODS.filter((m) => item[m])) {
        const statuses = Object.keys(item[method].responses).map(Number)
        const got = seen.get(`${method} ${path}`) ?? new Set()
        if (![...got].some((s) => s < 400)) missing.push(`${method} ${path}: no success`)
        if (statuses.some((s) => s >= 400 && s < 500) && ![...got].some((s) => s >= 400 && s < 500))
          missing.push(`${method} ${path}: no error`)
      }
    }
    expect(missing).toEqual([])
  })
})
