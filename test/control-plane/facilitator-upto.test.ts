// tollgate as the facilitator of x402 `upto` and the payer reservation at the facilitator. The published
// @x402/express middleware, unchanged, with @x402/evm's UptoEvmScheme server and HTTPFacilitatorClient
// pointed at tollgate, paid by the published upto client through @x402/fetch: the handler settles for less
// than the signed maximum (setSettlementOverrides), tollgate's upto settlement job sends the permit on anvil,
// books it once; a retry gets the first answer. Then one payer's balance raced by three /settle and a
// metered call at once: what is claimed never exceeds what the wallet holds. A route declaring
// eip2612GasSponsoring (@x402/extensions) is paid by a payer that never approved Permit2: the published
// client signs the token's EIP-2612 approval, and tollgate's batch submits it before the permit. A contract
// wallet (ERC-1271) pays the same route, its permit checked by the wallet itself.
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { UptoEvmScheme as UptoClient } from '@x402/evm/upto/client'
import { UptoEvmScheme } from '@x402/evm/upto/server'
import { paymentMiddleware, setSettlementOverrides, x402ResourceServer } from '@x402/express'
import { declareEip2612GasSponsoringExtension } from '@x402/extensions'
import { wrapFetchWithPayment } from '@x402/fetch'
import express from 'express'
import {
  type Address,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  maxUint256,
  parseAbi,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { PERMIT2_ADDRESS } from '../../src/chain/upto-permit.ts'
import { uptoBatcherAddress } from '../../src/chain/upto-settle.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import type { Service } from '../../src/service.ts'
import { approvePermit2From, fundedSmartWallet } from '../chain/contracts/smart-wallet.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { facilitatorClient, listenShop, type Shop, testUsdcPrice } from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from '../x402/harness.ts'

const NETWORK = 'eip155:84532'
const MAX_ATOMIC = 50_000n
const CHARGE_ATOMIC = 20_000n

type Json = { json(body: unknown): void }
type Res = Parameters<typeof setSettlementOverrides>[0]
const usdcAbi = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function approve(address spender, uint256 value) returns (bool)',
  'function transfer(address to, uint256 value) returns (bool)',
])

let chain: DevChain
let svc: Service
let upstream: Upstream
let merchantKey: string
let shop: Shop
let shopUrl: string
let reader: ReturnType<typeof createPublicClient>

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)

async function send(key: Hex, call: { functionName: 'approve' | 'transfer'; args: [Address, bigint] }) {
  const wallet = createWalletClient({ account: privateKeyToAccount(key), transport: http(chain.rpcUrl) })
  const hash = await wallet.writeContract({ address: chain.usdcAddress, abi: usdcAbi, chain: null, ...call })
  await reader.waitForTransactionReceipt({ hash })
}

function uptoFetch(key: Hex) {
  const client = new x402Client().register(NETWORK, new UptoClient(privateKeyToAccount(key) as never))
  return { client, fetch: wrapFetchWithPayment(fetch, client) }
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  upstream = await startUpstream()
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    settlement: { interval_ms: 200 },
    facilitator: { settle_wait_ms: 20_000 },
  } as never)
  merchantKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Upto Own Middleware Co')

  const price = testUsdcPrice(MAX_ATOMIC, chain.usdcAddress)
  const server = new x402ResourceServer(facilitatorClient(svc.url, merchantKey)).register(
    NETWORK,
    new UptoEvmScheme(),
  )
  const app = express()
  app.use(
    paymentMiddleware(
      {
        'GET /metered': {
          accepts: { scheme: 'upto', price, network: NETWORK, payTo: chain.treasury.address },
          description: 'usage-priced, settled for what was used',
        },
      },
      server,
    ),
  )
  app.use(
    paymentMiddleware(
      {
        'GET /sponsored': {
          accepts: { scheme: 'upto', price, network: NETWORK, payTo: chain.treasury.address },
          description: 'usage-priced, payable without a Permit2 approval',
          extensions: { ...declareEip2612GasSponsoringExtension() },
        },
      },
      server,
    ),
  )
  app.get('/sponsored', (_req: unknown, res: Json & Res) => {
    setSettlementOverrides(res, { amount: CHARGE_ATOMIC.toString() })
    res.json({ served: 'sponsored' })
  })
  app.get('/metered', (_req: unknown, res: Json & Res) => {
    // The work cost less than the maximum the payer signed: settle for that.
    setSettlementOverrides(res, { amount: CHARGE_ATOMIC.toString() })
    res.json({ served: 'upto' })
  })
  shop = await listenShop(app)
  shopUrl = shop.url
})

afterAll(async () => {
  await shop?.close()
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('upto through tollgate’s facilitator', () => {
  it('/supported offers upto v2 naming the facilitator payers sign into their permits', async () => {
    const supported = await facilitatorClient(svc.url, merchantKey).getSupported()
    expect(supported.kinds).toContainEqual({
      x402Version: 2,
      scheme: 'upto',
      network: NETWORK,
      extra: { facilitatorAddress: uptoBatcherAddress(chain.treasury.address) },
    })
  })

  it('the published middleware settles for the charge, below the maximum: sent in the upto batch, booked once', async () => {
    const payer = chain.payers[0]!
    await send(payer.privateKey, { functionName: 'approve', args: [PERMIT2_ADDRESS, maxUint256] })
    const before = await balanceOf(payer.address)
    const r = await uptoFetch(payer.privateKey).fetch(`${shopUrl}/metered`)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(await r.json()).toEqual({ served: 'upto' })
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: payer.address })
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    // Answered once mined: the charge moved, not the maximum.
    expect(await balanceOf(payer.address)).toBe(before - CHARGE_ATOMIC)
    const mined = await reader.getTransactionReceipt({ hash: receipt.transaction as Hex })
    expect(mined.status).toBe('success')
    const [claim] = await svc.sql<
      { kind: string; status: string; settled_atomic: bigint; amount_atomic: bigint }[]
    >`
      SELECT kind, status, settled_atomic, amount_atomic FROM claims WHERE target_type = 'facilitator'`
    expect(claim).toEqual({
      kind: 'upto',
      status: 'applied',
      settled_atomic: CHARGE_ATOMIC,
      amount_atomic: CHARGE_ATOMIC,
    })
    const entries = await svc.sql<{ kind: string; amount_atomic: bigint }[]>`
      SELECT kind, amount_atomic FROM ledger_entries WHERE source_type = 'facilitator' ORDER BY kind`
    expect(entries.map((e) => [e.kind, e.amount_atomic])).toEqual([
      ['fee', 1_000n],
      ['owner_share', 19_000n],
    ])
    const list = await callApi(svc.url, '/api/v1/settlements', { key: merchantKey })
    expect(list.body.data[0]).toMatchObject({
      status: 'settled',
      amount_atomic: '20000',
      transaction: receipt.transaction,
    })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('/supported lists eip2612GasSponsoring; a payer that never approved Permit2 pays through it', async () => {
    const supported = await facilitatorClient(svc.url, merchantKey).getSupported()
    expect(supported.extensions).toContain('eip2612GasSponsoring')
    const key = generatePrivateKey()
    const payer = privateKeyToAccount(key)
    await send(chain.payers[2]!.privateKey, { functionName: 'transfer', args: [payer.address, 100_000n] })
    const allowance = () =>
      reader.readContract({
        address: chain.usdcAddress,
        abi: parseAbi(['function allowance(address, address) view returns (uint256)']),
        functionName: 'allowance',
        args: [payer.address, PERMIT2_ADDRESS],
      })
    expect(await allowance()).toBe(0n)
    // The published client, given an RPC to read its allowance, signs the approval beside its permit.
    const client = new x402Client().register(
      NETWORK,
      new UptoClient(payer as never, { rpcUrl: chain.rpcUrl }),
    )
    const r = await wrapFetchWithPayment(fetch, client)(`${shopUrl}/sponsored`)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(await r.json()).toEqual({ served: 'sponsored' })
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, payer: payer.address })
    expect(await balanceOf(payer.address)).toBe(100_000n - CHARGE_ATOMIC)
    // The approval was submitted in the settlement: the maximum approved, the charge spent of it.
    expect(await allowance()).toBe(MAX_ATOMIC - CHARGE_ATOMIC)
    const [claim] = await svc.sql<{ status: string; approval: { value: string } | null }[]>`
      SELECT status, authorization_payload->'permit2612' AS approval FROM claims
      WHERE target_type = 'facilitator' AND lower(payer) = ${payer.address.toLowerCase()}`
    expect(claim).toEqual({ status: 'applied', approval: expect.objectContaining({ value: '50000' }) })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('a retry of /settle gets the first answer; verify refuses it as used; more than the maximum is refused', async () => {
    const payer = chain.payers[0]!
    const first = await fetch(`${shopUrl}/metered`)
    const required = decodePaymentRequiredHeader(first.headers.get('payment-required')!)
    const payload = await uptoFetch(payer.privateKey).client.createPaymentPayload(required as never)
    const accepted = required.accepts[0]!
    const charged = { ...accepted, amount: '30000' }
    const fc = facilitatorClient(svc.url, merchantKey)
    const over = await fc.settle(payload as never, { ...accepted, amount: '50001' } as never)
    expect(over).toMatchObject({
      success: false,
      errorReason: 'invalid_upto_evm_payload_settlement_exceeds_amount',
    })
    expect(await fc.verify(payload as never, accepted as never)).toMatchObject({ isValid: true })
    const answers = await Promise.all([1, 2, 3].map(() => fc.settle(payload as never, charged as never)))
    expect(answers[0]).toMatchObject({ success: true, amount: '30000' })
    for (const a of answers) expect(a).toEqual(answers[0])
    expect(await fc.verify(payload as never, accepted as never)).toMatchObject({
      isValid: false,
      invalidReason: 'proof_already_used',
    })
    const [n] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM claims WHERE target_type = 'facilitator' AND kind = 'upto'`
    // The two tests before paid one each.
    expect(n!.n).toBe(3)
  })

  it('a smart-wallet payer (ERC-1271) pays through the published middleware; a stranger signing for it does not', async () => {
    const { wallet, owner } = await fundedSmartWallet({
      rpcUrl: chain.rpcUrl,
      usdc: chain.usdcAddress,
      funderKey: chain.payers[3]!.privateKey,
      amountAtomic: 100_000n,
    })
    await approvePermit2From({ rpcUrl: chain.rpcUrl, usdc: chain.usdcAddress, wallet })
    // The wallet's address pays; its owner's key signs (what the wallet's isValidSignature accepts).
    const as = (signer: { signTypedData: (m: never) => Promise<Hex> }) =>
      new x402Client().register(
        NETWORK,
        new UptoClient({ address: wallet, signTypedData: (m: never) => signer.signTypedData(m) } as never),
      )
    const r = await wrapFetchWithPayment(fetch, as(owner))(`${shopUrl}/metered`)
    expect(r.status, await r.clone().text()).toBe(200)
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, network: NETWORK })
    expect(receipt.payer?.toLowerCase()).toBe(wallet.toLowerCase())
    expect(await balanceOf(wallet)).toBe(100_000n - CHARGE_ATOMIC)

    const first = await fetch(`${shopUrl}/metered`)
    const required = decodePaymentRequiredHeader(first.headers.get('payment-required')!)
    const forged = await as(privateKeyToAccount(generatePrivateKey())).createPaymentPayload(required as never)
    expect(
      await facilitatorClient(svc.url, merchantKey).verify(forged as never, required.accepts[0] as never),
    ).toMatchObject({ isValid: false, invalidReason: 'invalid_permit2_signature' })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })
})

describe('the payer reservation at the facilitator', () => {
  it('three /settle and a metered call racing one balance: never more claimed than the wallet holds', async () => {
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key: merchantKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    expect(ep.status).toBe(201)
    const metered: string = ep.body.metered_url
    // A fresh payer holding two and a half prices.
    const key = generatePrivateKey()
    const payer = privateKeyToAccount(key)
    await send(chain.payers[1]!.privateKey, { functionName: 'transfer', args: [payer.address, 25_000n] })
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: payer as never })
    const r402 = await fetch(metered)
    const required = decodePaymentRequiredHeader(r402.headers.get('payment-required')!)
    const payloads = await Promise.all([0, 1, 2, 3].map(() => client.createPaymentPayload(required as never)))
    const accepted = required.accepts.find((a) => a.scheme === 'exact')!
    const fc = facilitatorClient(svc.url, merchantKey)
    const [a, b, c, call] = await Promise.all([
      ...payloads.slice(0, 3).map((p) => fc.settle(p as never, accepted as never)),
      fetch(metered, {
        headers: { 'PAYMENT-SIGNATURE': Buffer.from(JSON.stringify(payloads[3])).toString('base64') },
      }).then(async (r) => ({ status: r.status, body: await r.text() })),
    ])
    const settles = [a, b, c] as Array<{ success: boolean; errorReason?: string }>
    const won =
      settles.filter((s) => s.success).length + ((call as { status: number }).status === 200 ? 1 : 0)
    expect(won).toBe(2)
    for (const s of settles.filter((s) => !s.success)) expect(s.errorReason).toBe('insufficient_funds')
    if ((call as { status: number }).status !== 200)
      expect((call as { body: string }).body).toContain('insufficient_funds')
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    // Nothing reverted for want of funds: every claim settled, the wallet down by exactly what won.
    const [f] = await svc.sql<{ failed: number; claims: number }[]>`
      SELECT count(*) FILTER (WHERE settlement_error IS NOT NULL)::int AS failed, count(*)::int AS claims
      FROM claims WHERE lower(payer) = ${payer.address.toLowerCase()}`
    expect(f).toEqual({ failed: 0, claims: 2 })
    expect(await balanceOf(payer.address)).toBe(5_000n)
  })
})
