// OpenTelemetry: one paid call is one trace (verify, claim, upstream, capture) exported to a real OTLP/HTTP
// receiver, the upstream sees the traceparent, log lines carry the trace id; and with tracing unset a
// running service never loads an OpenTelemetry module.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { insertEvent } from '../../src/db/events.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { refusedPort, startChildService, tempDir } from '../helpers/child-service.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { type CapturedLogs, captureLogs } from '../helpers/log-capture.ts'
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import { callApi, registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'

let receiver: OtlpReceiver
let upstream: Upstream
let payer: Funded

beforeAll(async () => {
  receiver = await startOtlpReceiver()
  upstream = await startUpstream()
  payer = await fundedAccount(10_000_000n)
})
afterAll(async () => {
  await upstream?.close()
  await receiver?.close()
})

function inTrace(traceId: string) {
  return receiver.spans.filter((s) => s.traceId === traceId)
}

describe('tracing on', () => {
  let svc: TestService
  let logs: CapturedLogs
  let merchant: Awaited<ReturnType<typeof registerMerchant>>
  beforeAll(async () => {
    logs = captureLogs({ level: 'warn' })
    svc = await startTestService({
      logger: logs.logger,
      overrides: {
        verify: { wait_ms: 1500 },
        tracing: { otlp_endpoint: receiver.url, export_interval_ms: 100 },
      },
    })
    merchant = await registerMerchant(svc)
  })
  afterAll(() => svc?.stop())

  async function endpointTo(upstreamUrl: string) {
    const r = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: upstreamUrl, price: 0.01 },
    })
    expect(r.status).toBe(201)
    return r.body as { id: string; metered_url: string }
  }

  it('one paid call is one trace with verify, claim, upstream and capture; the upstream got its traceparent', async () => {
    const ep = await endpointTo(`${upstream.url}/echo`)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(200)
    const root = () =>
      receiver.spans.find((s) => s.name === 'metered call' && s.attributes['tollgate.endpoint_id'] === ep.id)
    await receiver.waitFor(() => {
      const call = root()
      return call !== undefined && inTrace(call.traceId).length >= 5
    })
    const call = root()!
    expect(call.parentSpanId).toBe('')
    expect(call.service).toBe('tollgate')
    expect(call.attributes['http.response.status_code']).toBe(200)
    const trace = inTrace(call.traceId)
    const byName = new Map<string, ReceivedSpan>(trace.map((s) => [s.name, s]))
    for (const step of ['verify', 'claim', 'upstream', 'capture']) {
      expect(byName.get(step), step).toBeDefined()
      expect(byName.get(step)!.parentSpanId, step).toBe(call.spanId)
    }
    expect(trace.filter((s) => s.parentSpanId === '')).toHaveLength(1)
    expect(receiver.contentTypes.every((t) => t.startsWith('application/json'))).toBe(true)
    // The upstream's parent is tollgate's upstream span, in the same trace.
    const upstreamSpan = byName.get('upstream')!
    expect(upstream.last()!.headers.traceparent).toBe(`00-${call.traceId}-${upstreamSpan.spanId}-01`)
  })

  it("continues a caller's traceparent on an API request", async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
    const parent = '00f067aa0ba902b7'
    const r = await svc.api('/api/v1/account', {
      key: merchant.key,
      headers: { traceparent: `00-${traceId}-${parent}-01` },
    })
    expect(r.status).toBe(200)
    await receiver.waitFor(() => inTrace(traceId).length > 0)
    expect(inTrace(traceId)[0]).toMatchObject({ name: 'GET /api/v1', parentSpanId: parent })
  })

  it('the log line of an upstream failure carries the trace id of its call', async () => {
    const ep = await endpointTo(`http://127.0.0.1:${await refusedPort()}/gone`)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const r = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(r.status).toBe(502)
    const line = await logs.waitFor((l) => l.endpoint_id === ep.id)
    expect(line.trace_id).toMatch(/^[0-9a-f]{32}$/)
    await receiver.waitFor(() => inTrace(line.trace_id).some((s) => s.name === 'metered call'))
    const call = inTrace(line.trace_id).find((s) => s.name === 'metered call')!
    expect(call.attributes['http.response.status_code']).toBe(502)
    expect(inTrace(line.trace_id).find((s) => s.name === 'upstream')!.attributes['tollgate.reason']).toBe(
      'upstream_unreachable',
    )
  })

  it('a background job run is a span of its own', async () => {
    await svc.jobs.runNow('claim-expiry')
    await receiver.waitFor((spans) => spans.some((s) => s.name === 'job claim-expiry'))
    const job = receiver.spans.find((s) => s.name === 'job claim-expiry')!
    expect(job).toMatchObject({ parentSpanId: '', attributes: { 'tollgate.job': 'claim-expiry' } })
  })

  it('a webhook receiver gets the traceparent of its delivery span', async () => {
    const hooks = await startWebhookReceiver()
    try {
      const created = await svc.api('/api/v1/webhooks', { key: merchant.key, body: { url: hooks.url } })
      expect(created.status).toBe(201)
      const eventId = await insertEvent(svc.sql, {
        accountId: merchant.account.id,
        type: 'payment.received',
        data: {},
      })
      const got = await hooks.waitFor((c) => c.headers['webhook-id'] === eventId, 15_000)
      const [, traceId, spanId] = got.headers.traceparent!.split('-')
      await receiver.waitFor(() => inTrace(traceId!).length > 0)
      expect(inTrace(traceId!)[0]).toMatchObject({
        name: 'webhook delivery',
        spanId,
        attributes: { 'tollgate.event_id': eventId, 'http.response.status_code': 200 },
      })
    } finally {
      await hooks.close()
    }
  })
})

describe('which modules a running service loads', () => {
  const PRELOAD = join(import.meta.dirname, '..', 'helpers', 'module-log.mjs')

  /** Starts tollgate as a child with the module recorder, exercises API and metered routes, stops it. */
  // A child started through the module-load hook (every import passes the hook's thread and is written to
  // the log) and, in the embedded pass, on an embedded database of its own: 10-11 s on a quiet machine,
  // 49 s and over 60 (the suite's timeout) in a CI run beside the server pass on a machine half as quick.
  const MODULE_LOG_TIMEOUT_MS = 180_000

  async function modulesLoaded(env: Record<string, string>): Promise<string[]> {
    const log = join(tempDir(), 'modules.log')
    const treasury = await fundedAccount(0n)
    const child = await startChildService({
      databaseUrl: await freshDatabaseUrl(),
      treasuryKey: treasury.privateKey,
      env: {
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${PRELOAD}`.trim(),
        TOLLGATE_MODULE_LOG: log,
        ...env,
      },
    })
    try {
      const reg = await callApi(child.url, '/api/v1/register', {
        body: { wallet_address: treasury.address, business_name: 'Modules' },
      })
      expect(reg.status).toBe(201)
      const ep = await callApi(child.url, '/api/v1/endpoints', {
        key: reg.body.api_key,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
      })
      expect(ep.status).toBe(201)
      expect((await fetch(ep.body.metered_url)).status).toBe(402)
    } finally {
      await child.kill('SIGTERM')
    }
    return readFileSync(log, 'utf8').split('\n').filter(Boolean)
  }

  it(
    'with tracing unset, no OpenTelemetry SDK module is loaded (and the recorder sees ESM and CommonJS)',
    async () => {
      // The child inherits this environment: it must not name a collector.
      expect(process.env.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined()
      const loaded = await modulesLoaded({})
      // prom-client itself requires @opentelemetry/api (the no-op API facade, for exemplars): only the SDK,
      // the exporter, the context manager and their helpers are tollgate's to keep out.
      const otel = loaded.filter((m) => m.includes('/@opentelemetry/'))
      expect(otel.filter((m) => !m.includes('/@opentelemetry/api/'))).toEqual([])
      // The recorder works: it saw an ESM package and the CommonJS files pino requires.
      expect(loaded.some((m) => m.startsWith('esm ') && m.includes('/node_modules/viem/'))).toBe(true)
      expect(loaded.some((m) => m.startsWith('cjs ') && m.includes('/node_modules/sonic-boom/'))).toBe(true)
    },
    MODULE_LOG_TIMEOUT_MS,
  )

  it(
    'with OTEL_EXPORTER_OTLP_ENDPOINT set, the SDK and the exporter are loaded',
    async () => {
      const loaded = await modulesLoaded({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url })
      expect(loaded.some((m) => m.includes('/@opentelemetry/sdk-trace/'))).toBe(true)
      expect(loaded.some((m) => m.includes('/@opentelemetry/exporter-trace-otlp-http/'))).toBe(true)
    },
    MODULE_LOG_TIMEOUT_MS,
  )
})
