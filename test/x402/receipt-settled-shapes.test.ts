// Settle before the answer in the deployment shapes the docs recommend, on the default settings (no
// SETTLER_PRIVATE_KEY, no x402_settlement choice): `server.workers: 2`, and two instances on one PostgreSQL
// database. Each data-plane process claims its own settler slot (an advisory lock; on the embedded database,
// its worker index), so the published clients, unchanged, get a receipt naming a mined transaction that
// carries their authorization whichever process served them, and two processes never share a settler's
// nonces. Real child processes (`node src/main.ts`) on a private anvil standing in for base-sepolia; the
// derived settler slots are given anvil ETH as an operator would fund them.

import { x402Client } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  parseAbi,
  parseEventLogs,
  publicActions,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decodeXPaymentResponse, wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { type ChildService, startChildService } from '../helpers/child-service.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { fundSettlerSlots, registerMerchantKey, startBaseSepoliaChain } from './harness.ts'

const usdc = parseAbi(['event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)'])

let chain: DevChain
let upstream: Awaited<ReturnType<typeof startUpstream>>
let reader: ReturnType<typeof createPublicClient>

/** The x402 e2e suite's rule for a paid call: success, a non-empty transaction, no errorReason. */
function passesE2eRule(r: { success?: boolean; transaction?: string; errorReason?: string }): boolean {
  return r.success === true && typeof r.transaction === 'string' && r.transaction.length > 0 && !r.errorReason
}

function child(databaseUrl: string | null, env: Record<string, string> = {}): Promise<ChildService> {
  return startChildService({
    databaseUrl,
    treasuryKey: chain.treasury.privateKey,
    rpcUrl: chain.rpcUrl,
    usdcAddress: chain.usdcAddress,
    // The default settlement settings, on a private chain standing in for base-sepolia (the clients know it).
    env: { NETWORK: 'base-sepolia', ...env },
  })
}

/** Registers an owner and an endpoint that makes no x402_settlement choice (the default). */
async function defaultEndpoint(url: string): Promise<string> {
  const merchantKey = await registerMerchantKey(url, chain.payers[4]!.address, 'shapes Co')
  const ep = await callApi(url, '/api/v1/endpoints', {
    key: merchantKey,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  expect(ep.status, JSON.stringify(ep.body)).toBe(201)
  expect(ep.body.x402_settlement).toBe('before_answer')
  return ep.body.metered_url
}

/** A fresh connection per call (`connection: close`): the kernel picks a worker each time. */
const closing: typeof fetch = (input, init) => {
  // The clients hand a Request (the payment header on it) or init headers: keep every header they set.
  const request = new Request(input, init)
  const headers = new Headers(request.headers)
  headers.set('connection', 'close')
  return fetch(new Request(request, { headers }))
}

/** Pays once with @x402/fetch (v2) or x402-fetch (v1); returns the receipt and the payer. */
async function pay(url: string, v: 1 | 2, payerIndex: number) {
  const key = chain.payers[payerIndex]!.privateKey
  const payer = privateKeyToAccount(key).address
  let r: Response
  if (v === 2) {
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: privateKeyToAccount(key) as never })
    r = await wrapFetchWithPayment(closing, client)(url)
  } else {
    const wallet = createWalletClient({
      account: privateKeyToAccount(key),
      chain: baseSepolia as Chain,
      transport: http(chain.rpcUrl),
    }).extend(publicActions)
    r = await wrapFetchV1(closing, wallet as never)(url)
  }
  expect(r.status, await r.clone().text()).toBe(200)
  const receipt =
    v === 2
      ? decodePaymentResponseHeader(r.headers.get('payment-response')!)
      : decodeXPaymentResponse(r.headers.get('x-payment-response')!)
  return { receipt: receipt as { success?: boolean; transaction?: string; errorReason?: string }, payer }
}

/** The transaction is mined, succeeded, logged this payer's authorization used; returns its sender. */
async function settledBy(tx: Hex, payer: Address): Promise<Address> {
  const receipt = await reader.getTransactionReceipt({ hash: tx })
  expect(receipt.status).toBe('success')
  const used = parseEventLogs({ abi: usdc, logs: receipt.logs, eventName: 'AuthorizationUsed' }).filter(
    (l) =>
      l.address.toLowerCase() === chain.usdcAddress.toLowerCase() &&
      l.args.authorizer.toLowerCase() === payer.toLowerCase(),
  )
  expect(used.length).toBeGreaterThanOrEqual(1)
  return receipt.from
}

/** Pays until calls were settled by `senders` distinct settlers (at most `max` calls), each passing the rule. */
async function payUntilSenders(url: string, senders: number, max: number): Promise<Set<string>> {
  const seen = new Set<string>()
  for (let i = 0; i < max && seen.size < senders; i++) {
    const { receipt, payer } = await pay(url, i % 2 === 0 ? 2 : 1, i % 4)
    expect(passesE2eRule(receipt), JSON.stringify(receipt)).toBe(true)
    seen.add((await settledBy(receipt.transaction as Hex, payer)).toLowerCase())
  }
  return seen
}

function slotAddress(slot: number): string {
  const key = settlerSlotKey({ settlerKey: null, treasuryKey: chain.treasury.privateKey }, slot)!
  return privateKeyToAccount(key).address.toLowerCase()
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  upstream = await startUpstream()
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  await fundSettlerSlots(chain.rpcUrl, chain.treasury.privateKey, 4)
}, 60_000)

afterAll(async () => {
  await upstream?.close()
  await chain?.stop()
})

// On a PostgreSQL server (DATABASE_URL). On the embedded database (slots by worker index) the two-worker child
// on a chain announced as base-sepolia did not print its banner within child-service's 60 s in this branch's
// runs (machine load 10-20; test/data-plane/workers-embedded.test.ts, NETWORK=local, passed beside it): left
// to find out whether that is load or a fault before running it there.
describe.skipIf(!process.env.DATABASE_URL)(
  'server.workers: 2 settles before the answer in both workers',
  () => {
    let svc: ChildService
    beforeAll(async () => {
      svc = await child(await freshDatabaseUrl(), { WORKERS: '2' })
    }, 90_000)
    afterAll(async () => {
      await svc?.kill()
    })

    it('the published clients read every call as paid, settled by two settler slots', async () => {
      const url = await defaultEndpoint(svc.url)
      const senders = await payUntilSenders(url, 2, 24)
      // Both workers served and settled, each from its own slot (never the treasury, never the same nonces).
      expect([...senders].sort()).toEqual([slotAddress(0), slotAddress(1)].sort())
    }, 120_000)
  },
)

describe.skipIf(!process.env.DATABASE_URL)('two instances on one PostgreSQL database', () => {
  let a: ChildService
  let b: ChildService
  beforeAll(async () => {
    const db = await freshDatabaseUrl()
    a = await child(db)
    b = await child(db)
  }, 120_000)
  afterAll(async () => {
    await a?.kill()
    await b?.kill()
  })

  it('each instance settles before the answer from its own slot', async () => {
    const urlA = await defaultEndpoint(a.url)
    // The same endpoint through the other instance (same database): its metered path on b's address.
    const urlB = urlA.replace(a.url, b.url)
    const fromA = await payUntilSenders(urlA, 1, 1)
    const fromB = await payUntilSenders(urlB, 1, 1)
    const both = [...fromA, ...fromB]
    expect(new Set(both).size).toBe(2)
    expect(both.sort()).toEqual([slotAddress(0), slotAddress(1)].sort())
    // Interleaved calls on both keep passing: no nonce of one slot is taken by the other.
    const mixed = await Promise.all([0, 1, 2, 3].map((i) => pay(i % 2 === 0 ? urlA : urlB, 2, i)))
    for (const { receipt } of mixed) expect(passesE2eRule(receipt), JSON.stringify(receipt)).toBe(true)
  }, 120_000)
})
