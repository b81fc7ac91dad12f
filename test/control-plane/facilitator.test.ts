// tollgate as an x402 facilitator for a merchant's own server: the published @x402/express middleware,
// unchanged, with HTTPFacilitatorClient pointed at /api/v1/facilitator and the merchant's API key, paid by
// the published @x402/fetch client. The payment is settled in tollgate's settlement batch on anvil, booked
// once (payTo the treasury) or only sent (payTo the merchant's own wallet), its webhook delivered; /settle
// replayed concurrently on two instances settles once; a payload used here cannot pay a metered call.
import { serve } from '@hono/node-server'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/server'
import { paymentMiddleware, x402ResourceServer } from '@x402/express'
import { paymentMiddleware as honoPaymentMiddleware } from '@x402/hono'
import express from 'express'
import { Hono } from 'hono'
import { type Address, createPublicClient, getAddress, type Hex, http, serializeErc6492Signature } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import {
  facilitatorSettleChecks,
  settlerBalance,
  settlerBalanceFloor,
} from '../../src/observability/metrics.ts'
import type { Service } from '../../src/service.ts'
import { fundedSmartWallet } from '../chain/contracts/smart-wallet.ts'
import { usingServer } from '../helpers/database.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import {
  type ExactSigner,
  exactPayer,
  facilitatorClient,
  listenShop,
  type Shop,
  testUsdcPrice,
} from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from '../x402/harness.ts'

const NETWORK = 'eip155:84532'
const PRICE_ATOMIC = 10_000n // $0.01

/** What the express handlers use of their response. */
type Json = { json(body: unknown): void }

let chain: DevChain
let svc: Service
let other: Service | null = null
let hooks: WebhookReceiver
let upstream: Upstream
let merchantKey: string
let merchantWallet: Address
let shop: Shop
let shopUrl: string
let reader: ReturnType<typeof createPublicClient>
let rpc: RpcProxy

const overrides = {
  settlement: { interval_ms: 200 },
  webhooks: { poll_interval_ms: 100 },
  facilitator: { settle_wait_ms: 20_000 },
}

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)

/** A payload signed by the published client for the terms of a 402 (PAYMENT-REQUIRED header). */
async function signFor(url: string, signer: ExactSigner) {
  const r = await fetch(url)
  expect(r.status).toBe(402)
  const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
  const { client } = exactPayer(signer)
  const payload = await client.createPaymentPayload(required as never)
  return { required, payload, accepted: required.accepts[0]! }
}

/** The merchant's /verify or /settle of a payload for its terms, as the middleware sends them. */
function facilitate(path: 'verify' | 'settle', signed: { payload: unknown; accepted: unknown }) {
  return callApi(svc.url, `/api/v1/facilitator/${path}`, {
    key: merchantKey,
    body: settleBody(signed.payload, signed.accepted),
  })
}

async function settleChecks(check: 'verdict' | 'full'): Promise<number> {
  return (await facilitatorSettleChecks.get()).values.find((v) => v.labels.check === check)?.value ?? 0
}

function settleBody(payload: unknown, requirements: unknown) {
  return { x402Version: 2, paymentPayload: payload, paymentRequirements: requirements }
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain({ payers: 6 })
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  upstream = await startUpstream()
  hooks = await startWebhookReceiver()
  // The first instance reads the chain through a proxy, so that a test can cut one kind of call.
  rpc = await startRpcProxy(chain.rpcUrl)
  svc = await startBaseSepoliaService(chain, rpc.url, overrides as never)
  merchantWallet = chain.payers[4]!.address
  merchantKey = await registerMerchantKey(svc.url, merchantWallet, 'Own Middleware Co')
  const wh = await callApi(svc.url, '/api/v1/webhooks', {
    key: merchantKey,
    body: { url: `${hooks.url}/hook`, events: ['facilitator.settled'] },
  })
  expect(wh.status).toBe(201)

  // The merchant's own server: the published middleware, unchanged, pointed at tollgate.
  const price = testUsdcPrice(PRICE_ATOMIC, chain.usdcAddress)
  const server = new x402ResourceServer(facilitatorClient(svc.url, merchantKey)).register(
    NETWORK,
    new ExactEvmScheme(),
  )
  const app = express()
  app.use(
    paymentMiddleware(
      {
        'GET /to-treasury': {
          accepts: { scheme: 'exact', price, network: NETWORK, payTo: chain.treasury.address },
          description: 'paid to tollgate, booked to the merchant',
        },
        'GET /to-merchant': {
          accepts: { scheme: 'exact', price, network: NETWORK, payTo: merchantWallet },
          description: 'paid to the merchant itself',
        },
        'GET /to-stranger': {
          accepts: { scheme: 'exact', price, network: NETWORK, payTo: chain.payers[3]!.address },
          description: 'paid to someone tollgate does not know',
        },
      },
      server,
    ),
  )
  app.get('/to-treasury', (_req: unknown, res: Json) => res.json({ served: 'treasury' }))
  app.get('/to-merchant', (_req: unknown, res: Json) => res.json({ served: 'merchant' }))
  app.get('/to-stranger', (_req: unknown, res: Json) => res.json({ served: 'stranger' }))
  shop = await listenShop(app)
  shopUrl = shop.url
})

afterAll(async () => {
  await shop?.close()
  await other?.stop()
  await svc?.stop()
  await hooks?.close()
  await upstream?.close()
  await rpc?.close()
  await chain?.stop()
})

describe('tollgate as the facilitator of the published @x402/express middleware', () => {
  it('answers /supported to HTTPFacilitatorClient: exact v1 and v2 on its network, its extensions, signer', async () => {
    const supported = await facilitatorClient(svc.url, merchantKey).getSupported()
    expect(supported.kinds).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ x402Version: 2, scheme: 'exact', network: NETWORK }),
        expect.objectContaining({ x402Version: 1, scheme: 'exact', network: 'base-sepolia' }),
      ]),
    )
    expect(supported.extensions).toContain('payment-identifier')
    // The treasury (the leader's batches) and this instance's facilitator settler (its group commit).
    expect(supported.signers['eip155:*']).toHaveLength(2)
    expect(supported.signers['eip155:*']![0]).toBe(chain.treasury.address)
    // Without the merchant's key: the API's own 401.
    const anon = await fetch(`${svc.url}/api/v1/facilitator/supported`)
    expect(anon.status).toBe(401)
    expect(((await anon.json()) as { error: { code: string } }).error.code).toBe('missing_api_key')
  })

  it('a call paid to the treasury is settled on chain in the batch, booked once (95 % to the merchant), its webhook delivered', async () => {
    const payer = chain.payers[0]!
    const before = await balanceOf(payer.address)
    // The counter is the process's (test files share it: isolate is off): read before and after.
    const checks = { verdict: await settleChecks('verdict'), full: await settleChecks('full') }
    const { fetch: pay } = exactPayer(payer.privateKey)
    const r = await pay(`${shopUrl}/to-treasury`)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(await r.json()).toEqual({ served: 'treasury' })
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: payer.address })
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    // /settle answered once the transaction was mined: the money has moved already.
    expect(await balanceOf(payer.address)).toBe(before - PRICE_ATOMIC)
    const mined = await reader.getTransactionReceipt({ hash: receipt.transaction as Hex })
    expect(mined.status).toBe('success')
    // The middleware's /settle was served by its /verify's verdict (same bytes, same process): no second
    // recovery or chain read.
    expect(await settleChecks('verdict')).toBe(checks.verdict + 1)
    expect(await settleChecks('full')).toBe(checks.full)
    // Sent by the facilitator's group commit, from its settler slot (a signer /supported names).
    const { signers } = await facilitatorClient(svc.url, merchantKey).getSupported()
    expect(signers['eip155:*']).toHaveLength(2)
    expect(signers['eip155:*']![1]!.toLowerCase()).toBe(mined.from.toLowerCase())
    // Its slot's gas is watched beside the data plane's (the top slot: the facilitator's count down).
    const slot = String(svc.config.settlement.before_answer.slots - 1)
    const gas = (await settlerBalance.get()).values.find((v) => v.labels.slot === slot)
    const floor = (await settlerBalanceFloor.get()).values.find((v) => v.labels.slot === slot)
    expect(floor?.value).toBe(svc.config.settlement.before_answer.gas_floor_eth)
    expect(gas?.value).toBeGreaterThanOrEqual(floor!.value)

    const entries = await svc.sql<{ kind: string; wallet: string | null; amount_atomic: bigint }[]>`
      SELECT kind, wallet, amount_atomic FROM ledger_entries WHERE source_type = 'facilitator' ORDER BY kind`
    expect(entries.map((e) => [e.kind, e.wallet?.toLowerCase() ?? null, e.amount_atomic])).toEqual([
      ['fee', null, 500n],
      ['owner_share', merchantWallet.toLowerCase(), 9_500n],
    ])
    const list = await callApi(svc.url, '/api/v1/settlements', { key: merchantKey })
    expect(list.status).toBe(200)
    expect(list.body.data).toEqual([
      expect.objectContaining({
        object: 'settlement',
        status: 'settled',
        custody: 'treasury',
        amount_atomic: '10000',
        owner_share_atomic: '9500',
        fee_atomic: '500',
        transaction: receipt.transaction,
      }),
    ])
    const hook = await hooks.waitFor((c) => c.body.includes('facilitator.settled'), 10_000)
    const event = JSON.parse(hook.body)
    expect(event).toMatchObject({
      type: 'facilitator.settled',
      data: { status: 'settled', custody: 'treasury' },
    })
    expect(event.data.transaction).toBe(receipt.transaction)
  })

  it('a call paid to the merchant’s own wallet is only submitted: the merchant holds it, nothing booked', async () => {
    const payer = chain.payers[1]!
    const merchantBefore = await balanceOf(merchantWallet)
    const { fetch: pay } = exactPayer(payer.privateKey)
    const r = await pay(`${shopUrl}/to-merchant`)
    expect(r.status, await r.clone().text()).toBe(200)
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt.success).toBe(true)
    expect(await balanceOf(merchantWallet)).toBe(merchantBefore + PRICE_ATOMIC)
    const [n] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM ledger_entries WHERE source_type = 'facilitator'`
    expect(n!.n).toBe(2) // the treasury call's two entries only
    const list = await callApi(svc.url, '/api/v1/settlements', { key: merchantKey })
    expect(list.body.data[0]).toMatchObject({ custody: 'merchant', status: 'settled', fee_atomic: '0' })
  })

  it('reconcile finds the books equal to the chain: the treasury settlement as revenue, the merchant’s as none', async () => {
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('the published @x402/hono middleware, unchanged, is settled and booked the same way', async () => {
    const price = testUsdcPrice(PRICE_ATOMIC, chain.usdcAddress)
    const server = new x402ResourceServer(facilitatorClient(svc.url, merchantKey)).register(
      NETWORK,
      new ExactEvmScheme(),
    )
    const app = new Hono()
    app.use(
      honoPaymentMiddleware(
        {
          'GET /hono': {
            accepts: { scheme: 'exact', price, network: NETWORK, payTo: chain.treasury.address },
          },
        },
        server as never,
      ),
    )
    app.get('/hono', (c) => c.json({ served: 'hono' }))
    const { server: listening, url } = await new Promise<{ server: ReturnType<typeof serve>; url: string }>(
      (resolve) => {
        const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) =>
          resolve({ server: s, url: `http://127.0.0.1:${info.port}` }),
        )
      },
    )
    try {
      const payer = chain.payers[3]!
      const before = await balanceOf(payer.address)
      const { fetch: pay } = exactPayer(payer.privateKey)
      const r = await pay(`${url}/hono`)
      expect(r.status, await r.clone().text()).toBe(200)
      const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
      expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: payer.address })
      expect(await balanceOf(payer.address)).toBe(before - PRICE_ATOMIC)
      const [n] = await svc.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM ledger_entries e JOIN facilitator_settlements f ON f.id = e.source_id
        WHERE e.source_type = 'facilitator' AND f.settlement_tx = ${receipt.transaction}`
      expect(n!.n).toBe(2)
    } finally {
      await new Promise((resolve) => listening.close(resolve))
    }
  })

  it('a payTo that is neither the treasury nor the merchant’s wallet is refused, naming it', async () => {
    const { accepted, payload } = await signFor(`${shopUrl}/to-stranger`, chain.payers[2]!.privateKey)
    const verdict = await facilitatorClient(svc.url, merchantKey).verify(payload as never, accepted as never)
    expect(verdict).toMatchObject({ isValid: false, invalidReason: 'pay_to_not_allowed' })
    expect(verdict.invalidMessage).toContain(chain.payers[3]!.address)
    const { fetch: pay } = exactPayer(chain.payers[2]!.privateKey)
    const r = await pay(`${shopUrl}/to-stranger`)
    expect(r.status).toBe(402)
  })

  it('a malformed body gets the API’s error shape and changes nothing', async () => {
    const r = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: { x402Version: 2, paymentPayload: {} },
    })
    expect(r.status).toBe(400)
    expect(r.body.error.code).toBe('invalid_parameter')
  })
})

describe('idempotent, claimed like every proof', () => {
  it.skipIf(!usingServer)(
    '/settle replayed 10 times at once on two instances of one database: one settlement, one answer',
    async () => {
      // The second instance on the first's database (a server: PGlite is one session).
      const [row] = await svc.sql<{ db: string }[]>`SELECT current_database() AS db`
      const url = new URL(process.env.DATABASE_URL!)
      url.pathname = `/${row!.db}`
      other = await startBaseSepoliaService(chain, chain.rpcUrl, overrides as never, 'warn', {
        DATABASE_URL: url.toString(),
      })
      const payer = chain.payers[2]!
      const before = await balanceOf(payer.address)
      const { payload, accepted } = await signFor(`${shopUrl}/to-treasury`, payer.privateKey)
      const answers = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          callApi(i % 2 === 0 ? svc.url : other!.url, '/api/v1/facilitator/settle', {
            key: merchantKey,
            body: settleBody(payload, accepted),
          }),
        ),
      )
      for (const a of answers) expect(a.status).toBe(200)
      const first = answers[0]!.body
      expect(first).toMatchObject({ success: true, network: NETWORK, amount: '10000' })
      for (const a of answers) expect(a.body).toEqual(first)
      expect(await balanceOf(payer.address)).toBe(before - PRICE_ATOMIC)
      const [c] = await svc.sql<{ claims: number; rows: number; failed: number }[]>`
        SELECT (SELECT count(*) FROM claims WHERE target_type = 'facilitator' AND payer = ${payer.address})::int AS claims,
               (SELECT count(*) FROM facilitator_settlements WHERE payer = ${payer.address.toLowerCase()})::int AS rows,
               (SELECT count(*) FROM claims WHERE settlement_error IS NOT NULL)::int AS failed`
      expect(c).toEqual({ claims: 1, rows: 1, failed: 0 })
      // A later retry (after the fact) still gets the first outcome.
      const again = await callApi(other!.url, '/api/v1/facilitator/settle', {
        key: merchantKey,
        body: settleBody(payload, accepted),
      })
      expect(again.body).toEqual(first)
    },
  )

  it('a payment-identifier settles one payload: the same one again gets its answer, another is refused', async () => {
    const payer = chain.payers[0]!.privateKey
    const id = `order-${Date.now()}-abcdefgh`
    const withId = (p: Record<string, unknown>) => ({
      ...p,
      extensions: { 'payment-identifier': { info: { id } } },
    })
    const a = await signFor(`${shopUrl}/to-treasury`, payer)
    const first = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: settleBody(withId(a.payload as never), a.accepted),
    })
    expect(first.body).toMatchObject({ success: true })
    const again = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: settleBody(withId(a.payload as never), a.accepted),
    })
    expect(again.body).toEqual(first.body)
    const b = await signFor(`${shopUrl}/to-treasury`, payer)
    const other = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: settleBody(withId(b.payload as never), b.accepted),
    })
    expect(other.body).toMatchObject({ success: false, errorReason: 'payment_identifier_conflict' })
    const [n] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM facilitator_settlements WHERE payment_identifier = ${id}`
    expect(n!.n).toBe(1)
  })

  it('past the wait, /settle says settlement_pending (success false), and a retry gets the outcome', async () => {
    // A private instance whose batcher waits for a nudge; the merchant and its shop's terms are the same.
    // One settler slot, the data plane's: no facilitator group commit, the leader's batch sends it.
    const slow = await startBaseSepoliaService(chain, chain.rpcUrl, {
      settlement: { interval_ms: 3_600_000, before_answer: { slots: 1 } },
      facilitator: { settle_wait_ms: 300 },
    } as never)
    try {
      const key = await registerMerchantKey(slow.url, merchantWallet, 'Slow Co')
      const payer = chain.payers[1]!
      const before = await balanceOf(payer.address)
      const { payload, accepted } = await signFor(`${shopUrl}/to-treasury`, payer.privateKey)
      const pending = await facilitatorClient(slow.url, key).settle(payload as never, accepted as never)
      expect(pending).toMatchObject({ success: false, errorReason: 'settlement_pending', network: NETWORK })
      expect(await balanceOf(payer.address)).toBe(before)
      await slow.jobs.runNow('x402-settlement')
      const done = await facilitatorClient(slow.url, key).settle(payload as never, accepted as never)
      expect(done).toMatchObject({ success: true, network: NETWORK, payer: payer.address })
      expect(done.transaction).toMatch(/^0x[0-9a-f]{64}$/)
      expect(await balanceOf(payer.address)).toBe(before - PRICE_ATOMIC)
    } finally {
      await slow.stop()
    }
  })

  it('20 /settle at once share the group commit: few transactions from its settler, each booked once', async () => {
    const payer = chain.payers[5]!
    const before = await balanceOf(payer.address)
    const signed = await Promise.all(
      Array.from({ length: 20 }, () => signFor(`${shopUrl}/to-treasury`, payer.privateKey)),
    )
    const answers = await Promise.all(
      signed.map((p) =>
        callApi(svc.url, '/api/v1/facilitator/settle', {
          key: merchantKey,
          body: settleBody(p.payload, p.accepted),
        }),
      ),
    )
    for (const a of answers)
      expect(a.body).toMatchObject({ success: true, network: NETWORK, amount: '10000' })
    const hashes = new Set(answers.map((a) => a.body.transaction as Hex))
    // The first waits its window alone; the rest gather while it is sent, a group at most every 200 ms: 2 or 3
    // transactions when the 20 arrive within ~0.4 s, a few more on a loaded machine (CI saw 4), never 20.
    expect(hashes.size).toBeLessThanOrEqual(6)
    const { signers } = await facilitatorClient(svc.url, merchantKey).getSupported()
    for (const hash of hashes) {
      const mined = await reader.getTransactionReceipt({ hash })
      expect(mined.status).toBe('success')
      expect(mined.from.toLowerCase()).toBe(signers['eip155:*']![1]!.toLowerCase())
    }
    expect(await balanceOf(payer.address)).toBe(before - 20n * PRICE_ATOMIC)
    const [books] = await svc.sql<{ applied: number; settled: number; entries: number }[]>`
      SELECT (SELECT count(*) FROM claims WHERE target_type = 'facilitator' AND payer = ${payer.address}
                AND status = 'applied')::int AS applied,
             (SELECT count(*) FROM facilitator_settlements WHERE payer = ${payer.address.toLowerCase()}
                AND settled_at IS NOT NULL)::int AS settled,
             (SELECT count(*) FROM ledger_entries l JOIN facilitator_settlements f ON f.id = l.source_id
               WHERE l.source_type = 'facilitator' AND f.payer = ${payer.address.toLowerCase()})::int AS entries`
    expect(books).toEqual({ applied: 20, settled: 20, entries: 40 })
    // A retry reads the books: the same answer as the group commit gave.
    const again = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: settleBody(signed[7]!.payload, signed[7]!.accepted),
    })
    expect(again.body).toEqual(answers[7]!.body)
  })

  it('a payload settled at the facilitator is refused on a metered URL, and the reverse', async () => {
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key: merchantKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    expect(ep.status).toBe(201)
    const metered: string = ep.body.metered_url
    const payer = chain.payers[3]!.privateKey

    // Facilitator first: the metered URL refuses the same payload.
    const a = await signFor(metered, payer)
    const settled = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: settleBody(a.payload, a.accepted),
    })
    expect(settled.body).toMatchObject({ success: true })
    const header = Buffer.from(JSON.stringify(a.payload)).toString('base64')
    const before = upstream.count()
    const refused = await fetch(metered, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(refused.status).toBe(402)
    expect(((await refused.json()) as { error: string }).error).toBe('proof_already_used')
    expect(upstream.count()).toBe(before)

    // Metered first: the facilitator refuses it (claimed, not yet settled: the claim refuses, not the chain).
    const b = await signFor(metered, payer)
    const paid = await fetch(metered, {
      headers: { 'PAYMENT-SIGNATURE': Buffer.from(JSON.stringify(b.payload)).toString('base64') },
    })
    expect(paid.status).toBe(200)
    await paid.arrayBuffer()
    await svc.flushCaptures()
    const late = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: settleBody(b.payload, b.accepted),
    })
    expect(late.body).toMatchObject({ success: false, errorReason: 'proof_already_used' })
  })
})

describe('refunds of facilitator settlements', () => {
  it('a settlement to the treasury is refunded to its payer in the next payout batch, booked, reconciled', async () => {
    const [s] = await svc.sql<{ id: string; payer: Address }[]>`
      SELECT id, payer FROM facilitator_settlements
      WHERE custody = 'treasury' AND settled_at IS NOT NULL ORDER BY created_at LIMIT 1`
    const refund = (body: Record<string, unknown>) =>
      callApi(svc.url, '/api/v1/refunds', { key: merchantKey, body })
    // A part, then the rest: the merchant's part in proportion to its 95 % share, the fee's given back.
    const part = await refund({ settlement_id: s!.id, amount: '0.004', reason: 'partly unhappy' })
    expect(part.status, JSON.stringify(part.body)).toBe(201)
    expect(part.body).toMatchObject({
      object: 'refund',
      status: 'pending',
      settlement_id: s!.id,
      payment_id: null,
      call_id: null,
      amount_atomic: '4000',
      owner_debit_atomic: '3800',
      fee_returned_atomic: '200',
      wallet: s!.payer,
    })
    const rest = await refund({ settlement_id: s!.id })
    expect(rest.status, JSON.stringify(rest.body)).toBe(201)
    expect(rest.body).toMatchObject({
      amount_atomic: '6000',
      owner_debit_atomic: '5700',
      fee_returned_atomic: '300',
    })
    // Nothing left; a settlement paid to the merchant's own wallet, or unknown, or two sources: refused.
    expect((await refund({ settlement_id: s!.id, amount: '0.000001' })).body.error).toMatchObject({
      code: 'invalid_parameter',
      param: 'amount',
    })
    const [own] = await svc.sql<{ id: string }[]>`
      SELECT id FROM facilitator_settlements WHERE custody = 'merchant' AND settled_at IS NOT NULL LIMIT 1`
    const mine = await refund({ settlement_id: own!.id })
    expect(mine.status).toBe(409)
    expect(mine.body.error.message).toContain('your own wallet')
    expect((await refund({ settlement_id: 'fst_nosuchsettlement' })).status).toBe(404)
    expect((await refund({ settlement_id: s!.id, call_id: 'call_x' })).status).toBe(400)
    const listed = await callApi(svc.url, `/api/v1/refunds?settlement_id=${s!.id}`, { key: merchantKey })
    expect(listed.body.data.map((r: { id: string }) => r.id)).toEqual([rest.body.id, part.body.id])

    const before = await balanceOf(s!.payer)
    await svc.jobs.runNow('payout-batch')
    expect((await balanceOf(s!.payer)) - before).toBe(PRICE_ATOMIC)
    for (const r of [part, rest]) {
      const got = await callApi(svc.url, `/api/v1/refunds/${r.body.id}`, { key: merchantKey })
      expect(got.body).toMatchObject({
        status: 'paid',
        transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      })
    }
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.refunds).toMatchObject({ refunds: 2, paid: 2, over_refunded: 0 })
  })
})

describe('a smart-wallet payer (ERC-1271) at the facilitator', () => {
  it('pays the published middleware through the published client: the wallet asked, settled on chain, booked', async () => {
    const funded = await fundedSmartWallet({
      rpcUrl: chain.rpcUrl,
      usdc: chain.usdcAddress,
      funderKey: chain.payers[5]!.privateKey,
      amountAtomic: 1_000_000n,
    })
    const wallet = getAddress(funded.wallet)
    const owner = funded.owner
    // The wallet's address pays; its owner's key signs (what the wallet's isValidSignature accepts), so
    // ecrecover gives the owner, not `from`: only the wallet can say yes.
    const asWallet = { address: wallet, signTypedData: (m: never) => owner.signTypedData(m) }
    const { fetch: pay } = exactPayer(asWallet)

    // The wallet cannot be asked (the node's eth_call failing): a retryable refusal, nothing claimed.
    const unasked = await signFor(`${shopUrl}/to-treasury`, asWallet)
    rpc.failMethods = ['eth_call']
    try {
      for (const path of ['verify', 'settle'] as const) {
        const answer = await facilitate(path, unasked)
        expect(answer.body).toMatchObject(
          path === 'verify'
            ? { isValid: false, invalidReason: 'unexpected_verify_error' }
            : { success: false, errorReason: 'unexpected_verify_error' },
        )
      }
    } finally {
      rpc.failMethods = []
    }
    const [none] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM facilitator_settlements WHERE payer = ${wallet.toLowerCase()}`
    expect(none!.n).toBe(0)
    const r = await pay(`${shopUrl}/to-treasury`)
    expect(r.status, await r.clone().text()).toBe(200)
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: wallet })
    expect(await balanceOf(wallet)).toBe(1_000_000n - PRICE_ATOMIC)
    const booked = await svc.sql<{ kind: string; amount_atomic: bigint }[]>`
      SELECT e.kind, e.amount_atomic FROM ledger_entries e
      JOIN facilitator_settlements f ON f.id = e.source_id
      WHERE e.source_type = 'facilitator' AND f.payer = ${wallet.toLowerCase()} ORDER BY e.kind`
    expect(booked.map((e) => [e.kind, e.amount_atomic])).toEqual([
      ['fee', 500n],
      ['owner_share', 9_500n],
    ])

    // Another key is not the wallet's signature: refused as a bad signature, nothing claimed.
    const stranger = privateKeyToAccount(generatePrivateKey())
    const forged = await signFor(`${shopUrl}/to-treasury`, {
      address: wallet,
      signTypedData: (m: never) => stranger.signTypedData(m),
    })
    expect((await facilitate('verify', forged)).body).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_exact_evm_payload_signature',
      payer: wallet,
    })
    expect(await balanceOf(wallet)).toBe(1_000_000n - PRICE_ATOMIC)
  })

  it('an ERC-6492 signature of a wallet not deployed yet, of no trusted factory: the published reason', async () => {
    // A counterfactual wallet: an address with no code, its signature wrapped with a factory call.
    const owner = privateKeyToAccount(generatePrivateKey())
    const undeployed = privateKeyToAccount(generatePrivateKey()).address
    const counterfactual = await signFor(`${shopUrl}/to-treasury`, {
      address: undeployed,
      signTypedData: async (m: never) =>
        serializeErc6492Signature({
          address: chain.payers[5]!.address,
          data: '0xdeadbeef',
          signature: await owner.signTypedData(m),
        }),
    })
    expect((await facilitate('verify', counterfactual)).body).toMatchObject({
      isValid: false,
      invalidReason: 'eip6492_factory_not_allowed',
      payer: undeployed,
    })
  })
})
