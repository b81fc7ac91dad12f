// The x402 repository's own e2e clients, unchanged (./upstream, PROVENANCE.md), against tollgate metered URLs
// on the DEFAULT settings (settle before the answer): fetch and axios (v2), the legacy fetch and axios (v1)
// and the MCP client (@x402/mcp over the SDK's SSE transport), each a child process configured only by the
// variables the suite's runner sets. Judged by the suite's own pass rule (exit 0, not 402, a payment response
// with success, a transaction hash, no errorReason), then checked here: the transaction is mined and carries
// that payer's authorization, and tollgate booked the call once, settled in that transaction.
import { generateKeyPairSync } from 'node:crypto'
import { base58 } from '@scure/base'
import { type Address, createPublicClient, type Hex, http, parseAbi, parseEventLogs } from 'viem'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { type McpSseUpstream, startMcpSseUpstream } from '../helpers/mcp-sse-upstream.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { startBaseSepoliaService } from '../x402/harness.ts'
import { type ClientRun, prepareSuiteDir, runClient, type SuiteDir, suiteVerdict } from './run-upstream.ts'

const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'
const usdc = parseAbi(['event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)'])

let chain: DevChain
let svc: Service
let upstream: Upstream
let mcp: McpSseUpstream
let dir: SuiteDir
let reader: ReturnType<typeof createPublicClient>
let meteredUrl: string
let mcpUrl: string

/** A Solana key the clients require (they build an SVM signer at start); never used on these EVM routes. */
function solanaKey(): string {
  const jwk = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' })
  const seed = Buffer.from(jwk.d!, 'base64url')
  const pub = Buffer.from(jwk.x!, 'base64url')
  return base58.encode(Uint8Array.from([...seed, ...pub]))
}

/** The variables the suite's runner sets for a client (e2e/src/clients/generic-client.ts). */
function clientEnv(payer: number, serverUrl: string, endpointPath: string): Record<string, string> {
  return {
    EVM_PRIVATE_KEY: chain.payers[payer]!.privateKey,
    SVM_PRIVATE_KEY: solanaKey(),
    RESOURCE_SERVER_URL: serverUrl,
    ENDPOINT_PATH: endpointPath,
    EVM_NETWORK: 'eip155:84532',
    EVM_RPC_URL: chain.rpcUrl,
  }
}

/** The transaction is mined, succeeded, and the token logged this payer's authorization used in it. */
async function carriesAuthorizationOf(tx: Hex, payer: Address): Promise<boolean> {
  const receipt = await reader.getTransactionReceipt({ hash: tx })
  if (receipt.status !== 'success') return false
  return parseEventLogs({ abi: usdc, logs: receipt.logs, eventName: 'AuthorizationUsed' }).some(
    (l) =>
      l.address.toLowerCase() === chain.usdcAddress.toLowerCase() &&
      l.args.authorizer.toLowerCase() === payer.toLowerCase(),
  )
}

/** Calls booked for this payer whose claim was settled in `tx`. */
async function bookedIn(tx: string, payer: Address): Promise<number> {
  await svc.flushCaptures()
  const [row] = await svc.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM calls c JOIN claims k ON call_proof_key(c.proof_key, c.proof) = k.proof_key
    WHERE lower(k.payer) = ${payer.toLowerCase()} AND k.settlement_tx = ${tx} AND k.settled_at IS NOT NULL`
  return row!.n
}

beforeAll(async () => {
  dir = await prepareSuiteDir()
  expect(dir.missing, 'npm packages the vendored clients import (PROVENANCE.md)').toEqual([])
  chain = await startTestChain({ chainId: 84532, usdcAt: BASE_SEPOLIA_USDC, payers: 7 })
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  upstream = await startUpstream()
  mcp = await startMcpSseUpstream()
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {}, 'warn')
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: chain.payers[6]!.address, business_name: 'x402 e2e suite Co' },
  })
  expect(reg.status).toBe(201)
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: reg.body.api_key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.001 },
  })
  expect(ep.status).toBe(201)
  // No settlement choice made: the default.
  expect(ep.body.x402_settlement).toBe('before_answer')
  meteredUrl = ep.body.metered_url
  const tools = await callApi(svc.url, '/api/v1/endpoints', {
    key: reg.body.api_key,
    body: {
      upstream_url: mcp.url,
      kind: 'mcp',
      mcp: { tools: { weather: 0.001 }, default_price: 0.001, free_tools: ['echo'], in_band: true },
    },
  })
  expect(tools.status, tools.text).toBe(201)
  mcpUrl = tools.body.metered_url
}, 120_000)

afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await mcp?.close()
  await chain?.stop()
  dir?.remove()
})

const CLIENTS = [
  { name: 'fetch (v2)', path: 'clients/fetch/index.ts', payer: 0 },
  { name: 'axios (v2)', path: 'clients/axios/index.ts', payer: 1 },
  { name: 'legacy fetch (v1)', path: 'legacy/clients/fetch/index.ts', payer: 2 },
  { name: 'legacy axios (v1)', path: 'legacy/clients/axios/index.ts', payer: 3 },
]
const MCP_CLIENT = { name: 'MCP (@x402/mcp, SSE)', path: 'clients/mcp-typescript/index.ts', payer: 4 }

/** Each client's run, all started together: each process spends most of its time loading its imports. */
const runs = new Map<string, ClientRun>()

/** The suite's verdict, then the transaction mined with this payer's authorization, the call booked once. */
async function expectPaidAndBooked(name: string, payerIndex: number) {
  const run = runs.get(name)!
  expect(suiteVerdict(run), run.stdout + run.stderr).toBeNull()
  expect(run.result!.status_code).toBe(200)
  const receipt = run.result!.payment_response
  const payer = chain.payers[payerIndex]!.address
  expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
  expect(await carriesAuthorizationOf(receipt.transaction, payer)).toBe(true)
  // The answer goes out once the transaction is mined; the booking follows just after.
  await expect.poll(() => bookedIn(receipt.transaction, payer), { timeout: 10_000, interval: 200 }).toBe(1)
  return receipt
}

describe('the x402 e2e suite clients, unchanged, against a default metered endpoint', () => {
  beforeAll(async () => {
    // The metered URL is the resource server: its origin the base, its path the endpoint path.
    const url = new URL(meteredUrl)
    const jobs = [
      ...CLIENTS.map((c) => ({ c, env: clientEnv(c.payer, url.origin, url.pathname) })),
      { c: MCP_CLIENT, env: clientEnv(MCP_CLIENT.payer, mcpUrl, 'weather') },
    ]
    // Three at a time: on two shared cores more only contend.
    const next = async (): Promise<void> => {
      const job = jobs.shift()
      if (!job) return
      runs.set(job.c.name, await runClient(dir, job.c.path, job.env, 150_000))
      return next()
    }
    await Promise.all([next(), next(), next()])
    for (const [name, run] of runs) console.log(name, run.code, run.ms, 'ms')
  }, 300_000)

  for (const c of CLIENTS) {
    it(`${c.name} passes the suite's rule; the payment is mined and booked once`, async () => {
      await expectPaidAndBooked(c.name, c.payer)
    })
  }

  it("the MCP client pays the tool in band over SSE and passes the suite's rule", async () => {
    const receipt = await expectPaidAndBooked(MCP_CLIENT.name, MCP_CLIENT.payer)
    expect(runs.get(MCP_CLIENT.name)!.result!.data).toEqual({ text: 'sunny in San Francisco' })
    expect(receipt).toMatchObject({ success: true, network: 'eip155:84532' })
    expect(mcp.served.get('weather')).toBe(1)
  })
})
