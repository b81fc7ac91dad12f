// Per endpoint, in one service on the DEFAULT settings: an endpoint that makes no choice settles before the
// answer and gives the four published clients a receipt they read as paid, with the hash of a mined
// transaction that carries the payer's authorization, sent from the settler slot derived from the treasury
// key (no SETTLER_PRIVATE_KEY); an endpoint set to "after" keeps the honest pending receipt, in v1 too. The x402 end-to-end suite's pass rule is
// applied to what each client reports: success true, a non-empty transaction, no errorReason. The receipt
// URL (/receipts/:id) shows the settlement: transaction, block, confirmations, the call's place in its batch.
// @x402/fetch and @x402/axios (v2, PAYMENT-RESPONSE) and x402-fetch and x402-axios (v1, X-PAYMENT-RESPONSE),
// all unchanged, against a private anvil announced as base-sepolia (AuthorizationBatcher present).

import { wrapAxiosWithPayment } from '@x402/axios'
import { x402HTTPClient } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { wrapFetchWithPayment } from '@x402/fetch'
import axios from 'axios'
import {
  type Address,
  createPublicClient,
  createTestClient,
  type Hex,
  http,
  parseAbi,
  parseEventLogs,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { withPaymentInterceptor } from 'x402-axios'
import { decodeXPaymentResponse, wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { settlements } from '../../src/observability/metrics.ts'
import type { Service } from '../../src/service.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { expectSettledAt, PENDING_SETTLEMENT } from '../helpers/receipts.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import {
  baseSepoliaWallet,
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from './harness.ts'

checkPaymentProtocol()

const PRICE_ATOMIC = 10_000n

const usdc = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
])

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let reader: ReturnType<typeof createPublicClient>
let apiKey: string
/** No choice made: the service default, settle before the answer. */
let meteredUrl: string
/** Set to "after". */
let afterUrl: string

/** The x402 e2e suite's rule for a paid call: success, a non-empty transaction, no errorReason. */
function passesE2eRule(r: { success?: boolean; transaction?: string; errorReason?: string }): boolean {
  return r.success === true && typeof r.transaction === 'string' && r.transaction.length > 0 && !r.errorReason
}

/**
 * The transaction is mined and succeeded, and the token logged this payer's authorization used in it: its
 * place among the authorizations the transaction used (index of the payer's AuthorizationUsed log, count);
 * null when it does not carry it.
 */
async function placeOf(
  tx: Hex,
  payer: Address,
): Promise<{ index: number; count: number; block: bigint } | null> {
  const receipt = await reader.getTransactionReceipt({ hash: tx })
  if (receipt.status !== 'success') return null
  const used = parseEventLogs({ abi: usdc, logs: receipt.logs, eventName: 'AuthorizationUsed' }).filter(
    (l) => l.address.toLowerCase() === chain.usdcAddress.toLowerCase(),
  )
  const index = used.findIndex((l) => l.args.authorizer.toLowerCase() === payer.toLowerCase())
  return index < 0 ? null : { index, count: used.length, block: receipt.blockNumber }
}

async function carriesAuthorizationOf(tx: Hex, payer: Address): Promise<boolean> {
  return (await placeOf(tx, payer)) !== null
}

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)

/** tollgate_x402_settlements_total{outcome="settled"} of this process (the service runs in it). */
async function settledCount(): Promise<number> {
  return (await settlements.get()).values.find((v) => v.labels.outcome === 'settled')?.value ?? 0
}

async function receiptAt(id: string | null | undefined) {
  const r = await fetch(`${svc.url}/receipts/${id}`)
  return { status: r.status, cacheControl: r.headers.get('cache-control'), body: await r.json() }
}

/**
 * The receipt URL shows the settlement the answer named: settled, in that transaction, at its block, with
 * confirmations counted to the head, and the call's place in the transaction as the chain logged it. The
 * answer goes out before the settlement is booked (just after): read until it is.
 */
async function expectReceiptUrlShowsSettlement(receiptId: string | null, tx: Hex, payer: Address) {
  expect(receiptId).toMatch(/^rcpt_/)
  const place = await placeOf(tx, payer)
  expect(place).not.toBeNull()
  await expect
    .poll(async () => (await receiptAt(receiptId)).body.settlement?.status, { timeout: 5_000, interval: 50 })
    .toBe('settled')
  const { status, body } = await receiptAt(receiptId)
  expect(status).toBe(200)
  await expectSettledAt(body.settlement, {
    transaction: tx,
    block: place!.block,
    index: place!.index,
    count: place!.count,
    chain: reader,
  })
  return body
}

const v2Client = (key: Hex) => exactPayer(key).client

const v1Wallet = (key: Hex) => baseSepoliaWallet(chain, key)

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  upstream = await startUpstream()
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  // The default settlement settings and no SETTLER_PRIVATE_KEY: slot 0's key is derived from the treasury's
  // (the harness gives it anvil ETH, as an operator would). The leader's settlement job runs only when a test
  // asks (runNow): what the receipt URL shows before it is then certain.
  svc = await startBaseSepoliaService(
    chain,
    chain.rpcUrl,
    { settlement: { interval_ms: 3_600_000 } } as never,
    'warn',
  )
  apiKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'receipts Co')
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: apiKey,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  expect(ep.status).toBe(201)
  expect(ep.body.x402_settlement).toBe('before_answer')
  meteredUrl = ep.body.metered_url
  const after = await callApi(svc.url, '/api/v1/endpoints', {
    key: apiKey,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01, x402_settlement: 'after' },
  })
  expect(after.body.x402_settlement).toBe('after')
  afterUrl = after.body.metered_url
}, 60_000)

afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('an endpoint on the default: a served exact call is settled before its answer', () => {
  it('@x402/fetch: parsePaymentResult reads settled, with the mined transaction carrying the authorization', async () => {
    const key = chain.payers[0]!.privateKey
    const payer = privateKeyToAccount(key).address
    const before = await balanceOf(payer)
    const settledBefore = await settledCount()
    const client = v2Client(key)
    const r = await wrapFetchWithPayment(fetch, client)(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    const result = await new x402HTTPClient(client).processResponse(r)
    expect(result.paymentStatus).toBe('settled')
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(passesE2eRule(receipt)).toBe(true)
    expect(receipt).toMatchObject({ network: 'eip155:84532', payer, amount: PRICE_ATOMIC.toString() })
    expect(await carriesAuthorizationOf(receipt.transaction as Hex, payer)).toBe(true)
    // Sent from the settler slot derived from the treasury key, not from the treasury.
    const tx = await reader.getTransaction({ hash: receipt.transaction as Hex })
    const slot0 = settlerSlotKey({ settlerKey: null, treasuryKey: chain.treasury.privateKey }, 0)!
    expect(tx.from.toLowerCase()).toBe(privateKeyToAccount(slot0).address.toLowerCase())
    // The money moved before the answer, exactly once.
    expect(await balanceOf(payer)).toBe(before - PRICE_ATOMIC)
    const shown = await expectReceiptUrlShowsSettlement(
      r.headers.get('x-receipt-id'),
      receipt.transaction as Hex,
      payer,
    )
    expect(shown.payer.toLowerCase()).toBe(payer.toLowerCase())
    // Booked once: the leader's job finds it settled and sends nothing again.
    await svc.jobs.runNow('x402-settlement')
    const [claim] = await svc.sql<{ settlement_tx: string; settled: boolean; entries: number }[]>`
      SELECT k.settlement_tx, k.settled_at IS NOT NULL AS settled,
             -- The owner share and fee of the settlement batch that booked the call (alone in it here).
             (SELECT count(*) FROM ledger_entries l JOIN calls c ON l.source_type = 'settlement_batch'
                AND l.source_id = c.ledger_batch_id::text AND l.account_id = c.account_id
               WHERE call_proof_key(c.proof_key, c.proof) = k.proof_key)::int AS entries
      FROM claims k WHERE lower(k.payer) = ${payer.toLowerCase()}`
    expect(claim).toEqual({ settlement_tx: receipt.transaction, settled: true, entries: 2 })
    expect(await balanceOf(payer)).toBe(before - PRICE_ATOMIC)
    // Counted among the settlement outcomes once: by the path that marked it, not again by the job.
    expect(await settledCount()).toBe(settledBefore + 1)
  })

  it('@x402/axios: parsePaymentResult reads settled and the e2e pass rule holds', async () => {
    const key = chain.payers[1]!.privateKey
    const payer = privateKeyToAccount(key).address
    // @x402/axios (2.11 installed) carries its own @x402/core: the same class, another declaration.
    const client = v2Client(key)
    const api = wrapAxiosWithPayment(axios.create(), client as never)
    const r = await api.get(meteredUrl)
    expect(r.status).toBe(200)
    const result = new x402HTTPClient(client).parsePaymentResult({
      status: r.status,
      getHeader: (name) => r.headers[name.toLowerCase()],
      body: r.data,
    })
    expect(result.paymentStatus).toBe('settled')
    const receipt = decodePaymentResponseHeader(r.headers['payment-response'])
    expect(passesE2eRule(receipt)).toBe(true)
    expect(await carriesAuthorizationOf(receipt.transaction as Hex, payer)).toBe(true)
    await expectReceiptUrlShowsSettlement(r.headers['x-receipt-id'], receipt.transaction as Hex, payer)
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
    await expectReceiptUrlShowsSettlement(r.headers.get('x-receipt-id'), receipt.transaction as Hex, payer)
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
    await expectReceiptUrlShowsSettlement(r.headers['x-receipt-id'], receipt.transaction as Hex, payer)
  })

  it('calls served together share one transaction, each receipt URL showing its place in it', async () => {
    const keys = [chain.payers[0]!.privateKey, chain.payers[1]!.privateKey, chain.payers[2]!.privateKey]
    const answers = await Promise.all(keys.map((k) => wrapFetchWithPayment(fetch, v2Client(k))(meteredUrl)))
    const txs = answers.map((r) => {
      expect(r.status).toBe(200)
      const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
      expect(passesE2eRule(receipt)).toBe(true)
      return receipt.transaction as Hex
    })
    const places = []
    for (const [i, tx] of txs.entries()) {
      const payer = privateKeyToAccount(keys[i]!).address
      const shown = await expectReceiptUrlShowsSettlement(answers[i]!.headers.get('x-receipt-id'), tx, payer)
      places.push(shown.settlement.batch)
    }
    // However the three were grouped, no two hold the same place in the same transaction.
    expect(new Set(places.map((p) => `${p.transaction}:${p.index}`)).size).toBe(3)
    for (const p of places) expect(p.index).toBeLessThan(p.count)
  })
})

describe('an endpoint set to settle after, in the same service', () => {
  it('x402-fetch (v1): the receipt never says success without a transaction', async () => {
    const key = chain.payers[2]!.privateKey
    const payer = privateKeyToAccount(key).address
    const r = await wrapFetchV1(fetch, v1Wallet(key) as never)(afterUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    const receipt = decodeXPaymentResponse(r.headers.get('x-payment-response')!) as Record<string, unknown>
    expect(receipt).toMatchObject({
      success: false,
      errorReason: 'settlement_pending',
      transaction: '',
      network: 'base-sepolia',
      payer,
    })
    expect(passesE2eRule(receipt)).toBe(false)
  })

  it('keeps the honest pending receipt, then its receipt URL shows the batch that settled it', async () => {
    const key = chain.payers[0]!.privateKey
    const payer = privateKeyToAccount(key).address
    const client = v2Client(key)
    const r = await wrapFetchWithPayment(fetch, client)(afterUrl)
    expect(r.status).toBe(200)
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: '' })
    expect(passesE2eRule(receipt)).toBe(false)
    expect((await new x402HTTPClient(client).processResponse(r)).paymentStatus).toBe('settle_failed')
    const id = r.headers.get('x-receipt-id')
    await svc.flushCaptures()
    const pending = await receiptAt(id)
    expect(pending.body.settlement).toEqual(PENDING_SETTLEMENT)
    // Not final: a cache must ask again.
    expect(pending.cacheControl).toBe('no-cache')
    // The leader's batch takes it at once (only before_answer endpoints' fresh captures are left alone).
    await svc.jobs.runNow('x402-settlement')
    const [claim] = await svc.sql<{ settlement_tx: string }[]>`
      SELECT settlement_tx FROM claims WHERE proof_key = (SELECT call_proof_key(proof_key, proof) FROM calls WHERE call_receipt_id(id, receipt_id) = ${id})`
    expect(claim!.settlement_tx).toMatch(/^0x[0-9a-f]{64}$/)
    const shown = await expectReceiptUrlShowsSettlement(id, claim!.settlement_tx as Hex, payer)
    expect((await receiptAt(id)).cacheControl).toBe('public, max-age=60')
    expect(shown.settlement.batch.count).toBeGreaterThanOrEqual(1)
  })
})

describe('when the settler cannot send, the receipt says pending and the batch settles it', () => {
  it('a settler without gas: no transaction named, settled afterwards by the treasury, charged once', async () => {
    // A fresh key holds no ETH: its broadcast is refused (insufficient funds). Endpoints that make no choice
    // settle before the answer (the default).
    const settlerKey = generatePrivateKey()
    const testClient = createTestClient({ mode: 'anvil', transport: http(chain.rpcUrl) })
    const broke = await startBaseSepoliaService(
      chain,
      chain.rpcUrl,
      {
        settlement: { before_answer: { enabled: true, window_ms: 3, wait_ms: 200, gas_check_ms: 100 } },
      } as never,
      'error',
      { SETTLER_PRIVATE_KEY: settlerKey },
    )
    const readyz = async () => {
      const r = await fetch(`http://127.0.0.1:${broke.adminPort}/readyz`)
      const body = (await r.json()) as { checks: Array<{ name: string; ok: boolean; detail?: string }> }
      return { status: r.status, settler: body.checks.find((c) => c.name === 'x402_settler') }
    }
    try {
      // Watched before it runs dry: below gas_floor_eth, the process is not ready, naming the settler.
      const dry = await readyz()
      expect(dry.status).toBe(503)
      expect(dry.settler).toMatchObject({ ok: false })
      expect(dry.settler?.detail).toContain(privateKeyToAccount(settlerKey).address)
      expect(dry.settler?.detail).toContain('below gas_floor_eth')
      const merchantKey = await registerMerchantKey(broke.url, chain.payers[4]!.address, 'broke settler Co')
      const ep = await callApi(broke.url, '/api/v1/endpoints', {
        key: merchantKey,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
      })
      expect(ep.body.x402_settlement).toBe('before_answer')
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
      // The same in v1: success false, never success without a transaction.
      const v1 = await wrapFetchV1(fetch, v1Wallet(chain.payers[2]!.privateKey) as never)(ep.body.metered_url)
      expect(v1.status).toBe(200)
      expect(decodeXPaymentResponse(v1.headers.get('x-payment-response')!)).toMatchObject({
        success: false,
        errorReason: 'settlement_pending',
        transaction: '',
      })
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
      // Funded, the settler's check passes again at its next read.
      await testClient.setBalance({ address: privateKeyToAccount(settlerKey).address, value: 10n ** 18n })
      await expect
        .poll(async () => (await readyz()).settler?.ok, { timeout: 10_000, interval: 100 })
        .toBe(true)
    } finally {
      await broke.stop()
    }
  })
})
