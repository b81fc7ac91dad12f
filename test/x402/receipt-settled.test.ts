// Settled before the answer (settlement.before_answer): what the four published clients read is "paid",
// with the hash of a mined transaction that carries the payer's authorization. The x402 end-to-end suite's
// pass rule is applied to what each reports: success true, a non-empty transaction, no errorReason.
// @x402/fetch and @x402/axios (v2, PAYMENT-RESPONSE) and x402-fetch and x402-axios (v1, X-PAYMENT-RESPONSE),
// all unchanged, against a private anvil announced as base-sepolia.

import { wrapAxiosWithPayment } from '@x402/axios'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import axios from 'axios'
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
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { withPaymentInterceptor } from 'x402-axios'
import { decodeXPaymentResponse, wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { startBaseSepoliaService } from './harness.ts'

const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'
const PRICE_ATOMIC = 10_000n

const usdc = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
])

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let reader: ReturnType<typeof createPublicClient>
let meteredUrl: string

/** The x402 e2e suite's rule for a paid call: success, a non-empty transaction, no errorReason. */
function passesE2eRule(r: { success?: boolean; transaction?: string; errorReason?: string }): boolean {
  return r.success === true && typeof r.transaction === 'string' && r.transaction.length > 0 && !r.errorReason
}

/** The transaction is mined, succeeded, and the token logged this payer's authorization used in it. */
async function carriesAuthorizationOf(tx: Hex, payer: Address): Promise<boolean> {
  const receipt = await reader.getTransactionReceipt({ hash: tx })
  if (receipt.status !== 'success') return false
  const logs = parseEventLogs({ abi: usdc, logs: receipt.logs, eventName: 'AuthorizationUsed' })
  return logs.some(
    (l) =>
      l.address.toLowerCase() === chain.usdcAddress.toLowerCase() &&
      l.args.authorizer.toLowerCase() === payer.toLowerCase(),
  )
}

function balanceOf(owner: Address): Promise<bigint> {
  return reader.readContract({
    address: chain.usdcAddress,
    abi: usdc,
    functionName: 'balanceOf',
    args: [owner],
  })
}

function v2Client(key: Hex) {
  const client = new x402Client()
  registerExactEvmScheme(client, { signer: privateKeyToAccount(key) as never })
  return client
}

function v1Wallet(key: Hex) {
  return createWalletClient({
    account: privateKeyToAccount(key),
    chain: baseSepolia as Chain,
    transport: http(chain.rpcUrl),
  }).extend(publicActions)
}

beforeAll(async () => {
  chain = await startTestChain({ chainId: 84532, usdcAt: BASE_SEPOLIA_USDC })
  upstream = await startUpstream()
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  // anvil's account 8: funded with ETH for gas, no payer, not the treasury.
  svc = await startBaseSepoliaService(
    chain,
    chain.rpcUrl,
    { settlement: { before_answer: { enabled: true, window_ms: 3, wait_ms: 5_000 } } } as never,
    'warn',
    { SETTLER_PRIVATE_KEY: devAccount(8).privateKey },
  )
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: chain.payers[4]!.address, business_name: 'receipts Co' },
  })
  expect(reg.status).toBe(201)
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: reg.body.api_key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  expect(ep.status).toBe(201)
  meteredUrl = ep.body.metered_url
}, 60_000)

afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('a served exact call is settled before its answer', () => {
  it('@x402/fetch: parsePaymentResult reads settled, with the mined transaction carrying the authorization', async () => {
    const key = chain.payers[0]!.privateKey
    const payer = privateKeyToAccount(key).address
    const before = await balanceOf(payer)
    const client = v2Client(key)
    const r = await wrapFetchWithPayment(fetch, client)(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    const result = await new x402HTTPClient(client).processResponse(r)
    expect(result.paymentStatus).toBe('settled')
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(passesE2eRule(receipt)).toBe(true)
    expect(receipt).toMatchObject({ network: 'eip155:84532', payer, amount: PRICE_ATOMIC.toString() })
    expect(await carriesAuthorizationOf(receipt.transaction as Hex, payer)).toBe(true)
    // The money moved before the answer, exactly once.
    expect(await balanceOf(payer)).toBe(before - PRICE_ATOMIC)
    // The leader's job finds the recorded transaction mined and books it: settled, nothing sent again.
    await svc.jobs.runNow('x402-settlement')
    const [claim] = await svc.sql<{ settlement_tx: string; settled: boolean }[]>`
      SELECT settlement_tx, settled_at IS NOT NULL AS settled FROM claims WHERE payer = ${payer.toLowerCase()} OR payer = ${payer}`
    expect(claim).toEqual({ settlement_tx: receipt.transaction, settled: true })
    expect(await balanceOf(payer)).toBe(before - PRICE_ATOMIC)
  })

  it('@x402/axios: the e2e pass rule holds', async () => {
    const key = chain.payers[1]!.privateKey
    const payer = privateKeyToAccount(key).address
    // @x402/axios (2.11 installed) carries its own @x402/core: the same class, another declaration.
    const api = wrapAxiosWithPayment(axios.create(), v2Client(key) as never)
    const r = await api.get(meteredUrl)
    expect(r.status).toBe(200)
    const receipt = decodePaymentResponseHeader(r.headers['payment-response'])
    expect(passesE2eRule(receipt)).toBe(true)
    expect(await carriesAuthorizationOf(receipt.transaction as Hex, payer)).toBe(true)
  })

  it('x402-fetch (v1): the e2e pass rule holds on X-PAYMENT-RESPONSE', async () => {
    const key = chain.payers[2]!.privateKey
    const payer = privateKeyToAccount(key).address
    const pay = wrapFetchV1(fetch, v1Wallet(key) as never)
    const r = await pay(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    const receipt = decodeXPaymentResponse(r.headers.get('x-payment-response')!)
    expect(passesE2eRule(receipt)).toBe(true)
    expect(receipt).toMatchObject({ network: 'base-sepolia', payer })
    expect(await carriesAuthorizationOf(receipt.transaction as Hex, payer)).toBe(true)
  })

  it('x402-axios (v1): the e2e pass rule holds on X-PAYMENT-RESPONSE', async () => {
    const key = chain.payers[3]!.privateKey
    const payer = privateKeyToAccount(key).address
    const api = withPaymentInterceptor(axios.create(), v1Wallet(key) as never)
    const r = await api.get(meteredUrl)
    expect(r.status).toBe(200)
    const receipt = decodeXPaymentResponse(r.headers['x-payment-response'])
    expect(passesE2eRule(receipt)).toBe(true)
    expect(await carriesAuthorizationOf(receipt.transaction as Hex, payer)).toBe(true)
  })

  it('calls within one window share one transaction, each receipt naming it', async () => {
    const keys = [chain.payers[0]!.privateKey, chain.payers[1]!.privateKey, chain.payers[2]!.privateKey]
    const answers = await Promise.all(keys.map((k) => wrapFetchWithPayment(fetch, v2Client(k))(meteredUrl)))
    const txs = answers.map((r) => {
      expect(r.status).toBe(200)
      const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
      expect(passesE2eRule(receipt)).toBe(true)
      return receipt.transaction
    })
    for (const [i, tx] of txs.entries())
      expect(await carriesAuthorizationOf(tx as Hex, privateKeyToAccount(keys[i]!).address)).toBe(true)
    // The test chain has no AuthorizationBatcher unless deployed: then one transaction each, still honest.
    expect(new Set(txs).size).toBeLessThanOrEqual(3)
  })
})

describe('when the settler cannot send, the receipt says pending and the batch settles it', () => {
  it('a settler without gas: no transaction named, settled afterwards by the treasury, charged once', async () => {
    // A fresh key holds no ETH: its broadcast is refused (insufficient funds).
    const broke = await startBaseSepoliaService(
      chain,
      chain.rpcUrl,
      { settlement: { before_answer: { enabled: true, window_ms: 3, wait_ms: 200 } } } as never,
      'error',
      { SETTLER_PRIVATE_KEY: generatePrivateKey() },
    )
    try {
      const reg = await callApi(broke.url, '/api/v1/register', {
        body: { wallet_address: chain.payers[4]!.address, business_name: 'broke settler Co' },
      })
      const ep = await callApi(broke.url, '/api/v1/endpoints', {
        key: reg.body.api_key,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
      })
      const key = chain.payers[3]!.privateKey
      const payer = privateKeyToAccount(key).address
      const before = await balanceOf(payer)
      const client = v2Client(key)
      const r = await wrapFetchWithPayment(fetch, client)(ep.body.metered_url)
      expect(r.status).toBe(200)
      const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
      // Nothing untrue: not settled, no transaction.
      expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: '' })
      expect((await new x402HTTPClient(client).processResponse(r)).paymentStatus).toBe('settle_failed')
      // The leader's batch takes it once it is older than the settle-before-answer window.
      await broke.flushCaptures()
      await expect
        .poll(
          async () => {
            await broke.jobs.runNow('x402-settlement')
            return balanceOf(payer)
          },
          { timeout: 15_000, interval: 300 },
        )
        .toBe(before - PRICE_ATOMIC)
      const [claim] = await broke.sql<{ settled: boolean }[]>`
        SELECT settled_at IS NOT NULL AS settled FROM claims WHERE lower(payer) = ${payer.toLowerCase()}`
      expect(claim).toEqual({ settled: true })
    } finally {
      await broke.stop()
    }
  })
})
