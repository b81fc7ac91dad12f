// Resources paid through tollgate's facilitator appear in its public /discovery/resources when their payments
// carry the x402 `bazaar` extension, as the CDP facilitator's catalog lists them: the merchant's own server
// runs the published @x402/express middleware with the published bazaar server extension
// (declareDiscoveryExtension on a route), paid by the published @x402/fetch client. The item is what the
// published catalog code (@x402/extensions' extractDiscoveryInfo) reads from the same payment, with the
// figures its settlements give; a route without the extension, or a payment that did not settle, lists nothing.
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/server'
import { paymentMiddleware, x402ResourceServer } from '@x402/express'
import {
  bazaarResourceServerExtension,
  declareDiscoveryExtension,
  extractDiscoveryInfo,
} from '@x402/extensions/bazaar'
import express from 'express'
import * as v from 'valibot'
import { generatePrivateKey } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPaymentHeader } from 'x402/client'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { DiscoveryResources } from '../../src/control-plane/openapi-public.ts'
import type { Service } from '../../src/service.ts'
import { callApi } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { exactPayer, facilitatorClient, listenShop, type Shop, testUsdcPrice } from '../helpers/x402-v2.ts'
import {
  baseSepoliaWallet,
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
} from '../x402/harness.ts'

const NETWORK = 'eip155:84532'
const PRICE_ATOMIC = 10_000n

type Json = { json(body: unknown): void }
interface Item {
  resource: string
  type: string
  x402Version: number
  accepts: Array<Record<string, unknown>>
  description?: string
  mimeType?: string
  extensions?: { bazaar?: { info: unknown; schema: unknown } }
  observed?: Record<string, unknown>
}

let chain: DevChain
let svc: Service
let shop: Shop
let shopUrl: string
let merchantKey: string

/** The listing, past its few seconds of cache: polled until `until` holds. */
async function listing(until: (items: Item[]) => boolean, query = ''): Promise<Item[]> {
  let items: Item[] = []
  await waitFor(
    async () => {
      const r = await fetch(`${svc.url}/discovery/resources${query}`)
      const body = await r.json()
      // The answer is what the API description says it is.
      items = v.parse(DiscoveryResources, body).items as Item[]
      return until(items)
    },
    { timeoutMs: 15_000, intervalMs: 500, what: () => `the listing: ${JSON.stringify(items)}` },
  )
  return items
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    settlement: { interval_ms: 200 },
    facilitator: { settle_wait_ms: 20_000 },
  } as never)
  merchantKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Cataloged Co')
  const server = new x402ResourceServer(facilitatorClient(svc.url, merchantKey))
    .register(NETWORK, new ExactEvmScheme())
    .registerExtension(bazaarResourceServerExtension)
  const price = testUsdcPrice(PRICE_ATOMIC, chain.usdcAddress)
  const accepts = {
    scheme: 'exact',
    price,
    network: NETWORK as `${string}:${string}`,
    payTo: chain.treasury.address,
  }
  const app = express()
  app.use(
    paymentMiddleware(
      {
        'GET /weather': {
          accepts,
          description: 'the weather in a city',
          mimeType: 'application/json',
          extensions: {
            ...declareDiscoveryExtension({
              input: { city: 'Lisbon' },
              inputSchema: { properties: { city: { type: 'string' } }, required: ['city'] },
              output: { example: { city: 'Lisbon', celsius: 21 } },
            }),
          },
        },
        'GET /plain': { accepts, description: 'not declared for discovery' },
      },
      server,
    ),
  )
  app.get('/weather', (_req: unknown, res: Json) => res.json({ city: 'Lisbon', celsius: 21 }))
  app.get('/plain', (_req: unknown, res: Json) => res.json({ plain: true }))
  shop = await listenShop(app)
  shopUrl = shop.url
})

afterAll(async () => {
  await shop?.close()
  await svc?.stop()
  await chain?.stop()
})

describe('the facilitator’s bazaar catalog in /discovery/resources', () => {
  it('/supported names the bazaar extension', async () => {
    const r = await callApi(svc.url, '/api/v1/facilitator/supported', { key: merchantKey })
    expect(r.body.extensions).toEqual(expect.arrayContaining(['bazaar', 'payment-identifier']))
  })

  it('a payment that did not settle lists nothing', async () => {
    // A payer with no USDC: the middleware's /verify refuses it, nothing is claimed or cataloged.
    const { fetch: pay } = exactPayer(generatePrivateKey())
    const r = await pay(`${shopUrl}/weather?city=Lisbon`)
    expect(r.status).toBe(402)
    const [n] = await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM facilitator_resources`
    expect(n!.n).toBe(0)
    const page = await fetch(`${svc.url}/discovery/resources`)
    expect(((await page.json()) as { items: Item[] }).items).toEqual([])
  })

  it('a settled payment carrying the extension lists its resource as the published catalog reads it, with its figures', async () => {
    // Two payers: the first pays twice (a repeat payer), the second once; and one payment of the plain route.
    for (const [payer, url] of [
      [0, '/weather?city=Lisbon'],
      [0, '/weather?city=Porto'],
      [1, '/weather?city=Faro'],
      [1, '/plain'],
    ] as const) {
      const r = await exactPayer(chain.payers[payer]!.privateKey).fetch(`${shopUrl}${url}`)
      expect(r.status, await r.clone().text()).toBe(200)
    }
    const items = await listing((i) => i.length > 0 && i[0]!.observed?.paid_calls === 3)
    // One item, keyed by origin and path as the published catalog keys it (the query names a call): the
    // route with the extension (the plain route's payment settled, but carried none).
    expect(items).toHaveLength(1)
    const item = items[0]!

    // What the published catalog code reads from such a payment: the same resource, terms and info.
    const r402 = await fetch(`${shopUrl}/weather?city=Lisbon`)
    const required = decodePaymentRequiredHeader(r402.headers.get('payment-required')!)
    const payload = await exactPayer(chain.payers[2]!.privateKey).client.createPaymentPayload(
      required as never,
    )
    const discovered = extractDiscoveryInfo(payload as never, required.accepts[0] as never)
    expect(discovered).not.toBeNull()
    expect(item.resource).toBe(discovered!.resourceUrl)
    expect(item).toMatchObject({
      type: 'http',
      x402Version: 2,
      description: 'the weather in a city',
      mimeType: 'application/json',
    })
    expect(item.accepts).toEqual([required.accepts[0]])
    expect(item.extensions!.bazaar!.info).toEqual(discovered!.discoveryInfo)
    expect(item.extensions!.bazaar!.info).toMatchObject({ input: { type: 'http', method: 'GET' } })
    // The figures the endpoints' items carry, from the settlements that named it: three paid calls, one
    // payer twice; tollgate did not serve the calls, so no latency.
    expect(item.observed).toEqual({
      window_days: 7,
      paid_calls: 3,
      success_rate: 1,
      refund_rate: 0,
      p50_upstream_ms: null,
      p99_upstream_ms: null,
      repeat_payers: 1,
    })
    // The settlements name it; the plain route's does not.
    const rows = await svc.sql<{ resource_url: string | null }[]>`
      SELECT resource_url FROM facilitator_settlements ORDER BY created_at`
    expect(rows.map((r) => r.resource_url)).toEqual([item.resource, item.resource, item.resource, null])
  })

  it('the listing’s filters apply to it: type, price, pagination totals', async () => {
    expect(await listing((i) => i.length === 0, '?type=mcp')).toEqual([])
    expect(await listing((i) => i.length === 0, '?min_price=0.02')).toEqual([])
    expect(await listing((i) => i.length === 1, '?max_price=0.01')).toHaveLength(1)
    const page = await fetch(`${svc.url}/discovery/resources?limit=1&offset=1`)
    const body = (await page.json()) as { items: Item[]; pagination: { total: number } }
    expect(body.items).toEqual([])
    expect(body.pagination.total).toBe(1)
  })

  it('a v1 payment whose requirements carry a discoverable outputSchema lists its resource as v1', async () => {
    // A v1 server's terms (no resource object, no extension: the requirements say it all), paid by the
    // published v1 client, settled through /settle as a v1 middleware sends it.
    const requirements = {
      scheme: 'exact' as const,
      network: 'base-sepolia' as const,
      maxAmountRequired: '20000',
      resource: `${shopUrl}/v1/translate?to=pt`,
      description: 'a translation (v1)',
      mimeType: 'application/json',
      payTo: chain.treasury.address,
      maxTimeoutSeconds: 60,
      asset: chain.usdcAddress,
      outputSchema: {
        input: { type: 'http', method: 'POST', bodyType: 'json', bodyFields: { text: { type: 'string' } } },
        output: { text: 'olá' },
      },
      extra: { name: svc.chain.usdc.name, version: svc.chain.usdc.version },
    }
    const header = await createPaymentHeader(
      baseSepoliaWallet(chain, chain.payers[3]!.privateKey) as never,
      1,
      requirements as never,
    )
    const paymentPayload = JSON.parse(Buffer.from(header, 'base64').toString())
    const settled = await callApi(svc.url, '/api/v1/facilitator/settle', {
      key: merchantKey,
      body: { x402Version: 1, paymentPayload, paymentRequirements: requirements },
    })
    expect(settled.body, JSON.stringify(settled.body)).toMatchObject({ success: true })
    const items = await listing((i) => i.some((x) => x.x402Version === 1))
    const item = items.find((x) => x.x402Version === 1)!
    // What the published catalog code reads from the same payment.
    const discovered = extractDiscoveryInfo(paymentPayload, requirements as never)
    expect(discovered).not.toBeNull()
    expect(item.resource).toBe(discovered!.resourceUrl)
    expect(item).toMatchObject({
      type: 'http',
      description: 'a translation (v1)',
      mimeType: 'application/json',
    })
    expect(item.accepts).toEqual([requirements])
    expect(item.extensions).toEqual(discovered!.extensions)
    expect(item.observed).toMatchObject({ paid_calls: 1 })
  })
})
