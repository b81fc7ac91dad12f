// The x402 MCP extension binding (`org.x402/payment`, MCP 2026-07-28; coinbase/x402 specs/transports-v2/
// mcp.md) beside the tool-result binding, and prices for resources/read (by URI) and prompts/get (by name):
// against the published SDK server and client, paid by the published x402 v2 client. A request that
// advertises the extension gets `resultType: "payment_required"`; server/discover advertises it.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { type McpUpstream, startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { callApi } from '../helpers/service.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import { registerMerchantKey, startBaseSepoliaChain, startBaseSepoliaService } from '../x402/harness.ts'

const MCP = {
  tools: { weather: 0.01 },
  resources: { 'weather://forecast': 0.02 },
  prompts: { plan: 0.005 },
  default_price: 0.003,
  free_tools: ['echo'],
}
/** What a client of MCP 2026-07-28 that reads the extension puts in each request's _meta. */
const ADVERTISES = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': { extensions: { 'org.x402/payment': {} } },
}
const ANY = z.object({}).passthrough()

let chain: DevChain
let svc: Service
let key: string
let upstream: McpUpstream
let ep: { id: string; metered_url: string }
let client: Client

/** The published exact client signing for the chain's payer `i`. */
const payerClient = (i: number) => exactPayer(chain.payers[i]!.privateKey).client

async function rpc(method: string, params: Record<string, unknown>) {
  return (await client.request({ method, params } as never, ANY as never)) as Record<string, unknown>
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, { proxy: { allow_private_upstreams: true } })
  key = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'MCP ext Co')
  upstream = await startMcpUpstream({ json: true })
  // in_band false: only the extension makes the answer in-band; the rest answer HTTP 402.
  const r = await callApi(svc.url, '/api/v1/endpoints', {
    key,
    body: { upstream_url: upstream.url, kind: 'mcp', mcp: MCP },
  })
  if (r.status !== 201) throw new Error(`endpoint: ${r.status} ${r.text}`)
  ep = r.body
  client = new Client({ name: 'ext', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(ep.metered_url)))
})
afterAll(async () => {
  await client?.close()
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

async function callsOf(tool: string) {
  await svc.flushCaptures()
  const r = await callApi(svc.url, `/api/v1/calls?endpoint_id=${ep.id}&tool=${encodeURIComponent(tool)}`, {
    key,
  })
  return (r.body.data as Array<{ tool: string; amount_atomic: string }>).map((c) => [c.tool, c.amount_atomic])
}

describe('the org.x402/payment extension binding', () => {
  it('server/discover advertises the extension beside what the server said', async () => {
    const r = await rpc('server/discover', {})
    expect(r.capabilities).toEqual({
      tools: {},
      resources: {},
      prompts: {},
      extensions: { 'org.x402/payment': {} },
    })
  })

  it('an unpaid tools/call that advertises it gets payment_required; paid in _meta it is answered', async () => {
    const unpaid = await rpc('tools/call', {
      name: 'weather',
      arguments: { city: 'Lyon' },
      _meta: ADVERTISES,
    })
    expect(unpaid.resultType).toBe('payment_required')
    const required = unpaid.paymentRequired as { x402Version: number; accepts: Array<{ amount: string }> }
    expect(required.x402Version).toBe(2)
    expect(required.accepts[0]!.amount).toBe('10000')
    expect(unpaid.isError).toBeUndefined()
    expect(upstream.served.get('weather')).toBeUndefined()

    const payload = await payerClient(0).createPaymentPayload(required as never)
    const paid = await rpc('tools/call', {
      name: 'weather',
      arguments: { city: 'Lyon' },
      _meta: { ...ADVERTISES, 'x402/payment': payload },
    })
    expect(paid.content).toEqual([{ type: 'text', text: 'sunny in Lyon' }])
    expect((paid._meta as Record<string, unknown>)['x402/payment-response']).toMatchObject({
      payer: chain.payers[0]!.address,
    })
    expect(upstream.served.get('weather')).toBe(1)
    expect(await callsOf('weather')).toEqual([['weather', '10000']])
  })

  it('without it, the same unpaid call gets HTTP 402 (the endpoint is not in_band)', async () => {
    await expect(client.callTool({ name: 'weather', arguments: { city: 'Oslo' } })).rejects.toThrow(/402/)
  })
})

describe('resources/read and prompts/get priced by URI and name', () => {
  it('a priced resource asks for payment, is paid, answered and booked under its URI', async () => {
    const unpaid = await rpc('resources/read', { uri: 'weather://forecast', _meta: ADVERTISES })
    expect(unpaid.resultType).toBe('payment_required')
    const required = unpaid.paymentRequired as {
      accepts: Array<{ amount: string }>
      resource: { description: string }
    }
    expect(required.accepts[0]!.amount).toBe('20000')
    expect(required.resource.description).toContain('resource weather://forecast')
    expect(upstream.served.get('resource:weather://forecast')).toBeUndefined()
    const payload = await payerClient(1).createPaymentPayload(required as never)
    const paid = await rpc('resources/read', {
      uri: 'weather://forecast',
      _meta: { ...ADVERTISES, 'x402/payment': payload },
    })
    expect(paid.contents).toEqual([{ uri: 'weather://forecast', text: 'sunny all week' }])
    expect((paid._meta as Record<string, unknown>)['x402/payment-response']).toBeTruthy()
    expect(upstream.served.get('resource:weather://forecast')).toBe(1)
    expect(await callsOf('resource:weather://forecast')).toEqual([['resource:weather://forecast', '20000']])
  })

  it('a resource not named passes free', async () => {
    const r = await client.readResource({ uri: 'weather://about' })
    expect(r.contents).toEqual([{ uri: 'weather://about', text: 'a weather server' }])
  })

  it('a priced prompt: HTTP 402 without the extension, payment_required with it', async () => {
    await expect(client.getPrompt({ name: 'plan', arguments: { city: 'Rome' } })).rejects.toThrow(/402/)
    const unpaid = await rpc('prompts/get', { name: 'plan', arguments: { city: 'Rome' }, _meta: ADVERTISES })
    expect(unpaid.resultType).toBe('payment_required')
    expect((unpaid.paymentRequired as { accepts: Array<{ amount: string }> }).accepts[0]!.amount).toBe('5000')
    expect(upstream.served.get('prompt:plan')).toBeUndefined()
  })
})

describe('endpoint configuration', () => {
  it('refuses a resource that is not a URI and a prompt name with a control character, naming the field', async () => {
    for (const [mcp, param] of [
      [{ ...MCP, resources: { 'not a uri': 0.01 } }, 'mcp.resources.not a uri'],
      [{ ...MCP, prompts: { 'a\u0001b': 0.01 } }, 'mcp.prompts.a\u0001b'],
      [{ ...MCP, resources: { 'weather://x': 0 } }, 'mcp.resources.weather://x'],
    ] as const) {
      const r = await callApi(svc.url, '/api/v1/endpoints', {
        key,
        body: { upstream_url: upstream.url, kind: 'mcp', mcp },
      })
      expect(r.status).toBe(400)
      expect(r.body.error.param).toBe(param)
    }
    const shown = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, { key })
    expect(shown.body.mcp).toMatchObject({
      resources: { 'weather://forecast': 0.02 },
      prompts: { plan: 0.005 },
    })
  })
})
