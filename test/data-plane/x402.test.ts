// Standard x402 clients pay tollgate unchanged: the `x402` npm package (v1, "exact" scheme, EIP-3009
// transferWithAuthorization) reads the 402 body's `accepts`, signs, and retries with X-PAYMENT. tollgate
// verifies locally, claims the nonce, forwards, and settles on chain later ('x402-settlement').
// A private anvil with chain id 84532: x402 clients only know real network names, so the service runs as
// base-sepolia against it (with the project's test USDC, "USD Coin" version "2").

import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  parseAbi,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  createPaymentHeader,
  preparePaymentHeader,
  selectPaymentRequirements,
  signPaymentHeader,
} from 'x402/client'
import { decodePayment } from 'x402/schemes'
import { decodeXPaymentResponse } from 'x402/shared'
import { type PaymentRequirements, PaymentRequirementsSchema } from 'x402/types'
import { signTransferAuthorization } from '../../src/chain/authorization.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { settlementCalldata, storedAuthorization } from '../../src/chain/settle.ts'
import { loadConfig } from '../../src/config/load.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { baseSepoliaWallet, usdcBalanceOf } from '../x402/harness.ts'

checkPaymentProtocol()

const PRICE_ATOMIC = 10_000n // 0.01 USDC

const usdcAbi = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
])

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let publicClient: ReturnType<typeof chainReader>
let meteredUrl: string

/** What an x402 client is handed (x402's SignerWallet), for one of the chain's keys. */
const signer = (privateKey: Hex) => baseSepoliaWallet(chain, privateKey)

function chainReader(rpcUrl: string) {
  return createPublicClient({ chain: baseSepolia, transport: http(rpcUrl) })
}

/** GET the metered URL unpaid and pick the requirements the way an x402 client does. */
async function fetchRequirements(): Promise<PaymentRequirements> {
  const r = await fetch(meteredUrl)
  expect(r.status).toBe(402)
  const body = (await r.json()) as { x402Version: number; accepts: unknown[] }
  expect(body.x402Version).toBe(1)
  // The library's own schema accepts tollgate's requirements as they are.
  const accepts = body.accepts.map((a) => PaymentRequirementsSchema.parse(a))
  return selectPaymentRequirements(accepts, 'base-sepolia', 'exact')
}

async function pay(header: string) {
  const r = await fetch(meteredUrl, { headers: { 'X-PAYMENT': header } })
  const text = await r.text()
  let body: any = null
  try {
    body = JSON.parse(text)
  } catch {
    body = null
  }
  return { status: r.status, headers: r.headers, body, text }
}

async function expectRefused(header: string, reason: string) {
  const before = upstream.count()
  const r = await pay(header)
  expect({ status: r.status, error: r.body?.error }).toEqual({ status: 402, error: reason })
  expect(upstream.count()).toBe(before)
}

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)

/** Claims released after they were won (tollgate_claims_released_total{result="released"}), from /metrics. */
async function releasedClaims(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith('tollgate_claims_released_total{result="released"}'))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

/** Uses `nonce` of the key's account on chain: an authorization of 1 unit to itself, submitted by itself. */
async function useNonce(privateKey: Hex, nonce: Hex): Promise<void> {
  const account = privateKeyToAccount(privateKey)
  const { authorization, signature } = await signTransferAuthorization(account, {
    usdc: { address: chain.usdcAddress, name: 'USD Coin', version: '2' },
    chainId: chain.chainId,
    to: account.address,
    value: 1n,
    validAfter: 0n,
    validBefore: BigInt(Math.floor(Date.now() / 1000) + 600),
    nonce,
  })
  const wallet = createWalletClient({ account, chain: baseSepolia as Chain, transport: http(chain.rpcUrl) })
  const hash = await wallet.sendTransaction({
    to: chain.usdcAddress,
    data: settlementCalldata(storedAuthorization(authorization, signature)),
  })
  await publicClient.waitForTransactionReceipt({ hash })
}

function evmAuthorization(header: string) {
  const { payload } = decodePayment(header)
  if (!('authorization' in payload)) throw new Error('not an EVM exact payload')
  return payload.authorization
}

beforeAll(async () => {
  chain = await startTestChain({ chainId: 84532 })
  upstream = await startUpstream()
  publicClient = chainReader(chain.rpcUrl)
  const databaseUrl = await freshDatabaseUrl()
  const config = loadConfig({
    env: {
      NODE_ENV: 'test',
      NETWORK: 'base-sepolia',
      RPC_URL: chain.rpcUrl,
      USDC_ADDRESS: chain.usdcAddress,
      TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
    },
    // A payer's balance read is kept for the whole file: its later authorizations read only their nonce
    // (the test of a nonce used on chain after the read depends on it).
    // Settled after the call (an explicit choice; the default settles before the answer): this file follows
    // a v1 authorization through the leader's deferred settlement.
    overrides: {
      database: { data_dir: 'memory://' },
      x402: { balance_ttl_ms: 60_000 },
      settlement: { before_answer: { enabled: false } },
    },
  })
  svc = await startService(config, { logger: createLogger('warn') })
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: chain.payers[4]!.address, business_name: 'x402 Co' },
  })
  expect(reg.status).toBe(201)
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: reg.body.api_key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  expect(ep.status).toBe(201)
  meteredUrl = ep.body.metered_url
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('x402 exact payments from a standard client (x402 npm package)', () => {
  let paidHeader: string | undefined

  it('a standard x402 client pays a metered call', async () => {
    const requirements = await fetchRequirements()
    expect(requirements).toMatchObject({
      network: 'base-sepolia',
      asset: chain.usdcAddress,
      maxAmountRequired: PRICE_ATOMIC.toString(),
      extra: { name: 'USD Coin', version: '2' },
    })
    const payer = chain.payers[0]!.address
    const header = await createPaymentHeader(signer(chain.payers[0]!.privateKey), 1, requirements)
    const authorization = evmAuthorization(header)
    const payerBefore = await balanceOf(payer)
    const treasuryBefore = await balanceOf(chain.treasury.address)
    const countBefore = upstream.count()

    const r = await pay(header)
    expect(r.status, r.text).toBe(200)
    expect(r.body).toMatchObject({ method: 'GET', path: '/echo' })
    expect(upstream.count()).toBe(countBefore + 1)
    const receipt = r.headers.get('x-payment-response')
    expect(receipt).not.toBeNull()
    const settled = decodeXPaymentResponse(receipt!)
    // Not settled yet, so not `success: true` (a v1 receipt never says so without its transaction).
    expect(settled).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: '' })
    expect(settled.payer.toLowerCase()).toBe(payer.toLowerCase())
    paidHeader = header

    // Settlement is deferred: nothing has moved on chain yet.
    expect(await balanceOf(payer)).toBe(payerBefore)
    expect(
      await publicClient.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName: 'authorizationState',
        args: [payer, authorization.nonce as Hex],
      }),
    ).toBe(false)

    // Captures are written in batches; settlement takes captured calls only.
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    expect(await balanceOf(payer)).toBe(payerBefore - PRICE_ATOMIC)
    expect(await balanceOf(chain.treasury.address)).toBe(treasuryBefore + PRICE_ATOMIC)
    expect(
      await publicClient.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName: 'authorizationState',
        args: [payer, authorization.nonce as Hex],
      }),
    ).toBe(true)
  })

  it('the same authorization cannot pay twice', async () => {
    // Replayed at once, before any settlement: only tollgate's claim on the nonce stands in the way…
    const header = await createPaymentHeader(
      signer(chain.payers[1]!.privateKey),
      1,
      await fetchRequirements(),
    )
    const countBefore = upstream.count()
    const first = await pay(header)
    expect(first.status, first.text).toBe(200)
    expect(upstream.count()).toBe(countBefore + 1)
    await expectRefused(header, 'proof_already_used')

    // …and the first test's authorization, replayed after its settlement (its nonce is used on chain).
    expect(paidHeader, 'the first test must have paid').toBeDefined()
    await expectRefused(paidHeader!, 'proof_already_used')
  })

  it('an authorization for less than the price is refused', async () => {
    const requirements = { ...(await fetchRequirements()), maxAmountRequired: '5000' }
    const header = await createPaymentHeader(signer(chain.payers[2]!.privateKey), 1, requirements)
    expect(evmAuthorization(header).value).toBe('5000')
    await expectRefused(header, 'underpaid')
  })

  it('an authorization paying someone else is refused', async () => {
    const requirements = { ...(await fetchRequirements()), payTo: chain.payers[3]!.address }
    const header = await createPaymentHeader(signer(chain.payers[2]!.privateKey), 1, requirements)
    expect(evmAuthorization(header).to.toLowerCase()).toBe(chain.payers[3]!.address.toLowerCase())
    await expectRefused(header, 'wrong_recipient')
  })

  it('an expired authorization is refused', async () => {
    const requirements = await fetchRequirements()
    const wallet = signer(chain.payers[2]!.privateKey)
    // The library's two steps: prepare the unsigned payload, then sign it; validBefore set in the past between.
    const unsigned = preparePaymentHeader(wallet.account.address, 1, requirements)
    const now = Math.floor(Date.now() / 1000)
    unsigned.payload.authorization.validAfter = String(now - 600)
    unsigned.payload.authorization.validBefore = String(now - 60)
    const header = await signPaymentHeader(wallet, requirements, unsigned)
    expect(evmAuthorization(header).validBefore).toBe(String(now - 60))
    await expectRefused(header, 'authorization_expired')
  })

  it("a nonce used on chain after the payer's balance was read is refused before any claim", async () => {
    const payer = chain.payers[3]!
    const first = await pay(await createPaymentHeader(signer(payer.privateKey), 1, await fetchRequirements()))
    expect(first.status, first.text).toBe(200)
    // The next authorization's nonce, used on chain by an authorization of its own (the payer paying itself)
    // before it is presented. The payer's balance read is kept, so the nonce's read is the one chain read
    // left, and it is never skipped: the settlement of this authorization would revert.
    const header = await createPaymentHeader(signer(payer.privateKey), 1, await fetchRequirements())
    await useNonce(payer.privateKey, evmAuthorization(header).nonce as Hex)
    const released = await releasedClaims()
    await expectRefused(header, 'proof_already_used')
    // Refused by the read, not by a claim won and given back.
    expect(await releasedClaims()).toBe(released)
    // The payer's next authorization pays.
    const next = await pay(await createPaymentHeader(signer(payer.privateKey), 1, await fetchRequirements()))
    expect(next.status, next.text).toBe(200)
  })

  it('a payer without the funds is refused', async () => {
    // x402 also takes a bare viem LocalAccount as the signer.
    const broke = privateKeyToAccount(generatePrivateKey())
    expect(await balanceOf(broke.address)).toBe(0n)
    const header = await createPaymentHeader(broke, 1, await fetchRequirements())
    await expectRefused(header, 'insufficient_funds')
  })
})

describe('an x402 call the upstream never served', () => {
  it('is never settled and never refunded once its retry window is over: nothing moved', async () => {
    const reg = await callApi(svc.url, '/api/v1/register', {
      body: { wallet_address: chain.payers[4]!.address, business_name: 'Down Co' },
    })
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key: reg.body.api_key,
      body: { upstream_url: 'http://127.0.0.1:9/down', price: 0.01 },
    })
    const quote = await fetch(ep.body.metered_url)
    const requirements = (await quote.json()).accepts[0]
    const payer = chain.payers[2]!.address
    const header = await createPaymentHeader(signer(chain.payers[2]!.privateKey), 1, requirements)
    const before = await balanceOf(payer)
    const r = await fetch(ep.body.metered_url, { headers: { 'X-PAYMENT': header } })
    expect(r.status).toBe(502)
    // Let the retry window pass (as the clock would), then run the expiry job and a settlement run.
    await svc.sql`UPDATE claims SET retry_until = now() - interval '1 second', lease_until = NULL
                  WHERE kind = 'eip3009' AND target_id = ${ep.body.id}`
    await svc.jobs.runNow('claim-expiry')
    await svc.jobs.runNow('x402-settlement')
    const rows = await svc.sql`SELECT status, settlement_tx FROM claims WHERE target_id = ${ep.body.id}`
    expect(rows).toEqual([{ status: 'void', settlement_tx: null }])
    const refunds = await svc.sql`SELECT 1 FROM ledger_entries WHERE kind = 'refund' AND wallet = ${payer}`
    expect(refunds).toHaveLength(0)
    expect(await balanceOf(payer)).toBe(before)
  })
})
