// The legacy MCP transport (HTTP+SSE, protocol 2024-11-05) behind a metered URL, with the published SDK's
// SSEServerTransport server and SSEClientTransport client unchanged: the stream's `endpoint` event is
// rewritten under /m/<id>, protocol methods pass free, tools/list carries the prices, and a priced tool is
// paid in band: the PaymentRequired reaches the client on its event stream (the POST answers 202), the
// payment in params._meta pays, and the result on the stream carries the settlement in its _meta.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import type { x402Client } from '@x402/core/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { meteredEndpointUrl, sseSessions } from '../../src/mcp/sse-transport.ts'
import type { Service } from '../../src/service.ts'
import { expectServedOnceReplayRefused, weatherCalls, weatherMcpEndpoint } from '../helpers/mcp-payments.ts'
import { type McpSseUpstream, startMcpSseUpstream } from '../helpers/mcp-sse-upstream.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import { registerMerchantKey, startBaseSepoliaChain, startBaseSepoliaService } from '../x402/harness.ts'

let chain: DevChain
let svc: Service
let key: string
const upstreams: McpSseUpstream[] = []

/** The published exact client signing for the chain's payer `i`. */
const payerClient = (i: number) => exactPayer(chain.payers[i]!.privateKey).client

const endpoint = (upstream: McpSseUpstream, inBand: boolean, extra: Record<string, unknown> = {}) =>
  weatherMcpEndpoint(svc.url, key, upstream.url, inBand, extra)

async function connect(meteredUrl: string, fetchImpl?: typeof fetch) {
  const client = new Client({ name: 'sse-client', version: '1.0.0' })
  const transport = new SSEClientTransport(
    new URL(`${meteredUrl}/sse`),
    fetchImpl ? { fetch: fetchImpl } : {},
  )
  await client.connect(transport)
  return client
}

type ToolResult = Awaited<ReturnType<Client['callTool']>>

/**
 * What the x402 repository's MCP client wrapper (`x402MCPClient.callTool` of @x402/mcp, which its e2e MCP
 * client runs over SSEClientTransport) does, step for step: call; if the result is an error whose first text
 * is `{"x402/error":{code:402,data:PaymentRequired}}`, create the payload and call again with it in
 * `_meta["x402/payment"]`; the settlement is read from the result's `_meta["x402/payment-response"]`.
 * (@x402/mcp is not published on npm; this is its logic over the published @x402/core client.)
 */
async function x402CallTool(client: Client, payer: x402Client, name: string, args: Record<string, unknown>) {
  const first = await client.callTool({ name, arguments: args })
  const required = paymentRequiredOf(first)
  if (required === null) return { result: first, paymentMade: false, payload: null }
  const payload = await payer.createPaymentPayload(required as never)
  const result = await client.callTool({ name, arguments: args, _meta: { 'x402/payment': payload } })
  return { result, paymentMade: true, payload }
}

function paymentRequiredOf(result: ToolResult): Record<string, unknown> | null {
  if (!result.isError) return null
  const first = (result.content as Array<{ type: string; text?: string }>)[0]
  if (first?.type !== 'text' || typeof first.text !== 'string') return null
  try {
    const err = JSON.parse(first.text)['x402/error']
    return err?.code === 402 && typeof err.data === 'object' ? err.data : null
  } catch {
    return null
  }
}

const calls = (endpointId: string) => weatherCalls(svc, key, endpointId)

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  // Anvil's account 8 (gas, no payer, not the treasury) settles for the endpoint that settles before answering.
  svc = await startBaseSepoliaService(
    chain,
    chain.rpcUrl,
    { proxy: { allow_private_upstreams: true } },
    'warn',
    {
      SETTLER_PRIVATE_KEY: devAccount(8).privateKey,
    },
  )
  key = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'MCP SSE Co')
})
afterAll(async () => {
  await svc?.stop()
  for (const u of upstreams) await u.close()
  await chain?.stop()
})

describe('the endpoint event of a legacy SSE stream', () => {
  const at = { endpointId: 'ep_1', origin: 'http://127.0.0.1:9000', basePath: '/mcp', pathAndQuery: '/sse' }
  it('maps a path, a relative and an absolute URL under the metered URL', () => {
    expect(meteredEndpointUrl('/mcp/messages?sessionId=a', at)).toEqual({
      url: '/m/ep_1/messages?sessionId=a',
      rest: '/messages?sessionId=a',
    })
    expect(meteredEndpointUrl('messages?sessionId=b', at)?.url).toBe('/m/ep_1/messages?sessionId=b')
    expect(meteredEndpointUrl('http://127.0.0.1:9000/mcp/x/post?s=c', at)?.url).toBe('/m/ep_1/x/post?s=c')
    expect(meteredEndpointUrl('/messages?sessionId=a', { ...at, basePath: '' })?.url).toBe(
      '/m/ep_1/messages?sessionId=a',
    )
  })
  it('leaves a URL outside the upstream URL unmapped', () => {
    expect(meteredEndpointUrl('/other/messages', at)).toBeNull()
    expect(meteredEndpointUrl('/mcpx/messages', at)).toBeNull()
    expect(meteredEndpointUrl('http://evil.example/mcp/messages', at)).toBeNull()
  })
})

describe.each([
  ['at the server root', ''],
  ['under a path', '/mcp'],
])('an SSE-transport MCP server %s behind a metered URL', (_where, prefix) => {
  it('lists tools free with their prices, calls a free tool, and pays a priced one in band', async () => {
    const upstream = await startMcpSseUpstream({ prefix })
    upstreams.push(upstream)
    const ep = await endpoint(upstream, true)
    const client = await connect(ep.metered_url)
    const { tools } = await client.listTools()
    expect(tools.find((t) => t.name === 'weather')?._meta?.['tollgate/price']).toMatchObject({
      free: false,
      amount_atomic: '10000',
    })
    expect(tools.find((t) => t.name === 'echo')?._meta?.['tollgate/price']).toEqual({ free: true })
    const echo = await client.callTool({ name: 'echo', arguments: { text: 'free' } })
    expect(echo.content).toEqual([{ type: 'text', text: 'free' }])

    const { result, paymentMade, payload } = await x402CallTool(
      client,
      payerClient(prefix === '' ? 0 : 1),
      'weather',
      {
        city: 'Lyon',
      },
    )
    expect(paymentMade).toBe(true)
    expect(result.isError).toBeFalsy()
    expect(result.content).toEqual([{ type: 'text', text: 'sunny in Lyon' }])
    expect(result._meta?.['x402/payment-response']).toMatchObject({
      network: 'eip155:84532',
      payer: chain.payers[prefix === '' ? 0 : 1]!.address,
    })
    // The replay is refused on the stream, unserved.
    await expectServedOnceReplayRefused(client, upstream, payload, 'Lyon')
    await client.close()
    expect((await calls(ep.id)).map((c) => [c.tool, c.amount_atomic])).toEqual([['weather', '10000']])
  })
})

describe('several SSE sessions', () => {
  it('each gets its own payment request on its own stream, correlated by id', async () => {
    const upstream = await startMcpSseUpstream({ prefix: '/mcp' })
    upstreams.push(upstream)
    const ep = await endpoint(upstream, true)
    const clients = await Promise.all([0, 1, 2].map(() => connect(ep.metered_url)))
    const unpaid = await Promise.all(
      clients.map((c, i) => c.callTool({ name: 'weather', arguments: { city: `C${i}` } })),
    )
    for (const r of unpaid)
      expect(paymentRequiredOf(r)).toMatchObject({ x402Version: 2, error: 'payment_required' })
    const paid = await Promise.all(
      clients.map((c, i) => x402CallTool(c, payerClient(i), 'weather', { city: `C${i}` })),
    )
    paid.forEach((p, i) => {
      expect(p.result.content).toEqual([{ type: 'text', text: `sunny in C${i}` }])
      expect(p.result._meta?.['x402/payment-response']).toMatchObject({ payer: chain.payers[i]!.address })
    })
    expect(upstream.served.get('weather')).toBe(3)
    for (const c of clients) await c.close()
    expect(await calls(ep.id)).toHaveLength(3)
  })

  it('a session whose stream this process does not hold gets HTTP 402 at once', async () => {
    const upstream = await startMcpSseUpstream()
    upstreams.push(upstream)
    const ep = await endpoint(upstream, true)
    const r = await fetch(`${ep.metered_url}/messages?sessionId=elsewhere`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'weather' } }),
    })
    expect(r.status).toBe(402)
    expect(r.headers.get('payment-required')).toBeTruthy()
    expect(upstream.messages).toEqual([])
  })
})

describe('settled before the answer', () => {
  it('the result on the stream waits for the settlement and names its transaction', async () => {
    const upstream = await startMcpSseUpstream({ prefix: '/mcp' })
    upstreams.push(upstream)
    const ep = await endpoint(upstream, true, { x402_settlement: 'before_answer' })
    const client = await connect(ep.metered_url)
    const { result } = await x402CallTool(client, payerClient(2), 'weather', { city: 'Nice' })
    expect(result.content).toEqual([{ type: 'text', text: 'sunny in Nice' }])
    const settlement = result._meta?.['x402/payment-response'] as { success: boolean; transaction: string }
    expect(settlement).toMatchObject({ success: true, payer: chain.payers[2]!.address })
    expect(settlement.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    await client.close()
  })
})

describe('an SSE-transport server on an endpoint answering HTTP 402', () => {
  it('@x402/fetch as the SSE client transport fetch pays the POST; the result comes on the stream', async () => {
    const upstream = await startMcpSseUpstream({ prefix: '/mcp' })
    upstreams.push(upstream)
    const ep = await endpoint(upstream, false)
    const client = await connect(ep.metered_url, wrapFetchWithPayment(fetch, payerClient(3)))
    const r = await client.callTool({ name: 'weather', arguments: { city: 'Oslo' } })
    expect(r.content).toEqual([{ type: 'text', text: 'sunny in Oslo' }])
    expect(upstream.served.get('weather')).toBe(1)
    await client.close()
    expect((await calls(ep.id)).map((c) => [c.tool, c.amount_atomic])).toEqual([['weather', '10000']])
    // The stream ended: no session is left behind in this process.
    await expect.poll(() => sseSessions.size).toBe(0)
  })
})
