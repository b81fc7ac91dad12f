// A payer USDC blacklists can neither send nor receive: its authorization or permit would be served and its
// settlement would revert (served unpaid, again and again, on a frozen balance). tollgate reads what a payer
// can spend (src/chain/token-reads.ts `spendable`: 0 for a blacklisted account) where it reads the balance:
// the published client's payment is refused insufficient_funds before anything is served, at a metered URL
// and at the facilitator's /verify and /settle; unlisted again, the same payer pays. A treasury the token
// blacklists can receive nothing: x402 intake stops (503 settlement_halted) until it can. The dev chain's
// TestUSDC keeps FiatTokenV2_2's blacklist (its deployer, the treasury, is the blacklister).
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { type Address, createWalletClient, http, parseAbi, publicActions } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { createTokenReads } from '../../src/chain/token-reads.ts'
import { createUptoChainChecker } from '../../src/chain/upto-permit.ts'
import { tokenHalted } from '../../src/observability/metrics.ts'
import type { Service } from '../../src/service.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from './harness.ts'

checkPaymentProtocol()

const PRICE_ATOMIC = 10_000n
const blacklistAbi = parseAbi([
  'function blacklist(address account)',
  'function unBlacklist(address account)',
])

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let meteredUrl: string
let merchantKey: string

/**
 * The treasury deployed TestUSDC: it is the blacklister. Returns once the change is mined: anvil answers a
 * sent transaction before its automined block is in, and a read made in between saw the old list (CI).
 */
async function setBlacklisted(account: Address, listed: boolean): Promise<void> {
  const treasury = createWalletClient({
    account: privateKeyToAccount(chain.treasury.privateKey),
    transport: http(chain.rpcUrl),
  }).extend(publicActions)
  const hash = await treasury.writeContract({
    address: chain.usdcAddress,
    abi: blacklistAbi,
    functionName: listed ? 'blacklist' : 'unBlacklist',
    args: [account],
    chain: null,
  })
  const receipt = await treasury.waitForTransactionReceipt({ hash, pollingInterval: 50 })
  if (receipt.status !== 'success') throw new Error(`${listed ? 'blacklist' : 'unBlacklist'} reverted`)
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain({ payers: 4 })
  upstream = await startUpstream()
  // The default settings but for the balance read's reuse: a blacklisting shows at the next read (with the
  // default 2 s, a read made just before it is reused for that long: the gap any balance read has).
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, { x402: { balance_ttl_ms: 0 } } as never)
  merchantKey = await registerMerchantKey(svc.url, chain.payers[3]!.address, 'Blacklist Co')
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: merchantKey,
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

describe('a payer USDC blacklists', () => {
  it('is refused before anything is served, at a metered URL and at the facilitator; unlisted, it pays', async () => {
    const payer = privateKeyToAccount(chain.payers[0]!.privateKey)
    const { fetch: pay, client } = exactPayer(payer)
    const paid = await pay(meteredUrl)
    expect(paid.status, await paid.clone().text()).toBe(200)
    await paid.arrayBuffer()

    await setBlacklisted(payer.address, true)
    const before = { served: upstream.count(), balance: await usdcBalanceOf(chain, payer.address) }
    const r402 = await fetch(meteredUrl)
    const required = decodePaymentRequiredHeader(r402.headers.get('payment-required')!)
    await r402.arrayBuffer()
    const payload = await client.createPaymentPayload(required as never)
    const refused = await fetch(meteredUrl, {
      headers: { 'PAYMENT-SIGNATURE': Buffer.from(JSON.stringify(payload)).toString('base64') },
    })
    expect(refused.status).toBe(402)
    expect(((await refused.json()) as { error: string }).error).toBe('insufficient_funds')
    expect(upstream.count()).toBe(before.served)

    // The merchant's own middleware asks the facilitator: the same payload is not valid, nor settled.
    const body = { x402Version: 2, paymentPayload: payload, paymentRequirements: required.accepts[0] }
    const verified = await callApi(svc.url, '/api/v1/facilitator/verify', { key: merchantKey, body })
    expect(verified.body).toMatchObject({ isValid: false, invalidReason: 'insufficient_funds' })
    const settled = await callApi(svc.url, '/api/v1/facilitator/settle', { key: merchantKey, body })
    expect(settled.body).toMatchObject({ success: false, errorReason: 'insufficient_funds' })
    const [claims] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM claims WHERE lower(payer) = ${payer.address.toLowerCase()}`
    expect(claims!.n).toBe(1)

    await setBlacklisted(payer.address, false)
    const again = await pay(meteredUrl)
    expect(again.status, await again.clone().text()).toBe(200)
    expect(decodePaymentResponseHeader(again.headers.get('payment-response')!)).toMatchObject({
      success: true,
    })
    expect(await usdcBalanceOf(chain, payer.address)).toBe(before.balance - PRICE_ATOMIC)
  })

  it("an upto permit of a blacklisted payer is refused for funds by the chain check (Permit2's transfer would revert)", async () => {
    const payer = privateKeyToAccount(chain.payers[1]!.privateKey)
    const reads = createTokenReads({ rpcUrl: chain.rpcUrl, token: chain.usdcAddress, timeoutMs: 10_000 })
    try {
      const check = createUptoChainChecker(reads)
      const permit = { from: payer.address, nonce: 1n, amount: PRICE_ATOMIC }
      // Funded, but without a Permit2 approval: the allowance is what stops it while it is not listed.
      expect(await check(permit)).toEqual({ ok: false, reason: 'permit2_allowance_required' })
      await setBlacklisted(payer.address, true)
      expect(await check(permit)).toEqual({ ok: false, reason: 'insufficient_funds' })
    } finally {
      await setBlacklisted(payer.address, false)
      await reads.close()
    }
  })

  it('a blacklisted treasury (or a paused token) stops x402 intake: 503 settlement_halted, nothing served', async () => {
    const payer = privateKeyToAccount(chain.payers[2]!.privateKey)
    const { fetch: pay } = exactPayer(payer)
    await setBlacklisted(chain.treasury.address, true)
    try {
      await svc.refreshSettlementThrottle()
      const before = upstream.count()
      const halted = await pay(meteredUrl)
      expect(halted.status).toBe(503)
      expect(halted.headers.get('retry-after')).toBeTruthy()
      expect(((await halted.json()) as { error: { code: string } }).error.code).toBe('settlement_halted')
      expect(upstream.count()).toBe(before)
      const gauge = await tokenHalted.get()
      expect(gauge.values.find((v) => v.labels.state === 'blacklisted')?.value).toBe(1)
    } finally {
      await setBlacklisted(chain.treasury.address, false)
    }
    await svc.refreshSettlementThrottle()
    const paid = await pay(meteredUrl)
    expect(paid.status, await paid.clone().text()).toBe(200)
  })
})
