// Paid MCP tools in discovery, against the published @modelcontextprotocol/sdk server and client and the
// published @x402/extensions bazaar code: each paid tool of a listed MCP endpoint is one `mcp` item of
// /discovery/resources and /.well-known/x402.json (free tools are not); its name, description and input
// schema are what the server's tools/list said once it passed through (an open object schema before); the
// bazaar extension of the tool's 402 (HTTP 402 and the in-band PaymentRequired) describes that tool, and the
// published code validates and catalogs it; the figures are the tool's own.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import {
  type DiscoveryExtension,
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
} from '@x402/extensions/bazaar'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { catalogedFrom } from '../helpers/bazaar.ts'
import { type McpUpstream, startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'

const MCP = {
  tools: {
    weather: 0.01,
    report: { model: 'usage', unit: 'response_bytes', max_price: 0.05, price_per_mb: 1 },
  },
  default_price: 0.003,
  free_tools: ['echo'],
}
const DISCOVERY = { service_name: 'Acme MCP', tags: ['mcp', 'weather'] }

interface Item {
  resource: string
  type: string
  toolName?: string
  description: string
  serviceName?: string
  accepts: Array<{ scheme: string; amount: string }>
  extensions?: { bazaar: DiscoveryExtension }
  observed: { paid_calls: number; success_rate: number | null; repeat_payers: number }
}

let svc: TestService
let key: string
let payer: Funded
let upstream: McpUpstream
const ids: Record<string, string> = {}
/** Each read asks a URL not asked before: the listing keeps an answer a few seconds per URL. */
let reads = 0

async function list(query = ''): Promise<{ items: Item[]; pagination: { total: number } }> {
  const r = await fetch(`${svc.url}/discovery/resources?offset=0&limit=${100 - reads++}${query}`)
  expect(r.status).toBe(200)
  return r.json()
}

const itemsOf = (items: Item[], id: string) => items.filter((i) => i.resource.endsWith(`/m/${id}`))

async function toolCall402(id: string, tool: string) {
  const r = await fetch(`${svc.url}/m/${id}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: tool, arguments: {} },
    }),
  })
  expect(r.status).toBe(402)
  return decodePaymentRequiredHeader(r.headers.get('payment-required')!)
}

async function connect(id: string, fetchImpl: typeof fetch = fetch) {
  const client = new Client({ name: 'discovery-test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${svc.url}/m/${id}`), { fetch: fetchImpl }))
  return client
}

/** A fetch that pays each 402 with a USDC transfer of the quoted price. */
const paying: typeof fetch = async (input, init) => {
  const first = await fetch(input, init)
  if (first.status !== 402) return first
  const { price_atomic } = (await first.json()) as { price_atomic: string }
  const headers = new Headers(init?.headers)
  headers.set('x-payment', await payUsdc(payer, svc.treasury.address, BigInt(price_atomic)))
  return fetch(input, { ...init, headers })
}

beforeAll(async () => {
  svc = await startTestService({ overrides: { proxy: { allow_private_upstreams: true } } })
  upstream = await startMcpUpstream({ json: true })
  payer = await fundedAccount(100_000_000n)
  key = (await registerMerchant(svc)).key
  for (const [name, body] of Object.entries({
    // Listed; weather and report priced, echo free.
    listed: { listed: true, discovery: DISCOVERY, mcp: MCP },
    // Listed, only weather named: echo and report cost the default price, so they are paid tools too.
    defaults: { listed: true, mcp: { tools: { weather: 0.02 }, default_price: 0.003 } },
    // Listed, answering unpaid calls in-band (x402 MCP transport).
    inBand: { listed: true, mcp: { ...MCP, in_band: true } },
    hidden: { mcp: MCP },
  })) {
    const r = await svc.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: upstream.url, kind: 'mcp', description: `MCP ${name}`, ...body },
    })
    expect(r.status, r.text).toBe(201)
    ids[name] = r.body.id
  }
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('paid MCP tools in discovery', () => {
  it('before the server listed its tools: each priced tool is an item with an open input schema', async () => {
    const { items } = await list()
    const mine = itemsOf(items, ids.listed!)
    expect(mine.map((i) => [i.type, i.toolName]).sort()).toEqual([
      ['mcp', 'report'],
      ['mcp', 'weather'],
    ])
    const weather = mine.find((i) => i.toolName === 'weather')!
    expect(weather).toMatchObject({
      description: `MCP listed · tool weather`,
      serviceName: 'Acme MCP',
      extensions: {
        bazaar: { info: { input: { type: 'mcp', toolName: 'weather', inputSchema: { type: 'object' } } } },
      },
    })
    expect(validateDiscoveryExtension(weather.extensions!.bazaar)).toEqual({ valid: true })
    // Only the tools it names: the server's list was never seen, so its default-priced tools are unknown.
    expect(itemsOf(items, ids.defaults!).map((i) => i.toolName)).toEqual(['weather'])
    expect(itemsOf(items, ids.hidden!)).toEqual([])
  })

  it('a tools/list passing through is kept: the listing and the 402 describe each tool as the server does', async () => {
    const client = await connect(ids.listed!)
    const listed = await client.listTools()
    await client.close()
    const server = Object.fromEntries(listed.tools.map((t) => [t.name, t]))
    await waitFor(
      async () => {
        const [row] = await svc.sql<{ n: number }[]>`
          SELECT jsonb_array_length(tools)::int AS n FROM mcp_tool_catalogs WHERE endpoint_id = ${ids.listed!}`
        return row?.n === 3
      },
      { what: 'the tool catalog kept', timeoutMs: 5_000 },
    )
    const { items } = await list()
    const mine = itemsOf(items, ids.listed!)
    // echo is free: not a paid resource.
    expect(mine.map((i) => i.toolName).sort()).toEqual(['report', 'weather'])
    const weather = mine.find((i) => i.toolName === 'weather')!
    expect(weather.description).toBe(server.weather!.description)
    expect(weather.extensions!.bazaar.info.input).toEqual({
      type: 'mcp',
      toolName: 'weather',
      tool: 'weather',
      transport: 'streamable-http',
      description: server.weather!.description,
      inputSchema: server.weather!.inputSchema,
    })
    expect(weather.accepts.map((a) => a.amount)).toContain('10000')
    const report = mine.find((i) => i.toolName === 'report')!
    // A usage-priced tool is offered at its ceiling.
    expect(report.accepts.map((a) => a.amount)).toContain('50000')

    // The tool's own 402 carries the same description of it, read by the published bazaar code.
    const required = await waitFor(
      async () => {
        const r = await toolCall402(ids.listed!, 'weather')
        const input = (r.extensions?.bazaar as DiscoveryExtension | undefined)?.info.input as
          | { description?: string }
          | undefined
        return input?.description === server.weather!.description ? r : null
      },
      { what: 'the recompiled 402', timeoutMs: 5_000 },
    )
    const bazaar = required.extensions!.bazaar as DiscoveryExtension
    expect(validateDiscoveryExtension(bazaar)).toEqual({ valid: true })
    expect(validateDiscoveryExtensionSpec(bazaar as never)).toEqual({ valid: true })
    expect(bazaar).toEqual(weather.extensions!.bazaar)
    // What a facilitator catalogs from a payment that echoes the 402: an MCP resource, by URL and tool name.
    const found = catalogedFrom(required)
    expect(found).toMatchObject({
      resourceUrl: `${svc.url}/m/${ids.listed}`,
      toolName: 'weather',
      serviceName: 'Acme MCP',
      discoveryInfo: {
        input: { type: 'mcp', toolName: 'weather', inputSchema: server.weather!.inputSchema },
      },
    })
    // The report's 402 describes the report, not the weather.
    const reportRequired = await toolCall402(ids.listed!, 'report')
    expect((reportRequired.extensions!.bazaar as DiscoveryExtension).info.input).toMatchObject({
      toolName: 'report',
      description: server.report!.description,
    })
  })

  it('a tool the merchant did not price but the server lists is a paid tool at the default price', async () => {
    const client = await connect(ids.defaults!)
    await client.listTools()
    await client.close()
    const mine = await waitFor(
      async () => {
        const got = itemsOf((await list()).items, ids.defaults!)
        return got.length === 3 ? got : null
      },
      { what: 'the default-priced tools listed', timeoutMs: 5_000 },
    )
    const amount = (tool: string) => mine.find((i) => i.toolName === tool)!.accepts[0]!.amount
    expect([amount('echo'), amount('report'), amount('weather')]).toEqual(['3000', '3000', '20000'])
    // Its 402 names it (a 402 per listed tool), at the default price.
    const required = await toolCall402(ids.defaults!, 'echo')
    expect((required.extensions!.bazaar as DiscoveryExtension).info.input).toMatchObject({ toolName: 'echo' })
    expect(required.accepts[0]!.amount).toBe('3000')
    // A tool nobody listed nor priced costs the default and has no description to give.
    const unknown = await toolCall402(ids.defaults!, 'mystery')
    expect(unknown.extensions?.bazaar).toBeUndefined()
  })

  it('an unpaid call answered in-band carries the same bazaar description in its PaymentRequired', async () => {
    const client = await connect(ids.inBand!)
    const unpaid = await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })
    await client.close()
    expect(unpaid.isError).toBe(true)
    const required = unpaid.structuredContent as {
      resource: { url: string; serviceName?: string }
      extensions: { bazaar: DiscoveryExtension }
    }
    expect(validateDiscoveryExtension(required.extensions.bazaar)).toEqual({ valid: true })
    expect(required.extensions.bazaar.info.input).toMatchObject({ type: 'mcp', toolName: 'weather' })
    expect(upstream.served.get('weather') ?? 0).toBe(0)
  })

  it('filters by type and by the tool’s own price; the manifest lists the tools too', async () => {
    const http = await list('&type=http')
    expect(http.items.filter((i) => i.type === 'mcp')).toEqual([])
    const mcp = await list('&type=mcp')
    expect(mcp.items.length).toBeGreaterThan(0)
    expect(mcp.items.every((i) => i.type === 'mcp')).toBe(true)
    expect(mcp.pagination.total).toBe(mcp.items.length)
    // report's ceiling is 0.05, weather costs 0.01 on this endpoint.
    const cheap = itemsOf((await list('&max_price=0.01')).items, ids.listed!).map((i) => i.toolName)
    expect(cheap).toEqual(['weather'])
    const dear = itemsOf((await list('&min_price=0.03')).items, ids.listed!).map((i) => i.toolName)
    expect(dear).toEqual(['report'])
    const manifest = await (await fetch(`${svc.url}/.well-known/x402.json`)).json()
    const weather = manifest.items.find(
      (i: { resource: { url: string }; input: { toolName?: string } }) =>
        i.resource.url.endsWith(`/m/${ids.listed}`) && i.input.toolName === 'weather',
    )
    expect(weather).toMatchObject({
      type: 'mcp',
      resource: { serviceName: 'Acme MCP' },
      input: { type: 'mcp', toolName: 'weather', transport: 'streamable-http' },
    })
    expect(weather.input.inputSchema).toMatchObject({ properties: { city: { type: 'string' } } })
  })

  it('shows each tool’s own paid traffic', async () => {
    const client = await connect(ids.listed!, paying)
    await client.callTool({ name: 'weather', arguments: { city: 'Oslo' } })
    await client.callTool({ name: 'weather', arguments: { city: 'Rome' } })
    await client.callTool({ name: 'report', arguments: {} })
    await client.callTool({ name: 'echo', arguments: { text: 'free' } })
    await client.close()
    await svc.flushCaptures()
    const mine = itemsOf((await list()).items, ids.listed!)
    const of = (tool: string) => mine.find((i) => i.toolName === tool)!.observed
    expect(of('weather')).toMatchObject({ paid_calls: 2, success_rate: 1, repeat_payers: 1 })
    expect(of('report')).toMatchObject({ paid_calls: 1, success_rate: 1, repeat_payers: 0 })
  })
})
