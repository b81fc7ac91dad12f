// A smart wallet that does not exist yet pays (ERC-6492): its client signs with the wrapper that carries its
// factory's call, tollgate checks the signature by ERC-6492's validator (an eth_call that creates the wallet
// in the call's state), and the AuthorizationBatcher deploys the wallet in the transaction that settles it.
// The published @x402/fetch client, unchanged, with a counterfactual signer: on a metered URL on the default
// settings (settled before the answer, read as paid) and at the facilitator of the published @x402/express
// middleware. Only factories in x402.eip6492_factories are trusted; a node that cannot be asked is a 503.
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/server'
import { paymentMiddleware, x402ResourceServer } from '@x402/express'
import express from 'express'
import { type Address, createPublicClient, type Hex, http, serializeErc6492Signature } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { anvilSetCode } from '../../src/chain/anvil-process.ts'
import { authorizationBatcherArtifact } from '../../src/chain/contracts/artifacts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { AUTHORIZATION_BATCHER_ADDRESS } from '../../src/chain/settle-batch.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import type { Service } from '../../src/service.ts'
import {
  counterfactualSmartWallet,
  deploySmartWalletFactory,
  smartWalletFactory,
} from '../chain/contracts/smart-wallet.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { exactPayer, facilitatorClient, listenShop, type Shop, testUsdcPrice } from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from './harness.ts'

checkPaymentProtocol()

const NETWORK = 'eip155:84532'
const PRICE_ATOMIC = 10_000n
const FUNDED = 1_000_000n

/** Express's handler response, as far as used. */
type Json = { json(body: unknown): void }

let chain: DevChain
let svc: Service
let rpc: RpcProxy
let upstream: Awaited<ReturnType<typeof startUpstream>>
let reader: ReturnType<typeof createPublicClient>
let meteredUrl: string
let merchantKey: string
let shop: Shop
let trusted: Address

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)
const codeOf = (address: Address) => reader.getCode({ address })

/** A wallet of `factory` (default: the trusted one) at an address with no code, holding FUNDED. */
function newWallet(factory?: Address) {
  return counterfactualSmartWallet({
    rpcUrl: chain.rpcUrl,
    usdc: chain.usdcAddress,
    funderKey: chain.payers[3]!.privateKey,
    amountAtomic: FUNDED,
    ...(factory ? { factory } : {}),
  })
}

/** The published client's PAYMENT-SIGNATURE for the terms of `url`'s 402, signed by `signer`. */
async function paymentHeader(url: string, signer: Parameters<typeof exactPayer>[0]): Promise<string> {
  const r = await fetch(url)
  expect(r.status).toBe(402)
  const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
  const payload = await exactPayer(signer).client.createPaymentPayload(required as never)
  return Buffer.from(JSON.stringify(payload)).toString('base64')
}

async function refused(header: string, status: number, reason?: string) {
  const before = upstream.count()
  const r = await fetch(meteredUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
  expect(r.status, await r.clone().text()).toBe(status)
  if (reason) expect(((await r.json()) as { error: string }).error).toBe(reason)
  else await r.arrayBuffer()
  expect(upstream.count()).toBe(before)
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain({ payers: 5 })
  reader = createPublicClient({ chain: baseSepolia, transport: http(chain.rpcUrl) }) as never
  upstream = await startUpstream()
  trusted = await smartWalletFactory({ rpcUrl: chain.rpcUrl, funderKey: chain.payers[3]!.privateKey })
  // Through a proxy: one test cuts the node's eth_call.
  rpc = await startRpcProxy(chain.rpcUrl)
  // The default settings (settled before the answer) but for the one factory trusted.
  svc = await startBaseSepoliaService(chain, rpc.url, {
    x402: { eip6492_factories: [trusted] },
    facilitator: { settle_wait_ms: 20_000 },
  } as never)
  merchantKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Counterfactual Co')
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: merchantKey,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  expect(ep.status).toBe(201)
  meteredUrl = ep.body.metered_url

  // A merchant's own server: the published middleware with tollgate as its facilitator.
  const server = new x402ResourceServer(facilitatorClient(svc.url, merchantKey)).register(
    NETWORK,
    new ExactEvmScheme(),
  )
  const app = express()
  app.use(
    paymentMiddleware(
      {
        'GET /paid': {
          accepts: {
            scheme: 'exact',
            price: testUsdcPrice(PRICE_ATOMIC, chain.usdcAddress),
            network: NETWORK,
            payTo: chain.treasury.address,
          },
          description: 'paid to tollgate, booked to the merchant',
        },
      },
      server,
    ),
  )
  app.get('/paid', (_req: unknown, res: Json) => res.json({ served: true }))
  shop = await listenShop(app)
})

afterAll(async () => {
  await shop?.close()
  await svc?.stop()
  await rpc?.close()
  await upstream?.close()
  await chain?.stop()
})

describe('a counterfactual smart wallet (ERC-6492) pays a metered URL', () => {
  it('through the published client: deployed and settled before the answer, read as paid, charged once', async () => {
    const cf = await newWallet()
    expect(await codeOf(cf.wallet)).toBeUndefined()
    const before = upstream.count()
    const r = await exactPayer(cf.signer).fetch(meteredUrl)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(upstream.count()).toBe(before + 1)
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    // The x402 e2e suite's pass rule: success, a transaction, no errorReason.
    expect(receipt).toMatchObject({ success: true, payer: cf.wallet })
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    expect(receipt.errorReason).toBeUndefined()
    // The settling transaction deployed the wallet (through the batcher) and moved exactly the price.
    const mined = await reader.getTransactionReceipt({ hash: receipt.transaction as Hex })
    expect(mined.status).toBe('success')
    expect(await codeOf(cf.wallet)).toBeDefined()
    expect(await balanceOf(cf.wallet)).toBe(FUNDED - PRICE_ATOMIC)

    // Deployed now: its next payment, still wrapped by its client, is an ordinary smart wallet's.
    const again = await exactPayer(cf.signer).fetch(meteredUrl)
    expect(again.status, await again.clone().text()).toBe(200)
    expect(decodePaymentResponseHeader(again.headers.get('payment-response')!)).toMatchObject({
      success: true,
    })
    expect(await balanceOf(cf.wallet)).toBe(FUNDED - 2n * PRICE_ATOMIC)
  })

  it("settled after the call by the leader's batch on an endpoint set so: deployed there, once", async () => {
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key: merchantKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01, x402_settlement: 'after' },
    })
    expect(ep.body.x402_settlement).toBe('after')
    const [first, second] = [await newWallet(), await newWallet()]
    for (const cf of [first, second]) {
      const r = await exactPayer(cf.signer).fetch(ep.body.metered_url)
      expect(r.status, await r.clone().text()).toBe(200)
      expect(decodePaymentResponseHeader(r.headers.get('payment-response')!)).toMatchObject({
        errorReason: 'settlement_pending',
      })
    }
    await svc.flushCaptures()
    await expect
      .poll(
        async () => {
          await svc.jobs.runNow('x402-settlement')
          return Promise.all([balanceOf(first.wallet), balanceOf(second.wallet)])
        },
        { timeout: 15_000, interval: 200 },
      )
      .toEqual([FUNDED - PRICE_ATOMIC, FUNDED - PRICE_ATOMIC])
    expect(await codeOf(first.wallet)).toBeDefined()
    expect(await codeOf(second.wallet)).toBeDefined()
  })

  it('refuses a factory not trusted, and a signature the wallet would not accept; nothing served or deployed', async () => {
    const other = await deploySmartWalletFactory({
      rpcUrl: chain.rpcUrl,
      funderKey: chain.payers[3]!.privateKey,
    })
    const untrusted = await newWallet(other)
    await refused(await paymentHeader(meteredUrl, untrusted.signer), 402, 'smart_wallet_factory_not_allowed')
    expect(await codeOf(untrusted.wallet)).toBeUndefined()

    // The trusted factory's call, but another key's signature: the wallet it creates would say no.
    const cf = await newWallet()
    const stranger = privateKeyToAccount(generatePrivateKey())
    const forged = {
      address: cf.wallet,
      signTypedData: async (m: never) =>
        serializeErc6492Signature({
          address: cf.factory,
          data: cf.factoryData,
          signature: await stranger.signTypedData(m),
        }),
    }
    await refused(await paymentHeader(meteredUrl, forged), 402, 'invalid_signature')
    expect(await codeOf(cf.wallet)).toBeUndefined()
    expect(await balanceOf(cf.wallet)).toBe(FUNDED)
  })

  it('a node that cannot run the validator is a 503 to retry, not a bad signature; asked again, it pays', async () => {
    const cf = await newWallet()
    const header = await paymentHeader(meteredUrl, cf.signer)
    rpc.failMethods = ['eth_call']
    try {
      await refused(header, 503)
    } finally {
      rpc.failMethods = []
    }
    const r = await fetch(meteredUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(r.status, await r.clone().text()).toBe(200)
    await r.arrayBuffer()
    expect(await balanceOf(cf.wallet)).toBe(FUNDED - PRICE_ATOMIC)
  })
})

describe('a counterfactual smart wallet where nothing can deploy it', () => {
  it('a chain without the AuthorizationBatcher refuses it though its factory is trusted; nothing served', async () => {
    // A service that has not looked for the batcher yet, on a chain where nobody deployed it.
    await anvilSetCode(chain.rpcUrl, AUTHORIZATION_BATCHER_ADDRESS, '0x')
    const bare = await startBaseSepoliaService(chain, chain.rpcUrl, {
      x402: { eip6492_factories: [trusted] },
    } as never)
    try {
      const key = await registerMerchantKey(bare.url, chain.payers[4]!.address, 'No Batcher Co')
      const ep = await callApi(bare.url, '/api/v1/endpoints', {
        key,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
      })
      const cf = await newWallet()
      const before = upstream.count()
      const r = await fetch(ep.body.metered_url, {
        headers: { 'PAYMENT-SIGNATURE': await paymentHeader(ep.body.metered_url, cf.signer) },
      })
      expect(r.status).toBe(402)
      expect(((await r.json()) as { error: string }).error).toBe('smart_wallet_not_deployed')
      expect(upstream.count()).toBe(before)
      expect(await codeOf(cf.wallet)).toBeUndefined()
    } finally {
      await bare.stop()
      await anvilSetCode(
        chain.rpcUrl,
        AUTHORIZATION_BATCHER_ADDRESS,
        authorizationBatcherArtifact.deployedBytecode,
      )
    }
  })
})

describe('a counterfactual smart wallet (ERC-6492) at the facilitator', () => {
  it('pays the published middleware: verified, deployed and settled by the batch, booked; reconcile clean', async () => {
    const cf = await newWallet()
    const r = await exactPayer(cf.signer).fetch(`${shop.url}/paid`)
    expect(r.status, await r.clone().text()).toBe(200)
    expect(decodePaymentResponseHeader(r.headers.get('payment-response')!)).toMatchObject({
      success: true,
      network: NETWORK,
      payer: cf.wallet,
    })
    expect(await codeOf(cf.wallet)).toBeDefined()
    expect(await balanceOf(cf.wallet)).toBe(FUNDED - PRICE_ATOMIC)
    const booked = await svc.sql<{ kind: string; amount_atomic: bigint }[]>`
      SELECT e.kind, e.amount_atomic FROM ledger_entries e
      JOIN facilitator_settlements f ON f.id = e.source_id
      WHERE e.source_type = 'facilitator' AND f.payer = ${cf.wallet.toLowerCase()} ORDER BY e.kind`
    expect(booked.map((e) => [e.kind, e.amount_atomic])).toEqual([
      ['fee', 500n],
      ['owner_share', 9_500n],
    ])

    // An untrusted factory: the published facilitator's reason.
    const other = await deploySmartWalletFactory({
      rpcUrl: chain.rpcUrl,
      funderKey: chain.payers[3]!.privateKey,
    })
    const untrusted = await newWallet(other)
    const terms = await fetch(`${shop.url}/paid`)
    const required = decodePaymentRequiredHeader(terms.headers.get('payment-required')!)
    const payload = await exactPayer(untrusted.signer).client.createPaymentPayload(required as never)
    const verified = await callApi(svc.url, '/api/v1/facilitator/verify', {
      key: merchantKey,
      body: { x402Version: 2, paymentPayload: payload, paymentRequirements: required.accepts[0] },
    })
    expect(verified.body).toMatchObject({ isValid: false, invalidReason: 'eip6492_factory_not_allowed' })

    // Every payment of this file, metered and facilitated, against the chain.
    await svc.flushCaptures()
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })
})
