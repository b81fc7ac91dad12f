// x402 exact, the reservation: an authorization is served only if the payer's balance covers it on top of
// its served-but-unsettled ones (src/books/claims.ts), on every instance of one database. Paid by the
// published v2 client (@x402/evm exact, createPaymentPayload), on a real anvil, through an RPC proxy that
// counts the chain reads.

import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Address, type Hex, parseAbi } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import type { Service } from '../../src/service.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import {
  baseSepoliaWallet,
  registerMerchantKey,
  sendUsdc,
  startBaseSepoliaChain,
  startBaseSepoliaService,
} from './harness.ts'

const PRICE_ATOMIC = 10_000n // 0.01 USDC
const usdcAbi = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
])

let chain: DevChain
let proxy: RpcProxy
let upstream: Upstream
let funder: ReturnType<typeof wallet>
const services: Service[] = []

const wallet = (key: Hex) => baseSepoliaWallet(chain, key)
const fund = (to: Address, amount: bigint) => sendUsdc(funder, chain, to, amount)

const balanceOf = (a: Address) =>
  funder.readContract({ address: chain.usdcAddress, abi: usdcAbi, functionName: 'balanceOf', args: [a] })

async function startInstance(databaseUrl?: string | null): Promise<Service> {
  const svc = await startBaseSepoliaService(
    chain,
    proxy.url,
    { x402: { balance_ttl_ms: 5_000 }, settlement: { interval_ms: 2_000 } } as never,
    'error',
    databaseUrl ? { DATABASE_URL: databaseUrl } : {},
  )
  services.push(svc)
  return svc
}

async function endpoint(svc: Service): Promise<string> {
  const merchantKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Reserve Co')
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: merchantKey,
    body: { upstream_url: `${upstream.url}/echo`, price: Number(PRICE_ATOMIC) / 1e6 },
  })
  expect(ep.status).toBe(201)
  return ep.body.metered_url
}

/** A fresh payer holding `calls` prices, and the published client's payment headers for it. */
async function payer(calls: bigint) {
  const key = generatePrivateKey()
  const account = privateKeyToAccount(key)
  await fund(account.address, calls * PRICE_ATOMIC)
  const client = new x402Client()
  registerExactEvmScheme(client, { signer: account as never })
  return {
    address: account.address,
    fetch: wrapFetchWithPayment(fetch, client),
    /** One fresh authorization for the terms `url` answers with. */
    async header(url: string): Promise<string> {
      const r = await fetch(url)
      const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
      const payload = await client.createPaymentPayload(required as never)
      return Buffer.from(JSON.stringify(payload)).toString('base64')
    },
  }
}

async function send(url: string, header: string): Promise<{ status: number; error: string | null }> {
  const r = await fetch(url, { headers: { 'PAYMENT-SIGNATURE': header } })
  const text = await r.text()
  let error: string | null = null
  try {
    error = (JSON.parse(text) as { error?: string }).error ?? null
  } catch {}
  return { status: r.status, error }
}

/** Waits until every captured authorization of the database is settled; reconcile is then clean. */
async function settledAndClean(svc: Service): Promise<void> {
  await waitFor(
    async () => {
      await svc.flushCaptures()
      const [row] = await svc.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM claims
        WHERE kind = 'eip3009' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL`
      return row!.n === 0
    },
    { timeoutMs: 30_000, intervalMs: 200, what: 'every served authorization settled' },
  )
  const [failed] = await svc.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM claims WHERE kind = 'eip3009' AND settlement_error IS NOT NULL`
  expect(failed!.n).toBe(0)
  const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
  expect(report.differences).toEqual([])
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  proxy = await startRpcProxy(chain.rpcUrl)
  upstream = await startUpstream()
  funder = wallet(chain.payers[0]!.privateKey)
})
afterAll(async () => {
  for (const s of services) await s.stop()
  await upstream?.close()
  await proxy?.close()
  await chain?.stop()
})

describe('x402 exact reservation, one instance', () => {
  let svc: Service
  let url: string
  beforeAll(async () => {
    svc = await startInstance()
    url = await endpoint(svc)
  })

  it('a payer holding 3 prices gets exactly 3 of 5 sequential calls served; every one settles', async () => {
    const p = await payer(3n)
    const before = upstream.count()
    const outcomes: Array<{ status: number; error: string | null }> = []
    const ethCalls: number[] = []
    for (let i = 0; i < 5; i++) {
      const header = await p.header(url)
      const calls = proxy.counts.get('eth_call') ?? 0
      outcomes.push(await send(url, header))
      ethCalls.push((proxy.counts.get('eth_call') ?? 0) - calls)
    }
    expect(outcomes.map((o) => o.status)).toEqual([200, 200, 200, 402, 402])
    expect(outcomes.slice(3).map((o) => o.error)).toEqual(['insufficient_funds', 'insufficient_funds'])
    expect(upstream.count() - before).toBe(3)
    // The first call reads nonce, balance and blacklist (one batch); the next two reuse the balance read
    // (nonce only).
    expect(ethCalls.slice(0, 3)).toEqual([3, 1, 1])
    await settledAndClean(svc)
    expect(await balanceOf(p.address)).toBe(0n)
  }, 120_000)

  it('once its settlements land, a topped-up payer pays again: settled authorizations leave the sum', async () => {
    const p = await payer(2n)
    for (let i = 0; i < 2; i++) expect((await p.fetch(url)).status).toBe(200)
    const refused = await send(url, await p.header(url))
    expect(refused).toEqual({ status: 402, error: 'insufficient_funds' })
    await settledAndClean(svc)
    // 0 left; a top-up of one price pays exactly one more call (the two settled are not counted again).
    await fund(p.address, PRICE_ATOMIC)
    expect((await p.fetch(url)).status).toBe(200)
    expect(await send(url, await p.header(url))).toEqual({ status: 402, error: 'insufficient_funds' })
    await settledAndClean(svc)
  }, 120_000)

  it('concurrent authorizations worth twice the balance: served up to it', async () => {
    const p = await payer(3n)
    const headers = await Promise.all(Array.from({ length: 6 }, () => p.header(url)))
    const before = upstream.count()
    const outcomes = await Promise.all(headers.map((h) => send(url, h)))
    expect(outcomes.filter((o) => o.status === 200)).toHaveLength(3)
    expect(outcomes.filter((o) => o.error === 'insufficient_funds')).toHaveLength(3)
    expect(upstream.count() - before).toBe(3)
    await settledAndClean(svc)
  }, 120_000)
})

describe.runIf(usingServer)('x402 exact reservation, two instances on one database', () => {
  let a: Service
  let b: Service
  let urls: [string, string]
  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startInstance(databaseUrl)
    b = await startInstance(databaseUrl)
    const url = await endpoint(a)
    urls = [url, url.replace(a.url, b.url)]
  })

  it('alternating calls of one payer over both are never served past its balance', async () => {
    const p = await payer(3n)
    const before = upstream.count()
    const statuses: number[] = []
    for (let i = 0; i < 6; i++) {
      const u = urls[i % 2]!
      statuses.push((await send(u, await p.header(u))).status)
    }
    expect(statuses).toEqual([200, 200, 200, 402, 402, 402])
    expect(upstream.count() - before).toBe(3)
    await settledAndClean(a)
  }, 120_000)

  it('concurrent calls of one payer over both: served up to its balance, not once per instance', async () => {
    const p = await payer(4n)
    const headers = await Promise.all(Array.from({ length: 12 }, (_, i) => p.header(urls[i % 2]!)))
    const before = upstream.count()
    const outcomes = await Promise.all(headers.map((h, i) => send(urls[i % 2]!, h)))
    expect(outcomes.filter((o) => o.status === 200)).toHaveLength(4)
    expect(upstream.count() - before).toBe(4)
    await settledAndClean(a)
    expect(await balanceOf(p.address)).toBe(0n)
  }, 120_000)
})
