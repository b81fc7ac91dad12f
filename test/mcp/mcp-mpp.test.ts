// The MPP MCP transport: mppx's MCP client (McpClient.wrap around the published MCP SDK client, unchanged)
// pays a priced tool of an `mcp` endpoint that answers in band. The unpaid tools/call's tool result carries
// x402's PaymentRequired and MPP's challenge in `_meta["org.paymentauth/payment-required"]`; the credential
// comes back in `params._meta["org.paymentauth/credential"]`, is verified by the mpp-charge scheme, taken out
// of what the MCP server sees, and the result carries `_meta["org.paymentauth/receipt"]`. A private anvil as
// base-sepolia, as the x402 MCP tests.
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { evm } from 'mppx/evm/client'
import { McpClient } from 'mppx/mcp/client'
import { createWalletClient, type Hex, http, parseAbi } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { type McpUpstream, startMcpUpstream } from '../helpers/mcp-upstream.ts'
import { callApi } from '../helpers/service.ts'
import { registerMerchantKey, startBaseSepoliaChain, startBaseSepoliaService } from '../x402/harness.ts'

const usdcAbi = parseAbi([
  'function transfer(address to, uint256 value) returns (bool)',
  'function name() view returns (string)',
  'function version() view returns (string)',
])

let chain: DevChain
let svc: Service
let key: string
let upstream: McpUpstream

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    proxy: { allow_private_upstreams: true },
    settlement: { interval_ms: 500 },
  } as never)
  key = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'MCP MPP Co')
  upstream = await startMcpUpstream({ json: true })
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('mppx MCP client pays a priced tool in band', () => {
  it('is asked in the tool result, pays with its credential in _meta, gets the receipt in _meta; the call row says mpp', async () => {
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key,
      body: {
        upstream_url: upstream.url,
        kind: 'mcp',
        mcp: { tools: { weather: 0.01 }, default_price: 0.003, free_tools: ['echo'], in_band: true },
      },
    })
    expect(ep.status, ep.text).toBe(201)
    const funder = createWalletClient({
      account: privateKeyToAccount(chain.payers[0]!.privateKey),
      chain: baseSepolia,
      transport: http(chain.rpcUrl),
    })
    const read = (functionName: 'name' | 'version') =>
      svc.chain.publicClient.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName,
      }) as Promise<string>
    const token = { name: await read('name'), version: await read('version') }
    const payerKey: Hex = generatePrivateKey()
    const account = privateKeyToAccount(payerKey)
    const hash = await funder.writeContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'transfer',
      args: [account.address, 50_000n],
    })
    await svc.chain.publicClient.waitForTransactionReceipt({ hash })

    const client = new Client({ name: 'mppx-mcp', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(ep.body.metered_url)))
    // Unpaid, seen raw: both dialects in one tool result.
    const unpaid = await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })
    expect(unpaid.isError).toBe(true)
    const required = unpaid._meta?.['org.paymentauth/payment-required'] as {
      challenges: Array<{ method: string; intent: string; request: { amount: string } }>
    }
    expect(required.challenges[0]).toMatchObject({
      method: 'evm',
      intent: 'charge',
      request: { amount: '10000' },
    })
    expect(upstream.served.get('weather')).toBeUndefined()

    McpClient.wrap(client, { methods: [evm.charge({ account, authorization: token })] })
    const paid = (await client.callTool({ name: 'weather', arguments: { city: 'Lyon' } })) as {
      isError?: boolean
      content: unknown
      receipt?: Record<string, unknown>
    }
    expect(paid.isError).toBeFalsy()
    expect(paid.content).toEqual([{ type: 'text', text: 'sunny in Lyon' }])
    expect(paid.receipt).toMatchObject({ method: 'evm', status: 'success' })
    expect(typeof paid.receipt?.challengeId).toBe('string')
    expect(upstream.served.get('weather')).toBe(1)
    // The MCP server got the call without the credential.
    const forwarded = upstream.messages.filter(
      (m) => (m as { method?: string } | undefined)?.method === 'tools/call',
    ) as Array<{ params: Record<string, unknown> }>
    expect(forwarded.at(-1)!.params).toEqual({ name: 'weather', arguments: { city: 'Lyon' } })

    await svc.flushCaptures()
    const calls = await callApi(svc.url, `/api/v1/calls?endpoint_id=${ep.body.id}&tool=weather`, { key })
    expect(calls.body.data.map((c: Record<string, unknown>) => [c.protocol, c.amount_atomic])).toEqual([
      ['mpp', '10000'],
    ])
    await client.close()
  })
})

describe('the MPP MCP transport answers as mppx’s MCP server does', () => {
  const PROBLEMS = 'https://paymentauth.org/problems/'

  async function mcpEndpoint(extra: Record<string, unknown> = {}): Promise<string> {
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key,
      body: {
        upstream_url: upstream.url,
        kind: 'mcp',
        mcp: { tools: { weather: 0.01 }, default_price: 0.003, free_tools: ['echo'], in_band: true },
        ...extra,
      },
    })
    expect(ep.status, ep.text).toBe(201)
    return ep.body.metered_url
  }

  async function connect(url: string): Promise<Client> {
    const client = new Client({ name: 'mppx-mcp', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(url)))
    return client
  }

  async function counts() {
    await svc.flushCaptures()
    const [n] = await svc.sql<{ calls: number; claims: number }[]>`
      SELECT (SELECT count(*)::int FROM calls) AS calls, (SELECT count(*)::int FROM claims) AS claims`
    return { served: upstream.served.get('weather') ?? 0, ...n! }
  }

  async function token() {
    const read = (functionName: 'name' | 'version') =>
      svc.chain.publicClient.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName,
      }) as Promise<string>
    return { name: await read('name'), version: await read('version') }
  }

  /** The JSON-RPC error a call is answered with (the MCP SDK throws it as McpError). */
  async function rpcError(call: Promise<unknown>) {
    const err = (await call.then(
      () => null,
      (e: unknown) => e,
    )) as {
      code: number
      data: {
        httpStatus: number
        challenges: Array<Record<string, unknown>>
        problem: Record<string, unknown>
      }
    } | null
    expect(err).not.toBeNull()
    return err!
  }

  it('a payer without the funds, through mppx’s MCP client: -32043 with a fresh challenge, nothing changed', async () => {
    const client = await connect(await mcpEndpoint())
    const before = await counts()
    const account = privateKeyToAccount(generatePrivateKey())
    McpClient.wrap(client, { methods: [evm.charge({ account, authorization: await token() })] })
    const err = await rpcError(client.callTool({ name: 'weather', arguments: { city: 'Lyon' } }))
    expect(err.code).toBe(-32043)
    expect(err.data.httpStatus).toBe(402)
    expect(err.data.challenges[0]).toMatchObject({
      method: 'evm',
      intent: 'charge',
      request: { amount: '10000' },
    })
    expect(err.data.problem).toMatchObject({ type: `${PROBLEMS}verification-failed`, status: 402 })
    expect(err.data.problem.challengeId).toBe(err.data.challenges[0]!.id)
    expect(await counts()).toEqual(before)
    await client.close()
  })

  it('a credential that is not one: -32602; a challenge not ours: -32043 invalid-challenge; nothing changed', async () => {
    const client = await connect(await mcpEndpoint())
    const before = await counts()
    const malformed = await rpcError(
      client.callTool({
        name: 'weather',
        arguments: { city: 'Lyon' },
        _meta: { 'org.paymentauth/credential': { challenge: {}, payload: {} } },
      }),
    )
    expect(malformed.code).toBe(-32602)
    expect(malformed.data.problem).toMatchObject({ type: `${PROBLEMS}malformed-credential` })
    const foreign = await rpcError(
      client.callTool({
        name: 'weather',
        arguments: { city: 'Lyon' },
        _meta: {
          'org.paymentauth/credential': {
            challenge: {
              id: 'not-ours',
              realm: 'x',
              method: 'evm',
              intent: 'charge',
              request: { amount: '1' },
            },
            payload: {},
          },
        },
      }),
    )
    expect(foreign.code).toBe(-32043)
    expect(foreign.data.problem).toMatchObject({ type: `${PROBLEMS}invalid-challenge` })
    expect(foreign.data.challenges).toHaveLength(1)
    expect(await counts()).toEqual(before)
    await client.close()
  })

  it('an endpoint taking MPP only: the unpaid call is -32042 with the challenge in data; mppx pays it', async () => {
    const client = await connect(await mcpEndpoint({ protocols: ['mpp'] }))
    const unpaid = await rpcError(client.callTool({ name: 'weather', arguments: { city: 'Paris' } }))
    expect(unpaid.code).toBe(-32042)
    expect(unpaid.data.httpStatus).toBe(402)
    expect(unpaid.data.challenges[0]).toMatchObject({ method: 'evm', intent: 'charge' })
    expect(unpaid.data.problem).toMatchObject({ type: `${PROBLEMS}payment-required` })
    const funder = createWalletClient({
      account: privateKeyToAccount(chain.payers[0]!.privateKey),
      chain: baseSepolia,
      transport: http(chain.rpcUrl),
    })
    const account = privateKeyToAccount(generatePrivateKey())
    const hash = await funder.writeContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'transfer',
      args: [account.address, 10_000n],
    })
    await svc.chain.publicClient.waitForTransactionReceipt({ hash })
    const before = upstream.served.get('weather') ?? 0
    McpClient.wrap(client, { methods: [evm.charge({ account, authorization: await token() })] })
    const paid = (await client.callTool({ name: 'weather', arguments: { city: 'Paris' } })) as {
      content: unknown
      receipt?: Record<string, unknown>
    }
    expect(paid.content).toEqual([{ type: 'text', text: 'sunny in Paris' }])
    expect(paid.receipt).toMatchObject({ method: 'evm', status: 'success' })
    expect(upstream.served.get('weather')).toBe(before + 1)
    await client.close()
  })
})
