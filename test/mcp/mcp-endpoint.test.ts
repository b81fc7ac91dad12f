// An endpoint of kind "mcp" in front of an unchanged MCP server (the published SDK's, Streamable HTTP, SSE
// and JSON answers) and the SDK's own client through tollgate: protocol methods and free tools pass free,
// each paid tool charges its own price (fixed, or its answer's bytes), the server sees each paid call once
// and never an unpaid one; bodies that are not JSON-RPC, batches holding a tools/call and bodies over the
// bound are refused with nothing forwarded; the management API names the field at fault.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registry } from '../../src/observability/metrics.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { type McpUpstream, startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>
const upstreams: McpUpstream[] = []

const WEATHER_ATOMIC = 10_000n
const DEFAULT_ATOMIC = 3_000n
const REPORT_CEILING = 50_000n
const MCP = {
  tools: {
    weather: 0.01,
    // $1 per MB of answer: one base unit per byte delivered.
    report: { model: 'usage', unit: 'response_bytes', max_price: 0.05, price_per_mb: 1 },
  },
  default_price: 0.003,
  free_tools: ['echo'],
}

async function mcpEndpoint(upstream: McpUpstream, mcp: Record<string, unknown> = MCP) {
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: upstream.url, kind: 'mcp', mcp },
  })
  if (r.status !== 201) throw new Error(`create endpoint: ${r.status} ${r.text}`)
  return r.body as { id: string; metered_url: string; kind: string; mcp: Record<string, unknown> }
}

async function mcpUpstream(json = false) {
  const u = await startMcpUpstream({ json })
  upstreams.push(u)
  return u
}

interface Paid {
  tool: string | null
  hash: string
  bytes: number
}

/** The SDK client's fetch: on a 402 it pays the quoted price by USDC transfer and sends the hash. */
function payingFetch(paid: Paid[]): typeof fetch {
  return async (input, init) => {
    const first = await fetch(input, init)
    if (first.status !== 402) return first
    const challenge = (await first.json()) as { price_atomic: string }
    const hash = await payUsdc(payer, svc.chain.treasury, BigInt(challenge.price_atomic))
    const headers = new Headers(init?.headers)
    headers.set('x-payment', hash)
    const answer = await fetch(input, { ...init, headers })
    // Read whole to know the bytes delivered (a usage-priced tool is charged for them).
    const body = Buffer.from(await answer.arrayBuffer())
    const sent = JSON.parse(String(init?.body)) as { params?: { name?: string } }
    paid.push({ tool: sent.params?.name ?? null, hash, bytes: body.length })
    return new Response(body, {
      status: answer.status,
      statusText: answer.statusText,
      headers: answer.headers,
    })
  }
}

async function callRow(hash: string) {
  await svc.flushCaptures()
  const [row] = await svc.sql<
    { amount_atomic: bigint; tool: string | null; pricing_model: string; refund_atomic: bigint }[]
  >`SELECT amount_atomic, tool, pricing_model, refund_atomic FROM calls
    WHERE call_proof_key(proof_key, proof) = ${`tx:${hash.toLowerCase()}`}`
  return row
}

async function rpc(url: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
  return { status: r.status, headers: r.headers, text: await r.text() }
}

beforeAll(async () => {
  svc = await startTestService({ overrides: { proxy: { allow_private_upstreams: true } } })
  payer = await fundedAccount(100_000_000n)
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await svc?.stop()
  for (const u of upstreams) await u.close()
})

describe.each([
  ['SSE', false],
  ['JSON', true],
])('the SDK client through tollgate to the SDK server (%s answers)', (_mode, json) => {
  it('lists free, calls the free tool free, pays each paid tool its own price, the server serves each once', async () => {
    const upstream = await mcpUpstream(json)
    const ep = await mcpEndpoint(upstream)
    expect(ep.kind).toBe('mcp')
    const paid: Paid[] = []
    const transport = new StreamableHTTPClientTransport(new URL(ep.metered_url), { fetch: payingFetch(paid) })
    const client = new Client({ name: 'tollgate-test-client', version: '1.0.0' })
    await client.connect(transport)
    // The session the server gave passed through tollgate both ways.
    expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/)

    const tools = await client.listTools()
    expect(tools.tools.map((t) => t.name).sort()).toEqual(['echo', 'report', 'weather'])
    // Each tool's price in its _meta, its schema as the server gave it.
    const byName = Object.fromEntries(tools.tools.map((t) => [t.name, t]))
    expect(byName.echo!._meta).toEqual({ 'tollgate/price': { free: true } })
    expect(byName.weather!._meta).toEqual({
      'tollgate/price': { free: false, price: 0.01, amount_atomic: '10000' },
    })
    expect(byName.report!._meta?.['tollgate/price']).toMatchObject({
      free: false,
      model: 'usage',
      unit: 'response_bytes',
      max_price: 0.05,
      amount_atomic: '50000',
    })
    expect(byName.weather!.inputSchema).toMatchObject({ properties: { city: { type: 'string' } } })
    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hi' } })
    expect(echo.content).toEqual([{ type: 'text', text: 'hi' }])
    expect(paid).toHaveLength(0)

    const weather = await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })
    expect(weather.content).toEqual([{ type: 'text', text: 'sunny in Lyon' }])
    const report = await client.callTool({ name: 'report', arguments: {} })
    expect((report.content as Array<{ text: string }>)[0]!.text).toHaveLength(5_000)
    await client.close()

    expect(paid.map((p) => p.tool)).toEqual(['weather', 'report'])
    const weatherRow = await callRow(paid[0]!.hash)
    expect(weatherRow).toMatchObject({
      amount_atomic: WEATHER_ATOMIC,
      tool: 'weather',
      pricing_model: 'fixed',
    })
    const reportRow = await callRow(paid[1]!.hash)
    // One base unit per byte delivered; the rest of the prepaid ceiling goes back to the payer.
    const bytes = BigInt(paid[1]!.bytes)
    expect(bytes).toBeGreaterThan(5_000n)
    expect(reportRow).toMatchObject({
      amount_atomic: bytes,
      tool: 'report',
      pricing_model: 'usage',
      refund_atomic: REPORT_CEILING - bytes,
    })
    expect(Object.fromEntries(upstream.served)).toEqual({ echo: 1, weather: 1, report: 1 })
    expect([...upstream.sessionsSeen]).toEqual([transport.sessionId])
  })

  it('an unpaid call of a paid tool is refused with its price and never reaches the server', async () => {
    const upstream = await mcpUpstream(json)
    const ep = await mcpEndpoint(upstream)
    const client = new Client({ name: 'unpaid', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(ep.metered_url)))
    await expect(client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })).rejects.toThrow(/402/)
    await client.close()
    expect(upstream.served.get('weather')).toBeUndefined()
    expect(upstream.methods).not.toContain('tools/call')
  })
})

describe('an MCP endpoint reads the JSON-RPC body', () => {
  let upstream: McpUpstream
  let url: string
  beforeAll(async () => {
    upstream = await mcpUpstream(true)
    url = (await mcpEndpoint(upstream)).metered_url
  })

  it('answers a tools/call of a priced tool with 402 at that tool’s price', async () => {
    const r = await rpc(url, {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'weather', arguments: {} },
    })
    expect(r.status).toBe(402)
    const body = JSON.parse(r.text)
    expect(body).toMatchObject({ error: 'payment_required', price_atomic: String(WEATHER_ATOMIC) })
    const required = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    expect(required.resource.description).toContain('tool weather')
  })

  it('prices a tool it was not told of at the default price', async () => {
    const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'nope' } })
    expect(r.status).toBe(402)
    expect(JSON.parse(r.text).price_atomic).toBe(String(DEFAULT_ATOMIC))
  })

  it('forwards an unknown tool unpaid when the merchant says unknown tools are free', async () => {
    const free = await mcpEndpoint(upstream, { ...MCP, unknown_tools_free: true })
    const r = await rpc(free.metered_url, {
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'nope' },
    })
    // Reached the server (no session: the SDK server refuses it, in its own words).
    expect(r.status).not.toBe(402)
    expect(upstream.methods).toContain('tools/call')
  })

  it('refuses a body that is not JSON with the JSON-RPC parse error, nothing forwarded', async () => {
    const before = upstream.methods.length
    const r = await rpc(url, '{"jsonrpc": "2.0", "method": ')
    expect(r.status).toBe(400)
    // A browser agent reads this refusal as it reads a 402: the same CORS headers as every answer.
    expect(r.headers.get('access-control-allow-origin')).toBe('*')
    expect(r.headers.get('access-control-expose-headers')).toContain('PAYMENT-REQUIRED')
    expect(JSON.parse(r.text)).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32700, message: 'Parse error: the body is not JSON' },
    })
    const bad = await rpc(url, { hello: 'world', id: 3 })
    expect(bad.status).toBe(400)
    expect(JSON.parse(bad.text)).toMatchObject({ id: 3, error: { code: -32600 } })
    const noName = await rpc(url, { jsonrpc: '2.0', id: 4, method: 'tools/call', params: {} })
    expect(JSON.parse(noName.text)).toMatchObject({ id: 4, error: { code: -32602 } })
    expect(upstream.methods.length).toBe(before)
  })

  it('refuses a batch holding a tools/call, and passes a batch of protocol messages', async () => {
    const before = upstream.methods.length
    const r = await rpc(url, [
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo' } },
    ])
    expect(r.status).toBe(400)
    expect(JSON.parse(r.text).error).toMatchObject({ code: -32600, message: expect.stringMatching(/batch/) })
    expect(upstream.methods.length).toBe(before)
    const ok = await rpc(url, [{ jsonrpc: '2.0', method: 'notifications/initialized' }])
    expect(ok.status).not.toBe(402)
    expect(upstream.methods.length).toBe(before + 1)
  })

  it('refuses a body over the bound with 413, nothing forwarded', async () => {
    const before = upstream.methods.length
    const big = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'echo', arguments: { text: 'x'.repeat(1_100_000) } },
    })
    const r = await rpc(url, big)
    expect(r.status).toBe(413)
    expect(upstream.methods.length).toBe(before)
  })
})

describe('the books and metrics of paid tools', () => {
  it('GET /calls filters by tool; revenue is counted per configured tool, any other as "other"', async () => {
    const upstream = await mcpUpstream(true)
    const ep = await mcpEndpoint(upstream)
    const paid: Paid[] = []
    const transport = new StreamableHTTPClientTransport(new URL(ep.metered_url), { fetch: payingFetch(paid) })
    const client = new Client({ name: 'books', version: '1.0.0' })
    await client.connect(transport)
    await client.callTool({ name: 'weather', arguments: { city: 'Oslo' } })
    // Not a tool the merchant named: the default price, and the server's own "unknown tool" answer.
    await client.callTool({ name: 'mystery', arguments: {} }).catch(() => {})
    await client.close()
    await svc.flushCaptures()

    const byTool = await svc.api(`/api/v1/calls?endpoint_id=${ep.id}&tool=weather`, { key: merchant.key })
    expect(byTool.status).toBe(200)
    expect(byTool.body.data.map((c: { tool: string }) => c.tool)).toEqual(['weather'])
    const all = await svc.api(`/api/v1/calls?endpoint_id=${ep.id}`, { key: merchant.key })
    expect(all.body.data.map((c: { tool: string }) => c.tool).sort()).toEqual(['mystery', 'weather'])
    const bad = await svc.api('/api/v1/calls?tool=a%20b', { key: merchant.key })
    expect(bad.status).toBe(400)
    expect(bad.body.error.param).toBe('tool')

    const text = await registry.getSingleMetricAsString('tollgate_mcp_tool_revenue_atomic_total')
    expect(text).toMatch(/tool="weather"} \d+/)
    expect(text).toMatch(/tool="other"} \d+/)
    expect(text).not.toContain('mystery')
  })
})

describe('the management API for kind mcp', () => {
  const create = (body: Record<string, unknown>) =>
    svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: 'http://127.0.0.1:9/mcp', ...body },
    })

  it.each([
    [{ kind: 'mcp' }, 'mcp'],
    [{ kind: 'mcp', price: 0.01, mcp: MCP }, 'price'],
    [{ price: 0.01, mcp: MCP }, 'mcp'],
    [{ kind: 'mcp', mcp: { ...MCP, default_price: 0 } }, 'mcp.default_price'],
    [{ kind: 'mcp', mcp: { ...MCP, tools: { 'bad name': 0.01 } } }, 'mcp.tools.bad name'],
    [{ kind: 'mcp', mcp: { ...MCP, free_tools: ['weather'] } }, 'mcp.free_tools[0]'],
    [
      { kind: 'mcp', mcp: { ...MCP, tools: { t: { model: 'rules', rules: [], default_price: 1 } } } },
      'mcp.tools.t',
    ],
    [
      {
        kind: 'mcp',
        mcp: { ...MCP, tools: { t: { model: 'usage', unit: 'response_bytes', max_price: 1 } } },
      },
      'mcp.tools.t.price_per_mb',
    ],
  ])('refuses %j naming %s, and creates nothing', async (body, param) => {
    const before = await svc.api('/api/v1/endpoints', { key: merchant.key })
    const r = await create(body)
    expect(r.status).toBe(400)
    expect(r.body.error.param).toBe(param)
    const after = await svc.api('/api/v1/endpoints', { key: merchant.key })
    expect(after.body.data.length).toBe(before.body.data.length)
  })

  it('shows the per-tool prices in dollars and changes them with PATCH', async () => {
    const r = await create({ kind: 'mcp', mcp: MCP })
    expect(r.status).toBe(201)
    expect(r.body).toMatchObject({
      kind: 'mcp',
      price: 0.003,
      mcp: {
        tools: { weather: 0.01, report: { model: 'usage', max_price: 0.05, price_per_mb: 1 } },
        default_price: 0.003,
        free_tools: ['echo'],
        unknown_tools_free: false,
      },
    })
    const patched = await svc.api(`/api/v1/endpoints/${r.body.id}`, {
      method: 'PATCH',
      key: merchant.key,
      body: { mcp: { tools: { weather: 0.02 }, default_price: 0.005 } },
    })
    expect(patched.status).toBe(200)
    expect(patched.body).toMatchObject({ price: 0.005, mcp: { tools: { weather: 0.02 } } })
    const wrong = await svc.api(`/api/v1/endpoints/${r.body.id}`, {
      method: 'PATCH',
      key: merchant.key,
      body: { price: 0.5 },
    })
    expect(wrong.status).toBe(400)
    expect(wrong.body.error.param).toBe('price')
  })
})
