// tollgate in the facilitator slot of the x402 repository's own e2e suite: its Express and Hono servers,
// unchanged (./upstream, PROVENANCE.md), started as the suite's runner starts them (FACILITATOR_URL, with the
// suite's mock facilitator as MOCK_FACILITATOR_URL for the routes tollgate does not offer), paid by the suite's
// fetch and axios clients on `exact` (EIP-3009) and on `upto` (Permit2: the route signs for 2000 and settles
// 1000, after the runner's own step for such a route, the suite's scripts/permit2-approval.ts). The suite's
// pass rule holds, the transaction is mined with the payer's authorization (or moves the payer's 1000), and
// tollgate booked the settlement once (payTo the treasury: a settlement row and the owner share and fee
// entries).
//
// What the servers could not be given through their own variables: they build `new HTTPFacilitatorClient({
// url: FACILITATOR_URL })` with no `createAuthHeaders`, so they cannot send the merchant's API key, and tollgate's
// facilitator answers 401 without one. FACILITATOR_URL therefore names a loopback proxy that adds
// `Authorization: Bearer <key>` and forwards to /api/v1/facilitator, as a merchant's deployment would wrap it.
import { generateKeyPairSync } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { base58 } from '@scure/base'
import { type Address, createPublicClient, type Hex, http, parseAbi, parseEventLogs } from 'viem'
import { base } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { loadConfig } from '../../src/config/load.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { callApi } from '../helpers/service.ts'
import { fundSettlerSlots } from '../x402/harness.ts'
import {
  type ClientRun,
  prepareSuiteDir,
  runClient,
  type SuiteDir,
  startServer,
  suiteVerdict,
} from './run-upstream.ts'

// Base's USDC: the address and EIP-712 domain ("USD Coin", "2") @x402/evm's default asset for eip155:8453
// names, and the test token's own domain. (Base Sepolia's USDC signs as "USDC": the servers' "$0.001" price
// would name a domain the test token does not have.)
const BASE_USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'
const NETWORK = 'eip155:8453'
const PRICE_ATOMIC = 1_000n // the servers' "$0.001"
/** The servers' upto route: a 2000 maximum, its handler settles 1000 (setSettlementOverrides). */
const UPTO_SETTLED_ATOMIC = 1_000n
const usdc = parseAbi([
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
])

let chain: DevChain
let svc: Service
let dir: SuiteDir
let reader: ReturnType<typeof createPublicClient>
let apiKey: string
let authProxy: Server
let authProxyUrl: string
/** The suite's mock facilitator: claims every kind so that routes tollgate does not offer pass start-up. */
let mockUrl: string
const stops: Array<() => Promise<void>> = []

function freePort(): Promise<number> {
  return new Promise((done) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo
      s.close(() => done(port))
    })
  })
}

function solanaKey(): { secret: string; address: string } {
  const jwk = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' })
  const pub = Buffer.from(jwk.x!, 'base64url')
  const secret = base58.encode(Uint8Array.from([...Buffer.from(jwk.d!, 'base64url'), ...pub]))
  return { secret, address: base58.encode(Uint8Array.from(pub)) }
}

/** The merchant's side of the key: every facilitator request forwarded with its API key. */
function startAuthProxy(target: string, key: string): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', async () => {
      try {
        const r = await fetch(`${target}${req.url}`, {
          method: req.method,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          ...(req.method === 'POST' ? { body: Buffer.concat(chunks) } : {}),
        })
        res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' })
        res.end(Buffer.from(await r.arrayBuffer()))
      } catch (e) {
        res.writeHead(502).end(String(e))
      }
    })
  })
  return new Promise((done) => server.listen(0, '127.0.0.1', () => done(server)))
}

/** tollgate on a private anvil announced as Base (chain id 8453), its USDC at Base's address. */
async function startBaseService(): Promise<Service> {
  const databaseUrl = await freshDatabaseUrl()
  const config = loadConfig({
    env: {
      NODE_ENV: 'test',
      NETWORK: 'base',
      RPC_URL: chain.rpcUrl,
      USDC_ADDRESS: chain.usdcAddress,
      TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
    },
    overrides: {
      database: { data_dir: 'memory://' },
      settlement: { interval_ms: 200 },
      facilitator: { settle_wait_ms: 30_000 },
    } as never,
  })
  await fundSettlerSlots(chain.rpcUrl, chain.treasury.privateKey, 2)
  return startService(config, { logger: createLogger('warn') })
}

async function carriesAuthorizationOf(tx: Hex, payer: Address): Promise<boolean> {
  const receipt = await reader.getTransactionReceipt({ hash: tx })
  if (receipt.status !== 'success') return false
  return parseEventLogs({ abi: usdc, logs: receipt.logs, eventName: 'AuthorizationUsed' }).some(
    (l) =>
      l.address.toLowerCase() === chain.usdcAddress.toLowerCase() &&
      l.args.authorizer.toLowerCase() === payer.toLowerCase(),
  )
}

/** What the payer sent the treasury in a successful transaction (its Transfer logs of the test USDC). */
async function transferredIn(tx: Hex, payer: Address): Promise<bigint> {
  const receipt = await reader.getTransactionReceipt({ hash: tx })
  if (receipt.status !== 'success') return 0n
  return parseEventLogs({ abi: usdc, logs: receipt.logs, eventName: 'Transfer' })
    .filter(
      (l) =>
        l.address.toLowerCase() === chain.usdcAddress.toLowerCase() &&
        l.args.from.toLowerCase() === payer.toLowerCase() &&
        l.args.to.toLowerCase() === chain.treasury.address.toLowerCase(),
    )
    .reduce((sum, l) => sum + l.args.value, 0n)
}

/** The payer's facilitator settlements and the ledger entries booked for them. */
async function bookings(payer: Address) {
  const rows = await svc.sql<
    { id: string; tx: string | null; custody: string; amount: string; entries: number }[]
  >`
    SELECT f.id, f.settlement_tx AS tx, f.custody, f.amount_atomic::text AS amount,
           (SELECT count(*) FROM ledger_entries l WHERE l.source_type = 'facilitator' AND l.source_id = f.id)::int
             AS entries
    FROM facilitator_settlements f WHERE lower(f.payer) = ${payer.toLowerCase()}`
  return rows.map((r) => ({ ...r }))
}

beforeAll(async () => {
  dir = await prepareSuiteDir()
  expect(dir.missing, 'npm packages the vendored files import (PROVENANCE.md)').toEqual([])
  chain = await startTestChain({ chainId: 8453, usdcAt: BASE_USDC, payers: 6 })
  reader = createPublicClient({ chain: base, transport: http(chain.rpcUrl) }) as never
  svc = await startBaseService()
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: chain.payers[5]!.address, business_name: 'x402 e2e servers Co' },
  })
  expect(reg.status).toBe(201)
  apiKey = reg.body.api_key
  authProxy = await startAuthProxy(`${svc.url}/api/v1/facilitator`, apiKey)
  authProxyUrl = `http://127.0.0.1:${(authProxy.address() as AddressInfo).port}`
  const mockPort = await freePort()
  const mock = await startServer(
    dir,
    'mock-facilitator/index.ts',
    { PORT: String(mockPort), EVM_NETWORK: NETWORK },
    `http://127.0.0.1:${mockPort}/health`,
  )
  stops.push(mock.stop)
  mockUrl = `http://127.0.0.1:${mockPort}`
}, 120_000)

afterAll(async () => {
  for (const stop of stops.reverse()) await stop()
  authProxy?.close()
  await svc?.stop()
  await chain?.stop()
  dir?.remove()
})

/** The variables the suite's runner gives a server (e2e/src/servers/generic-server.ts). */
async function startSuiteServer(path: string) {
  const port = await freePort()
  const server = await startServer(
    dir,
    path,
    {
      PORT: String(port),
      EVM_NETWORK: NETWORK,
      EVM_RPC_URL: chain.rpcUrl,
      // payTo the treasury: tollgate books the money to the merchant whose key called.
      EVM_PAYEE_ADDRESS: chain.treasury.address,
      SVM_PAYEE_ADDRESS: solanaKey().address,
      FACILITATOR_URL: authProxyUrl,
      MOCK_FACILITATOR_URL: mockUrl,
      // The suite's runner passes its network's permit2Asset (e2e/src/networks/networks.ts): Base's USDC.
      EVM_PERMIT2_ASSET: BASE_USDC,
    },
    `http://127.0.0.1:${port}/health`,
  )
  stops.push(server.stop)
  return { url: `http://127.0.0.1:${port}`, output: server.output }
}

function clientEnv(payer: number, serverUrl: string, endpointPath: string): Record<string, string> {
  return {
    EVM_PRIVATE_KEY: chain.payers[payer]!.privateKey,
    SVM_PRIVATE_KEY: solanaKey().secret,
    RESOURCE_SERVER_URL: serverUrl,
    ENDPOINT_PATH: endpointPath,
    EVM_NETWORK: NETWORK,
    EVM_RPC_URL: chain.rpcUrl,
  }
}

async function expectSettledAndBookedOnce(run: ClientRun, payerIndex: number, serverOutput: string) {
  expect(suiteVerdict(run), `${run.stdout}\n${run.stderr}\nserver:\n${serverOutput}`).toBeNull()
  const receipt = run.result!.payment_response
  const payer = chain.payers[payerIndex]!.address
  expect(receipt).toMatchObject({ success: true, network: NETWORK })
  expect(await carriesAuthorizationOf(receipt.transaction, payer)).toBe(true)
  // One settlement row, settled in that transaction, with the owner share and the fee booked once.
  expect(await bookings(payer)).toEqual([
    expect.objectContaining({
      tx: receipt.transaction,
      custody: 'treasury',
      amount: String(PRICE_ATOMIC),
      entries: 2,
    }),
  ])
}

// Each server and each client once, as the suite's minimised mode (--min) covers every component.
const PAIRS = [
  {
    server: 'express',
    serverPath: 'servers/express/index.ts',
    client: 'fetch',
    clientPath: 'clients/fetch/index.ts',
  },
  {
    server: 'hono',
    serverPath: 'servers/hono/index.ts',
    client: 'axios',
    clientPath: 'clients/axios/index.ts',
  },
]

describe('the suite servers with tollgate as their facilitator, paid by the suite clients', () => {
  for (const [index, p] of PAIRS.entries()) {
    it(`exact (EIP-3009): ${p.server} server, ${p.client} client: the suite's rule, settled, booked once`, async () => {
      const server = await startSuiteServer(p.serverPath)
      const run = await runClient(
        dir,
        p.clientPath,
        clientEnv(index, server.url, '/exact/evm/eip3009'),
        120_000,
      )
      await expectSettledAndBookedOnce(run, index, server.output())
    }, 180_000)
  }
  for (const [index, p] of PAIRS.entries()) {
    it(`upto (Permit2): ${p.server} server, ${p.client} client: the suite's rule, 1000 of 2000 settled, booked once`, async () => {
      const payerIndex = index + 2
      const payer = chain.payers[payerIndex]!
      // The runner's step before a permit2Direct endpoint: the suite's own script grants Permit2 the client's
      // allowance (for the network's permit2Asset: the runner names Base Sepolia's USDC, which the script
      // does not list on eip155:8453, so the asset is left to the script's list for the network).
      const approval = await runClient(
        dir,
        'scripts/permit2-approval.ts',
        { CLIENT_EVM_PRIVATE_KEY: payer.privateKey, EVM_NETWORK: NETWORK, EVM_RPC_URL: chain.rpcUrl },
        60_000,
        ['approve'],
      )
      expect(approval.code, `${approval.stdout}\n${approval.stderr}`).toBe(0)
      const server = await startSuiteServer(p.serverPath)
      const run = await runClient(
        dir,
        p.clientPath,
        clientEnv(payerIndex, server.url, '/upto/evm/permit2'),
        120_000,
      )
      const context = `${run.stdout}\n${run.stderr}\nserver:\n${server.output()}`
      expect(suiteVerdict(run), context).toBeNull()
      const receipt = run.result!.payment_response
      expect(receipt, context).toMatchObject({ success: true, network: NETWORK })
      // The route signs for 2000 and its handler settles 1000: the payer's 1000 reached the treasury in
      // the transaction the receipt names.
      expect(await transferredIn(receipt.transaction, payer.address), context).toBe(UPTO_SETTLED_ATOMIC)
      expect(await bookings(payer.address)).toEqual([
        expect.objectContaining({
          tx: receipt.transaction,
          custody: 'treasury',
          amount: String(UPTO_SETTLED_ATOMIC),
          entries: 2,
        }),
      ])
    }, 180_000)
  }
})
