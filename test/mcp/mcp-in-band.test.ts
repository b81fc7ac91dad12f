// The x402 MCP transport in-band (coinbase/x402 specs/transports-v2/mcp.md), against the published SDK server
// and client and the published x402 v2 client: an unpaid tools/call gets a tool result with isError and the
// PaymentRequired; the PaymentPayload sent in params._meta["x402/payment"] pays, the receipt comes back in
// the result's _meta; replaying it is refused in-band without reaching the server; and the same tool is
// paid over HTTP 402 by @x402/fetch on an endpoint that answers with HTTP 402.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { wrapFetchWithPayment } from '@x402/fetch'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { expectServedOnceReplayRefused, weatherCalls, weatherMcpEndpoint } from '../helpers/mcp-payments.ts'
import { type McpUpstream, startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import { registerMerchantKey, startBaseSepoliaChain, startBaseSepoliaService } from '../x402/harness.ts'

checkPaymentProtocol()

let chain: DevChain
let svc: Service
let key: string
const upstreams: McpUpstream[] = []

/** The published exact client signing for the chain's payer `i`. */
const payerClient = (i: number) => exactPayer(chain.payers[i]!.privateKey).client

const endpoint = (upstream: McpUpstream, inBand: boolean) =>
  weatherMcpEndpoint(svc.url, key, upstream.url, inBand)

async function connect(url: string, fetchImpl: typeof fetch = fetch) {
  const client = new Client({ name: 'in-band', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: fetchImpl }))
  return client
}

const calls = (endpointId: string) => weatherCalls(svc, key, endpointId)

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  // The in-band receipt of a call settled after (explicitly; the default settles before the answer).
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    proxy: { allow_private_upstreams: true },
    settlement: { before_answer: { enabled: false } },
  } as never)
  key = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'MCP Co')
})
afterAll(async () => {
  await svc?.stop()
  for (const u of upstreams) await u.close()
  await chain?.stop()
})

describe.each([
  ['SSE', false],
  ['JSON', true],
])('in-band payment over the x402 MCP transport (%s answers)', (_mode, json) => {
  it('asks in-band, is paid in _meta, answers the receipt in _meta, refuses the replay unserved', async () => {
    const upstream = await startMcpUpstream({ json })
    upstreams.push(upstream)
    const ep = await endpoint(upstream, true)
    const client = await connect(ep.metered_url)
    expect((await client.callTool({ name: 'echo', arguments: { text: 'free' } })).isError).toBeFalsy()

    const unpaid = await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })
    expect(unpaid.isError).toBe(true)
    const required = unpaid.structuredContent as {
      x402Version: number
      error: string
      accepts: Array<{ scheme: string; amount: string }>
    }
    expect(required).toMatchObject({ x402Version: 2, error: 'payment_required' })
    expect(required.accepts.find((a) => a.scheme === 'exact')?.amount).toBe('10000')
    const text = JSON.parse((unpaid.content as Array<{ text: string }>)[0]!.text)
    expect(text['x402/error']).toMatchObject({ code: 402, data: { x402Version: 2 } })
    expect(upstream.served.get('weather')).toBeUndefined()

    const payload = await payerClient(json ? 1 : 0).createPaymentPayload(required as never)
    const paid = await client.callTool({
      name: 'weather',
      arguments: { city: 'Lyon' },
      _meta: { 'x402/payment': payload },
    })
    expect(paid.isError).toBeFalsy()
    expect(paid.content).toEqual([{ type: 'text', text: 'sunny in Lyon' }])
    expect(paid._meta?.['x402/payment-response']).toMatchObject({
      network: 'eip155:84532',
      payer: chain.payers[json ? 1 : 0]!.address,
      errorReason: 'settlement_pending',
    })
    await expectServedOnceReplayRefused(client, upstream, payload, 'Lyon')
    await client.close()
    expect((await calls(ep.id)).map((c) => [c.tool, c.amount_atomic])).toEqual([['weather', '10000']])
  })
})

describe('the HTTP 402 flow and the in-band flow pay the same tool', () => {
  it('@x402/fetch pays weather over HTTP 402; the in-band payload pays it in _meta', async () => {
    const upstream = await startMcpUpstream()
    upstreams.push(upstream)
    const http402 = await endpoint(upstream, false)
    const viaHttp = await connect(http402.metered_url, wrapFetchWithPayment(fetch, payerClient(2)))
    const paid = await viaHttp.callTool({ name: 'weather', arguments: { city: 'Oslo' } })
    expect(paid.content).toEqual([{ type: 'text', text: 'sunny in Oslo' }])
    await viaHttp.close()

    // The same endpoint (HTTP 402 for unpaid calls) takes a payment in _meta too.
    const plain = await connect(http402.metered_url)
    const unpaid = await fetch(http402.metered_url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'weather' } }),
    })
    expect(unpaid.status).toBe(402)
    const required = JSON.parse(Buffer.from(unpaid.headers.get('payment-required')!, 'base64').toString())
    const payload = await payerClient(3).createPaymentPayload(required)
    const inBand = await plain.callTool({
      name: 'weather',
      arguments: { city: 'Rome' },
      _meta: { 'x402/payment': payload },
    })
    expect(inBand.content).toEqual([{ type: 'text', text: 'sunny in Rome' }])
    expect(inBand._meta?.['x402/payment-response']).toMatchObject({ payer: chain.payers[3]!.address })
    await plain.close()
    expect(upstream.served.get('weather')).toBe(2)
    const rows = await calls(http402.id)
    expect(rows.map((c) => [c.tool, c.amount_atomic])).toEqual([
      ['weather', '10000'],
      ['weather', '10000'],
    ])
  })
})
