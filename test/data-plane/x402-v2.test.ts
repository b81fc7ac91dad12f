// x402 v2 clients pay tollgate unchanged: `@x402/fetch` with the `@x402/evm` exact scheme reads the
// PAYMENT-REQUIRED header, signs an EIP-3009 authorization, retries with PAYMENT-SIGNATURE and reads the
// PAYMENT-RESPONSE receipt. Beside it: the reason in PAYMENT-REQUIRED, no-store and CORS on the 402 and a
// browser preflight, `accepted` deep-matched, exact amounts, an ERC-1271 smart-wallet payer, the dry run.
// Same setup as the v1 test (x402.test.ts): a private anvil with chain id 84532 as base-sepolia.

import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import {
  type Address,
  type Chain,
  createWalletClient,
  type Hex,
  http,
  publicActions,
  toFunctionSelector,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPaymentHeader } from 'x402/client'
import { PaymentRequirementsSchema } from 'x402/types'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { fundedSmartWallet } from '../chain/contracts/smart-wallet.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from '../x402/harness.ts'

checkPaymentProtocol()

const PRICE_ATOMIC = 10_000n // 0.01 USDC
const NETWORK = 'eip155:84532'

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let meteredUrl: string
let ownerKey: string

function startX402Service(rpcUrl: string, x402: Record<string, unknown> = {}): Promise<Service> {
  // The pending receipt and the leader's batch are what this file follows: settle after, explicitly (the
  // default settles before the answer: test/x402/receipt-settled.test.ts).
  return startBaseSepoliaService(chain, rpcUrl, {
    x402,
    settlement: { before_answer: { enabled: false } },
  } as never)
}

async function createEndpoint(service: Service, price: number): Promise<string> {
  ownerKey = await registerMerchantKey(service.url, chain.payers[4]!.address, 'x402 v2 Co')
  const ep = await callApi(service.url, '/api/v1/endpoints', {
    key: ownerKey,
    body: { upstream_url: `${upstream.url}/echo`, price },
  })
  expect(ep.status).toBe(201)
  return ep.body.metered_url
}

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)

/** An unpaid 402 and its decoded PAYMENT-REQUIRED header. */
async function paymentRequired(url = meteredUrl) {
  const r = await fetch(url)
  expect(r.status).toBe(402)
  return { response: r, required: decodePaymentRequiredHeader(r.headers.get('payment-required')!) }
}

/** A v2 PAYMENT-SIGNATURE signed by the published client for the terms given (ours, or altered). */
async function signV2(required: Awaited<ReturnType<typeof paymentRequired>>['required'], key: Hex) {
  const { client } = exactPayer(privateKeyToAccount(key))
  // These tests sign terms on purpose (other assets too): the client's own spending guard is off here.
  client.setSpendControls(false)
  const payload = await client.createPaymentPayload(required as never)
  return { payload, header: Buffer.from(JSON.stringify(payload)).toString('base64') }
}

async function refusedV2(header: string, reason: string) {
  const before = upstream.count()
  const r = await fetch(meteredUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
  expect(r.status).toBe(402)
  expect(decodePaymentRequiredHeader(r.headers.get('payment-required')!).error).toBe(reason)
  expect(((await r.json()) as { error: string }).error).toBe(reason)
  expect(upstream.count()).toBe(before)
}

beforeAll(async () => {
  // The test USDC at Base Sepolia's canonical USDC address: the published v2 client pays only assets it
  // knows unless told otherwise (spendControls), and it knows that one.
  chain = await startBaseSepoliaChain()
  upstream = await startUpstream()
  svc = await startX402Service(chain.rpcUrl)
  meteredUrl = await createEndpoint(svc, 0.01)
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('x402 v2 from the published client (@x402/fetch + @x402/evm exact)', () => {
  let paidHeader: string | undefined

  it('pays, is served, and reads a PAYMENT-RESPONSE saying settlement is pending; settled by the batch', async () => {
    const payer = privateKeyToAccount(chain.payers[0]!.privateKey)
    const { fetch: pay } = exactPayer(payer)
    const before = await balanceOf(payer.address)
    const countBefore = upstream.count()
    const r = await pay(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(await r.json()).toMatchObject({ method: 'GET', path: '/echo' })
    expect(upstream.count()).toBe(countBefore + 1)
    // The v2 receipt only: no v1 header beside it.
    expect(r.headers.get('x-payment-response')).toBeNull()
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toEqual({
      success: false,
      errorReason: 'settlement_pending',
      errorMessage: expect.any(String),
      transaction: '',
      network: NETWORK,
      payer: payer.address,
      amount: PRICE_ATOMIC.toString(),
    })

    // Settled later, by the batch: then the money moves, exactly the price.
    expect(await balanceOf(payer.address)).toBe(before)
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    await expect
      .poll(() => balanceOf(payer.address), { timeout: 10_000, interval: 100 })
      .toBe(before - PRICE_ATOMIC)
  })

  it('the 402 carries the reason in PAYMENT-REQUIRED, no-store and CORS', async () => {
    const { response, required } = await paymentRequired()
    expect(required).toMatchObject({
      x402Version: 2,
      error: 'payment_required',
      accepts: [
        {
          scheme: 'exact',
          network: NETWORK,
          amount: PRICE_ATOMIC.toString(),
          asset: chain.usdcAddress,
          payTo: chain.treasury.address,
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    })
    expect(response.headers.get('cache-control')).toBe('no-store')
    expect(response.headers.get('access-control-allow-origin')).toBe('*')
    expect(response.headers.get('access-control-expose-headers')).toContain('PAYMENT-REQUIRED')
    expect(response.headers.get('access-control-expose-headers')).toContain('PAYMENT-RESPONSE')

    // A payment used once is refused with its reason, in the header a v2 client reads.
    const { header } = await signV2(required, chain.payers[1]!.privateKey)
    const first = await fetch(meteredUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(first.status).toBe(200)
    await first.arrayBuffer()
    paidHeader = header
    await refusedV2(header, 'proof_already_used')
  })

  it('`accepted` must be the advertised requirement, field for field', async () => {
    const { required } = await paymentRequired()
    const key = chain.payers[2]!.privateKey
    const ours = required.accepts[0]!
    for (const altered of [
      { ...ours, maxTimeoutSeconds: ours.maxTimeoutSeconds + 1 },
      { ...ours, asset: chain.payers[3]!.address },
      { ...ours, amount: (PRICE_ATOMIC * 2n).toString() },
      { ...ours, extra: { name: 'USD Coin', version: '1' } },
    ]) {
      const { header } = await signV2({ ...required, accepts: [altered] }, key)
      await refusedV2(header, 'requirements_mismatch')
    }
    // An extra field only the client added is allowed in `extra` (as the reference allows), not beside it.
    const { payload } = await signV2(required, key)
    const withField = { ...payload, accepted: { ...payload.accepted, memo: 'x' } }
    await refusedV2(Buffer.from(JSON.stringify(withField)).toString('base64'), 'requirements_mismatch')
    expect(paidHeader).toBeDefined()
  })

  it('`exact` takes exactly the price: more is refused (v1 and v2), nothing is forwarded', async () => {
    // v1: the published `x402` client, signing for twice the price.
    const v1 = (await (await fetch(meteredUrl)).json()) as { accepts: unknown[] }
    const requirements = { ...PaymentRequirementsSchema.parse(v1.accepts[0]), maxAmountRequired: '20000' }
    const wallet = createWalletClient({
      account: privateKeyToAccount(chain.payers[2]!.privateKey),
      chain: baseSepolia as Chain,
      transport: http(chain.rpcUrl),
    }).extend(publicActions)
    const header = await createPaymentHeader(wallet, 1, requirements)
    const before = upstream.count()
    const r = await fetch(meteredUrl, { headers: { 'X-PAYMENT': header } })
    expect({ status: r.status, error: ((await r.json()) as { error: string }).error }).toEqual({
      status: 402,
      error: 'wrong_amount',
    })
    expect(upstream.count()).toBe(before)

    // v2: `accepted` names the price, the authorization signs for more.
    const { required } = await paymentRequired()
    const { payload } = await signV2(
      { ...required, accepts: [{ ...required.accepts[0]!, amount: '20000' }] },
      chain.payers[2]!.privateKey,
    )
    const lying = { ...payload, accepted: required.accepts[0] }
    await refusedV2(Buffer.from(JSON.stringify(lying)).toString('base64'), 'wrong_amount')
  })
})

describe('an ERC-1271 smart-wallet payer', () => {
  it('pays through the published client and is settled by the token asking the wallet', async () => {
    const { wallet, owner } = await fundedSmartWallet({
      rpcUrl: chain.rpcUrl,
      usdc: chain.usdcAddress,
      funderKey: chain.payers[3]!.privateKey,
      amountAtomic: 1_000_000n,
    })

    // The wallet's address pays; its owner's key signs (what the wallet's isValidSignature accepts).
    const { fetch: pay } = exactPayer({ address: wallet, signTypedData: (m) => owner.signTypedData(m) })
    const r = await pay(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(decodePaymentResponseHeader(r.headers.get('payment-response')!)).toMatchObject({
      errorReason: 'settlement_pending',
      payer: wallet,
    })
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    // The periodic run may hold the job when runNow asks: wait for the transfer, with a deadline.
    await expect
      .poll(() => balanceOf(wallet), { timeout: 10_000, interval: 100 })
      .toBe(1_000_000n - PRICE_ATOMIC)

    // Someone else's key is not the wallet's signature.
    const stranger = privateKeyToAccount(generatePrivateKey())
    const { required } = await paymentRequired()
    const { client } = exactPayer({ address: wallet, signTypedData: (m) => stranger.signTypedData(m) })
    const forged = await client.createPaymentPayload(required as never)
    await refusedV2(Buffer.from(JSON.stringify(forged)).toString('base64'), 'invalid_signature')
  })
})

describe('an ERC-1271 smart-wallet payer, the node failing', () => {
  it('a wallet the node cannot ask is a 503 to retry, not a bad signature; asked again, it pays', async () => {
    const { wallet, owner } = await fundedSmartWallet({
      rpcUrl: chain.rpcUrl,
      usdc: chain.usdcAddress,
      funderKey: chain.payers[3]!.privateKey,
      amountAtomic: 1_000_000n,
    })
    const gate = await startRpcProxy(chain.rpcUrl)
    const gated = await startX402Service(gate.url)
    try {
      const url = await createEndpoint(gated, 0.01)
      const { required } = await paymentRequired(url)
      const { client } = exactPayer({ address: wallet, signTypedData: (m) => owner.signTypedData(m) })
      const payload = await client.createPaymentPayload(required as never)
      const header = Buffer.from(JSON.stringify(payload)).toString('base64')
      const before = upstream.count()
      // eth_call failing (the wallet's isValidSignature among them): retry later, the payment is not bad.
      gate.failMethods = ['eth_call']
      const down = await fetch(url, { headers: { 'PAYMENT-SIGNATURE': header } })
      expect(down.status, await down.clone().text()).toBe(503)
      await down.arrayBuffer()
      expect(upstream.count()).toBe(before)
      gate.failMethods = []
      const up = await fetch(url, { headers: { 'PAYMENT-SIGNATURE': header } })
      expect(up.status, await up.clone().text()).toBe(200)
      await up.arrayBuffer()
    } finally {
      await gated.stop()
      await gate.close()
    }
  })
})

describe('browser agents', () => {
  it('a CORS preflight to a metered URL is answered without a claim or a forward', async () => {
    const before = upstream.count()
    const r = await fetch(`${meteredUrl}/some/path?q=1`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://agent.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'payment-signature, content-type, access-control-expose-headers',
      },
    })
    expect(r.status).toBe(204)
    expect(r.headers.get('access-control-allow-origin')).toBe('*')
    expect(r.headers.get('access-control-allow-methods')).toContain('POST')
    expect(r.headers.get('access-control-allow-headers')).toContain('payment-signature')
    expect(upstream.count()).toBe(before)
    // An OPTIONS that is not a preflight is a metered call like any other.
    const plain = await fetch(meteredUrl, { method: 'OPTIONS' })
    expect(plain.status).toBe(402)
  })
})

describe('the dry run before serving (x402.simulate_min_price)', () => {
  let gate: RpcProxy
  let simulating: Service
  afterAll(async () => {
    await simulating?.stop()
    await gate?.close()
  })

  it('simulates the settlement for prices at or above the threshold, and only those', async () => {
    // The bytes overload of transferWithAuthorization: what the dry run calls.
    const selector = toFunctionSelector(
      'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)',
    ).slice(2)
    gate = await startRpcProxy(chain.rpcUrl)
    simulating = await startX402Service(gate.url, { simulate_min_price: 0.01 })
    const dear = await createEndpoint(simulating, 0.01)
    const cheap = await createEndpoint(simulating, 0.001)
    const payer = privateKeyToAccount(chain.payers[1]!.privateKey)

    gate.bodies = []
    const { fetch: pay } = exactPayer(payer)
    const served = await pay(dear)
    expect(served.status, await served.clone().text()).toBe(200)
    expect(gate.bodies!.filter((b) => b.includes('eth_call') && b.includes(selector))).toHaveLength(1)

    gate.bodies = []
    const cheapServed = await pay(cheap)
    expect(cheapServed.status).toBe(200)
    expect(gate.bodies!.filter((b) => b.includes(selector))).toHaveLength(0)
    expect(ownerKey).toBeDefined()
  })
})
