// Passes ("pay once, access many"), end to end with the published clients unchanged: a pass bought at
// /pass/<id> by @x402/fetch + @x402/evm (or by a transaction hash), then used by signing in with the paying
// wallet through @x402/extensions' sign-in-with-x client (wrapFetchWithSIWx, createSIWxPayload, and the
// x402 client extension), each use drawn in PostgreSQL. Beside it: the 402's challenge, refused sign-ins
// (tampered, foreign, another domain, replayed), an expired pass, a use given back when the upstream
// failed, the books and reconcile. A private anvil with chain id 84532 as base-sepolia (what the published
// clients know), as in the x402 v2 test.
import type { ServerResponse } from 'node:http'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import {
  createSIWxClientExtension,
  createSIWxPayload,
  encodeSIWxHeader,
  type SIWxExtension,
  wrapFetchWithSIWx,
} from '@x402/extensions/sign-in-with-x'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Chain, createWalletClient, getAddress, type Hex, http, parseAbi, publicActions } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { findPurchasedPass } from '../../src/books/passes.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import type { Service } from '../../src/service.ts'
import { fundedSmartWallet } from '../chain/contracts/smart-wallet.ts'
import { usingServer } from '../helpers/database.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaPair,
  startBaseSepoliaService,
} from '../x402/harness.ts'

checkPaymentProtocol()

const NETWORK = 'eip155:84532'
const PASS_PRICE_ATOMIC = 50_000n // $0.05
const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

let chain: DevChain
let svc: Service
let upstream: Upstream
let ownerKey: string

/** The published v2 client, unchanged; with the sign-in-with-x client extension when asked. */
function payingFetch(key: Hex, withSignIn = false) {
  const { client, fetch: pay } = exactPayer(key)
  if (withSignIn) client.registerExtension(createSIWxClientExtension({ signers: [privateKeyToAccount(key)] }))
  return pay
}

async function createPassEndpoint(
  pass: Record<string, unknown>,
  path = '/echo',
): Promise<{
  id: string
  meteredUrl: string
  purchaseUrl: string
}> {
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: ownerKey,
    body: { upstream_url: `${upstream.url}${path}`, price: 0.01, pass },
  })
  expect(ep.status, JSON.stringify(ep.body)).toBe(201)
  return { id: ep.body.id, meteredUrl: ep.body.metered_url, purchaseUrl: ep.body.pass.purchase_url }
}

/** A 402 of a pass endpoint and its sign-in-with-x declaration. */
async function challenge(url: string) {
  const r = await fetch(url)
  expect(r.status).toBe(402)
  const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
  const siwx = required.extensions?.['sign-in-with-x'] as SIWxExtension
  return { required, siwx, body: (await r.json()) as Record<string, any> }
}

/**
 * A SIGN-IN-WITH-X header signed by the published helper for a fresh 402 of `url`, by a key or by any
 * signer the helper takes (a contract wallet's address with its owner's signMessage).
 */
async function signedHeader(
  url: string,
  key: Hex | Parameters<typeof createSIWxPayload>[1],
  alter?: (info: Record<string, any>) => void,
) {
  const { siwx } = await challenge(url)
  const info: Record<string, any> = { ...siwx.info, chainId: NETWORK, type: 'eip191' }
  alter?.(info)
  // The helper checks the challenge is bound to the URL it came from: an altered domain names its own.
  const from = info.domain === siwx.info.domain ? url : `http://${info.domain}/`
  const signer = typeof key === 'string' ? privateKeyToAccount(key) : key
  const payload = await createSIWxPayload(info as never, signer, from)
  return { payload, header: encodeSIWxHeader(payload) }
}

async function signedCall(url: string, header: string) {
  const r = await fetch(url, { headers: { 'SIGN-IN-WITH-X': header } })
  const required = r.headers.get('payment-required')
  return {
    status: r.status,
    reason: required === null ? null : decodePaymentRequiredHeader(required).error,
    usesLeft: r.headers.get('x-pass-uses-left'),
    receiptId: r.headers.get('x-receipt-id'),
    body: await r.text(),
  }
}

async function usesLeft(endpointId: string, payer: string): Promise<number[]> {
  const rows = await svc.sql<{ uses_left: number }[]>`
    SELECT uses_left FROM passes WHERE endpoint_id = ${endpointId} AND payer = ${payer.toLowerCase()}
    ORDER BY created_at`
  return rows.map((r) => r.uses_left)
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  upstream = await startUpstream((req, res: ServerResponse) => {
    if (!req.url?.startsWith('/fail')) return false
    res.writeHead(503, { 'content-type': 'text/plain' }).end('down')
    return true
  })
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    proxy: { allow_private_upstreams: true },
    settlement: { interval_ms: 200 },
  } as never)
  ownerKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Pass Co')
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('selling a pass (management API)', () => {
  it('sets, shows and clears a pass; bad terms are a clear 400 that changes nothing', async () => {
    const ep = await createPassEndpoint({ price: 0.05, calls: 5 })
    const shown = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, { key: ownerKey })
    expect(shown.body.pass).toEqual({
      price: 0.05,
      price_atomic: '50000',
      calls: 5,
      duration_s: null,
      purchase_url: `${svc.url}/pass/${ep.id}`,
    })
    for (const [pass, param] of [
      [{ price: 0.05 }, 'pass'],
      [{ price: 0.05, calls: 0 }, 'pass.calls'],
      [{ price: 0.05, duration_s: 5 }, 'pass.duration_s'],
      [{ price: -1, calls: 3 }, 'pass.price'],
      [{ price: 0.05, calls: 3, extra: 1 }, 'pass'],
    ] as const) {
      const r = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, {
        key: ownerKey,
        method: 'PATCH',
        body: { pass },
      })
      expect(r.status, JSON.stringify(pass)).toBe(400)
      expect(r.body.error.code).toBe('invalid_parameter')
      expect(r.body.error.param, JSON.stringify(r.body)).toContain(param.split('.')[0])
    }
    // A usage-priced endpoint measures each call: it cannot sell uses.
    const usage = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, {
      key: ownerKey,
      method: 'PATCH',
      body: { pricing: { model: 'usage', unit: 'response_bytes', max_price: 0.1, price_per_mb: 0.01 } },
    })
    expect(usage.status).toBe(400)
    expect(usage.body.error.message).toMatch(/usage/)
    expect((await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, { key: ownerKey })).body.pass.calls).toBe(5)
    const cleared = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, {
      key: ownerKey,
      method: 'PATCH',
      body: { pass: null },
    })
    expect(cleared.body.pass).toBeNull()
    await waitFor(async () => (await fetch(`${svc.url}/pass/${ep.id}`)).status === 404, {
      timeoutMs: 2_000,
      what: 'pass no longer sold',
    })
  })
})

describe('a pass of 5 calls, bought with the published x402 client, used by signing in', () => {
  let ep: Awaited<ReturnType<typeof createPassEndpoint>>
  const buyerKey = () => chain.payers[0]!.privateKey
  const buyer = () => chain.payers[0]!.address

  beforeAll(async () => {
    ep = await createPassEndpoint({ price: 0.05, calls: 5 })
  })

  it("the endpoint's 402 declares sign-in-with-x with a fresh challenge and offers the pass", async () => {
    const first = await challenge(ep.meteredUrl)
    const second = await challenge(ep.meteredUrl)
    expect(first.siwx.info).toMatchObject({
      domain: new URL(svc.url).host,
      uri: ep.meteredUrl,
      version: '1',
      resources: [ep.meteredUrl],
    })
    expect(first.siwx.info.nonce).toMatch(/^[0-9a-f]{32}$/)
    expect(second.siwx.info.nonce).not.toBe(first.siwx.info.nonce)
    expect(first.siwx.supportedChains).toEqual([{ chainId: NETWORK, type: 'eip191' }])
    // What wrapFetchWithSIWx needs: the first requirement's network is a supported chain.
    expect(first.required.accepts[0]!.network).toBe(NETWORK)
    const offer = {
      price: 0.05,
      price_atomic: '50000',
      calls: 5,
      duration_s: null,
      purchase_url: ep.purchaseUrl,
    }
    expect(first.required.extensions?.['tollgate-pass']).toEqual({ info: offer })
    expect(first.body.extensions['tollgate-pass']).toEqual({ info: offer })
    // The per-call offers are all still there.
    expect(first.required.accepts.map((a) => a.amount)).toEqual(['10000'])
  })

  it('signing in before buying is refused: no live pass, nothing forwarded', async () => {
    const before = upstream.count()
    const { header } = await signedHeader(ep.meteredUrl, buyerKey())
    expect(await signedCall(ep.meteredUrl, header)).toMatchObject({ status: 402, reason: 'no_live_pass' })
    expect(upstream.count()).toBe(before)
  })

  it('the pass is bought at its own URL by the published client, paid like a call and booked 95 / 5', async () => {
    const unpaid = await fetch(ep.purchaseUrl, { method: 'POST' })
    expect(unpaid.status).toBe(402)
    const required = decodePaymentRequiredHeader(unpaid.headers.get('payment-required')!)
    expect(required.resource.url).toBe(ep.purchaseUrl)
    expect(required.accepts.map((a) => [a.scheme, a.amount])).toEqual([['exact', '50000']])
    expect(required.extensions?.['sign-in-with-x']).toBeUndefined()
    const before = upstream.count()
    const r = await payingFetch(buyerKey())(ep.purchaseUrl, { method: 'POST' })
    expect(r.status, await r.clone().text()).toBe(201)
    // The exact scheme's receipt: served, its settlement batched afterwards (see x402.md).
    expect(decodePaymentResponseHeader(r.headers.get('payment-response')!)).toMatchObject({
      errorReason: 'settlement_pending',
      network: NETWORK,
      payer: buyer(),
    })
    const pass = (await r.json()) as Record<string, unknown>
    expect(pass).toMatchObject({
      object: 'pass',
      endpoint_id: ep.id,
      payer: buyer().toLowerCase(),
      calls: 5,
      uses_left: 5,
      expires_at: null,
      price_atomic: '50000',
    })
    // Buying forwards nothing.
    expect(upstream.count()).toBe(before)
    const [call] = await svc.sql<{ amount_atomic: bigint; owner_share_atomic: bigint; fee_atomic: bigint }[]>`
      SELECT amount_atomic, owner_share_atomic, fee_atomic FROM calls
      WHERE endpoint_id = ${ep.id} AND method = 'PASS'`
    expect(call).toEqual({ amount_atomic: 50_000n, owner_share_atomic: 47_500n, fee_atomic: 2_500n })
  })

  it('a tampered, foreign or misbound sign-in is refused and draws nothing', async () => {
    const before = upstream.count()
    const tampered = await signedHeader(ep.meteredUrl, buyerKey())
    const sig = tampered.payload.signature
    const flipped = `${sig.slice(0, 10)}${sig[10] === 'a' ? 'b' : 'a'}${sig.slice(11)}`
    expect(
      await signedCall(ep.meteredUrl, encodeSIWxHeader({ ...tampered.payload, signature: flipped })),
    ).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_signature',
    })
    // A stranger's valid signature, claiming to be the buyer.
    const stranger = await signedHeader(ep.meteredUrl, generatePrivateKey())
    expect(
      await signedCall(ep.meteredUrl, encodeSIWxHeader({ ...stranger.payload, address: buyer() })),
    ).toMatchObject({ status: 402, reason: 'invalid_siwx_signature' })
    // A stranger signing as themself: valid, but holds no pass.
    expect(await signedCall(ep.meteredUrl, stranger.header)).toMatchObject({
      status: 402,
      reason: 'no_live_pass',
    })
    // Signed for another site.
    const elsewhere = await signedHeader(ep.meteredUrl, buyerKey(), (info) => {
      info.domain = 'evil.example'
      info.uri = 'http://evil.example/m/x'
    })
    expect(await signedCall(ep.meteredUrl, elsewhere.header)).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_domain_mismatch',
    })
    // Signed for another chain.
    const otherChain = await signedHeader(ep.meteredUrl, buyerKey(), (info) => {
      info.chainId = 'eip155:1'
    })
    expect(await signedCall(ep.meteredUrl, otherChain.header)).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_chain_id',
    })
    // Too old (issuedAt more than 5 minutes ago), though signed.
    const old = await signedHeader(ep.meteredUrl, buyerKey(), (info) => {
      info.issuedAt = new Date(Date.now() - 6 * 60_000).toISOString()
    })
    expect(await signedCall(ep.meteredUrl, old.header)).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_issued_at_too_old',
    })
    expect(await signedCall(ep.meteredUrl, 'bm90IGpzb24=')).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_header',
    })
    expect(upstream.count()).toBe(before)
    expect(await usesLeft(ep.id, buyer())).toEqual([5])
  })

  it('serves exactly 5 signed-in calls; a replayed sign-in is refused; the 6th gets 402 with the pass offer', async () => {
    const before = upstream.count()
    // One by hand: then the same message again is a replay (the spec: a nonce serves once).
    const first = await signedHeader(ep.meteredUrl, buyerKey())
    const served = await signedCall(ep.meteredUrl, first.header)
    expect(served).toMatchObject({ status: 200, usesLeft: '4' })
    expect(JSON.parse(served.body)).toMatchObject({ method: 'GET', path: '/echo' })
    // Its x-receipt-id has a receipt behind it: the draw, charged nothing, and the pass's purchase (whose
    // settlement paid for every use) beside it.
    const [pass] = await svc.sql<{ id: string; call_id: string }[]>`
      SELECT id, call_id FROM passes WHERE endpoint_id = ${ep.id} AND payer = ${buyer().toLowerCase()}`
    let receipt: Record<string, any> = {}
    await waitFor(
      async () => {
        const r = await fetch(`${svc.url}/receipts/${served.receiptId}`)
        receipt = (await r.json()) as Record<string, any>
        return r.status === 200
      },
      { timeoutMs: 5_000, what: "the pass call's receipt" },
    )
    expect(receipt).toMatchObject({
      id: served.receiptId,
      object: 'receipt',
      call_id: null,
      pass: { id: pass!.id, purchase_call_id: pass!.call_id },
      endpoint_id: ep.id,
      // The API shows a payer in its EIP-55 form, whichever way it was stored (the pass keeps it lower-case).
      payer: getAddress(buyer()),
      scheme: 'pass',
      method: 'GET',
      upstream_status: 200,
      amount_atomic: '0',
    })
    expect(['pending', 'sent', 'settled']).toContain(receipt.settlement.status)
    // The sign-in is tollgate's credential: the upstream never sees it.
    expect(upstream.last()!.headers['sign-in-with-x']).toBeUndefined()
    expect(await signedCall(ep.meteredUrl, first.header)).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_nonce',
    })
    // Four more through the published fetch wrapper (402 → sign → retry), unchanged.
    const siwxFetch = wrapFetchWithSIWx(fetch, privateKeyToAccount(buyerKey()))
    const left: string[] = []
    for (let i = 0; i < 4; i++) {
      const r = await siwxFetch(ep.meteredUrl)
      expect(r.status, await r.clone().text()).toBe(200)
      left.push(r.headers.get('x-pass-uses-left')!)
    }
    expect(left).toEqual(['3', '2', '1', '0'])
    expect(upstream.count() - before).toBe(5)
    // The 6th: 402, offering the pass again beside the per-call price.
    const sixth = await siwxFetch(ep.meteredUrl)
    expect(sixth.status).toBe(402)
    const required = decodePaymentRequiredHeader(sixth.headers.get('payment-required')!)
    expect(required.error).toBe('no_live_pass')
    expect(required.extensions?.['tollgate-pass']).toMatchObject({ info: { purchase_url: ep.purchaseUrl } })
    expect(required.extensions?.['sign-in-with-x']).toBeDefined()
    expect(required.accepts[0]!.amount).toBe('10000')
    expect(upstream.count() - before).toBe(5)
    expect(await usesLeft(ep.id, buyer())).toEqual([0])
  })

  it('the published client with the sign-in extension signs in while a pass lasts, then pays per call', async () => {
    const key = chain.payers[1]!.privateKey
    const combined = payingFetch(key, true)
    expect((await payingFetch(key)(ep.purchaseUrl, { method: 'POST' })).status).toBe(201)
    const before = upstream.count()
    const receipts: Array<string | null> = []
    for (let i = 0; i < 6; i++) {
      const r = await combined(ep.meteredUrl)
      expect(r.status, await r.clone().text()).toBe(200)
      receipts.push(r.headers.get('payment-response'))
    }
    expect(upstream.count() - before).toBe(6)
    // Five on the pass (no payment), the sixth paid by an authorization.
    expect(receipts.map((x) => x !== null)).toEqual([false, false, false, false, false, true])
  })
})

describe('what a pass does not cover', () => {
  it('an expired pass answers 402 with the pass offer', async () => {
    const ep = await createPassEndpoint({ price: 0.05, calls: 10, duration_s: 3600 })
    const key = chain.payers[2]!.privateKey
    const bought = await payingFetch(key)(ep.purchaseUrl, { method: 'POST' })
    expect(bought.status).toBe(201)
    const pass = (await bought.json()) as { expires_at: string }
    expect(Date.parse(pass.expires_at) - Date.now()).toBeGreaterThan(3_500_000)
    expect((await signedCall(ep.meteredUrl, (await signedHeader(ep.meteredUrl, key)).header)).status).toBe(
      200,
    )
    // An hour later (the database's clock decides: the pass's end moved back instead of waiting).
    await svc.sql`UPDATE passes SET expires_at = now() - interval '1 second' WHERE endpoint_id = ${ep.id}`
    const before = upstream.count()
    const late = await signedCall(ep.meteredUrl, (await signedHeader(ep.meteredUrl, key)).header)
    expect(late).toMatchObject({ status: 402, reason: 'no_live_pass' })
    expect(upstream.count()).toBe(before)
  })

  it('a wallet on a counted pass draws on a pass of time once it has one, and on its uses again after', async () => {
    const ep = await createPassEndpoint({ price: 0.05, calls: 3 })
    const key = chain.payers[2]!.privateKey
    const payer = chain.payers[2]!.address.toLowerCase()
    expect((await payingFetch(key)(ep.purchaseUrl, { method: 'POST' })).status).toBe(201)
    const call = async () =>
      (await signedCall(ep.meteredUrl, (await signedHeader(ep.meteredUrl, key)).header)).status
    // Its draws go alone (drawPassUse) once the first found no pass of time: a counted use each.
    expect(await call()).toBe(200)
    expect(await call()).toBe(200)
    expect(await usesLeft(ep.id, payer)).toEqual([1])
    // The owner sells a pass of time now; the wallet buys one: drawn on first, the counted use kept.
    const patched = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, {
      key: ownerKey,
      method: 'PATCH',
      body: { pass: { price: 0.07, duration_s: 3600 } },
    })
    expect(patched.status).toBe(200)
    await waitFor(
      async () => {
        const offer = await fetch(ep.purchaseUrl, { method: 'POST' })
        const header = offer.headers.get('payment-required')
        return header !== null && decodePaymentRequiredHeader(header).accepts[0]!.amount === '70000'
      },
      { timeoutMs: 5_000, what: 'the pass of time on sale' },
    )
    expect((await payingFetch(key)(ep.purchaseUrl, { method: 'POST' })).status).toBe(201)
    const [timedPass] = await svc.sql<{ id: string }[]>`
      SELECT id FROM passes WHERE endpoint_id = ${ep.id} AND payer = ${payer} AND uses_left IS NULL`
    for (let i = 0; i < 3; i++) expect(await call()).toBe(200)
    expect(await usesLeft(ep.id, payer)).toEqual([1, null])
    const [timed] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM pass_draws WHERE pass_id = ${timedPass!.id}`
    expect(timed!.n).toBe(3)
    // Its time over: the counted use again, then nothing.
    await svc.sql`UPDATE passes SET expires_at = now() - interval '1 second' WHERE id = ${timedPass!.id}`
    expect(await call()).toBe(200)
    expect(await usesLeft(ep.id, payer)).toEqual([0, null])
    expect(await call()).toBe(402)
  })

  it('a call the upstream did not serve (5xx) gives its use back', async () => {
    const ep = await createPassEndpoint({ price: 0.05, calls: 2 }, '/fail')
    const key = chain.payers[3]!.privateKey
    expect((await payingFetch(key)(ep.purchaseUrl, { method: 'POST' })).status).toBe(201)
    for (let i = 0; i < 2; i++) {
      const r = await signedCall(ep.meteredUrl, (await signedHeader(ep.meteredUrl, key)).header)
      expect(r.status).toBe(503)
      // Not served: no receipt id promised.
      expect(r.receiptId).toBeNull()
    }
    await waitFor(async () => (await usesLeft(ep.id, chain.payers[3]!.address))[0] === 2, {
      timeoutMs: 2_000,
      what: 'uses given back',
    })
    const [draws] = await svc.sql<{ given_back: number }[]>`
      SELECT count(*) FILTER (WHERE given_back)::int AS given_back FROM pass_draws d
      JOIN passes p ON p.id = d.pass_id WHERE p.endpoint_id = ${ep.id}`
    expect(draws!.given_back).toBe(2)
  })

  it('a pass bought with a transaction hash works the same (any scheme the endpoint takes)', async () => {
    const ep = await createPassEndpoint({ price: 0.05, calls: 1 })
    const payer = chain.payers[0]!
    const wallet = createWalletClient({
      account: privateKeyToAccount(payer.privateKey),
      chain: baseSepolia as Chain,
      transport: http(chain.rpcUrl),
    }).extend(publicActions)
    const hash = await wallet.writeContract({
      address: chain.usdcAddress,
      abi: transferAbi,
      functionName: 'transfer',
      args: [svc.chain.treasury, PASS_PRICE_ATOMIC],
    })
    await wallet.waitForTransactionReceipt({ hash })
    const r = await fetch(ep.purchaseUrl, { method: 'POST', headers: { 'x-payment': hash } })
    expect(r.status, await r.clone().text()).toBe(201)
    const pass = (await r.json()) as { id: string; uses_left: number }
    expect(pass.uses_left).toBe(1)
    // The same hash again: it paid for this pass, which it names again (200); it buys no second one.
    const again = await fetch(ep.purchaseUrl, { method: 'POST', headers: { 'x-payment': hash } })
    expect(again.status).toBe(200)
    expect(await again.json()).toEqual(pass)
    expect(await usesLeft(ep.id, payer.address)).toEqual([1])
    expect(
      (await signedCall(ep.meteredUrl, (await signedHeader(ep.meteredUrl, payer.privateKey)).header)).status,
    ).toBe(200)
    // The hash never pays a call besides.
    const call = await fetch(ep.meteredUrl, { headers: { 'x-payment': hash } })
    expect(call.status).toBe(402)
  })

  it('reconcile is clean: every pass against its purchase and its draws', async () => {
    await svc.flushCaptures()
    await waitFor(
      async () => {
        const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
        return report.differences.length === 0 && report.passes.passes >= 5
      },
      { timeoutMs: 20_000, intervalMs: 500, what: 'a clean reconcile (settlements done)' },
    )
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.passes).toMatchObject({ without_purchase: 0, count_mismatch: 0 })
    expect(report.differences).toEqual([])
  })
})

describe('a pass purchase retried with the same payment', () => {
  const usdcOf = (address: string) =>
    svc.chain.publicClient.readContract({
      address: chain.usdcAddress,
      abi: parseAbi(['function balanceOf(address) view returns (uint256)']),
      functionName: 'balanceOf',
      args: [address as Hex],
    })

  /** The published client's payment header for the 402 of `url` (one authorization, sent as often as asked). */
  async function paymentHeader(key: Hex, url: string): Promise<Record<string, string>> {
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: privateKeyToAccount(key) as never })
    const http402 = new x402HTTPClient(client)
    const r = await fetch(url, { method: 'POST' })
    expect(r.status).toBe(402)
    const required = http402.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
    return http402.encodePaymentSignatureHeader(await http402.createPaymentPayload(required))
  }

  it('gets the same pass with 200 before and after its settlement, charged once; never another endpoint’s', async () => {
    const ep = await createPassEndpoint({ price: 0.05, calls: 2 })
    const other = await createPassEndpoint({ price: 0.05, calls: 2 })
    const payer = chain.payers[2]!
    const header = await paymentHeader(payer.privateKey, ep.purchaseUrl)
    // This payer bought a pass in an earlier test: its settlement must be in before the balance is read (a
    // purchase settles in the leader's batch, which leaves a before-the-answer endpoint's young claims alone).
    await waitFor(
      async () =>
        (
          await svc.sql`SELECT 1 FROM claims WHERE kind = 'eip3009' AND status IN ('captured', 'settling')
                        AND settled_at IS NULL AND settlement_error IS NULL`
        ).length === 0,
      { timeoutMs: 20_000, intervalMs: 200, what: 'earlier purchases settled' },
    )
    const before = await usdcOf(payer.address)
    const bought = await fetch(ep.purchaseUrl, { method: 'POST', headers: header })
    expect(bought.status, await bought.clone().text()).toBe(201)
    const pass = (await bought.json()) as { id: string }
    // Its answer lost, the buyer sends the same payment again: seen spent on this instance, not settled yet.
    const early = await fetch(ep.purchaseUrl, { method: 'POST', headers: header })
    expect(early.status).toBe(200)
    expect(await early.json()).toEqual(pass)
    await svc.flushCaptures()
    await waitFor(
      async () =>
        (
          await svc.sql`SELECT 1 FROM claims c JOIN passes p ON p.proof_key = c.proof_key
                        WHERE p.id = ${pass.id} AND c.settled_at IS NOT NULL`
        ).length === 1,
      { timeoutMs: 20_000, intervalMs: 200, what: 'the purchase settled' },
    )
    // Settled: the authorization's nonce is used on chain. The same payment still names its pass, 200.
    for (let i = 0; i < 2; i++) {
      const again = await fetch(ep.purchaseUrl, { method: 'POST', headers: header })
      expect(again.status, await again.clone().text()).toBe(200)
      expect(again.headers.get('payment-response')).toBeNull()
      expect(await again.json()).toEqual(pass)
    }
    // Charged once: one PASS call in the books, one transfer on chain, one pass.
    const calls = await svc.sql<{ amount_atomic: bigint }[]>`
      SELECT amount_atomic FROM calls WHERE endpoint_id = ${ep.id} AND method = 'PASS'`
    expect(calls).toEqual([{ amount_atomic: PASS_PRICE_ATOMIC }])
    expect(before - (await usdcOf(payer.address))).toBe(PASS_PRICE_ATOMIC)
    expect(await usesLeft(ep.id, payer.address)).toEqual([2])
    // Another endpoint's purchase URL with the same payment: refused, it opens and shows nothing there.
    const elsewhere = await fetch(other.purchaseUrl, { method: 'POST', headers: header })
    expect(elsewhere.status).toBe(402)
    expect(await usesLeft(other.id, payer.address)).toEqual([])
    // The books' look-up names the pass only on its endpoint and to its payer.
    const [row] = await svc.sql<{ proof_key: string }[]>`SELECT proof_key FROM passes WHERE id = ${pass.id}`
    const proofKey = row!.proof_key
    expect(
      (await findPurchasedPass(svc.sql, { proofKey, endpointId: ep.id, payer: payer.address }))?.id,
    ).toBe(pass.id)
    expect(
      await findPurchasedPass(svc.sql, { proofKey, endpointId: other.id, payer: payer.address }),
    ).toBeNull()
    expect(
      await findPurchasedPass(svc.sql, { proofKey, endpointId: ep.id, payer: chain.payers[3]!.address }),
    ).toBeNull()
  })
})

describe('an ERC-1271 contract wallet', () => {
  it('buys a pass and signs in with its owner key, asked on chain; a stranger signing for it is refused', async () => {
    const { wallet, owner } = await fundedSmartWallet({
      rpcUrl: chain.rpcUrl,
      usdc: chain.usdcAddress,
      funderKey: chain.payers[1]!.privateKey,
      amountAtomic: 1_000_000n,
    })
    const ep = await createPassEndpoint({ price: 0.05, calls: 3 })
    // Bought by the published client: the wallet's address pays, its owner's key signs (the token asks
    // the wallet's isValidSignature at settlement; tollgate asks it at verification).
    const client = new x402Client()
    registerExactEvmScheme(client, {
      signer: { address: wallet, signTypedData: (m: never) => owner.signTypedData(m) } as never,
    })
    const bought = await wrapFetchWithPayment(fetch, client)(ep.purchaseUrl, { method: 'POST' })
    expect(bought.status, await bought.clone().text()).toBe(201)
    expect(await usesLeft(ep.id, wallet)).toEqual([3])

    // Signed in by the published helper as the wallet, the owner's key signing the EIP-4361 message:
    // no key recovers the wallet's address, the wallet itself says yes on chain.
    const asWallet = {
      address: wallet,
      signMessage: ({ message }: { message: string }) => owner.signMessage({ message }),
    }
    const before = upstream.count()
    const { header } = await signedHeader(ep.meteredUrl, asWallet as never)
    const served = await signedCall(ep.meteredUrl, header)
    expect(served, served.body).toMatchObject({ status: 200, usesLeft: '2' })
    expect(served.receiptId).toMatch(/^rcpt_/)
    expect(upstream.count()).toBe(before + 1)
    expect(await usesLeft(ep.id, wallet)).toEqual([2])

    // A stranger's key signing for the wallet: the wallet says no; nothing is drawn or forwarded.
    const stranger = privateKeyToAccount(generatePrivateKey())
    const forged = await signedHeader(ep.meteredUrl, {
      address: wallet,
      signMessage: ({ message }: { message: string }) => stranger.signMessage({ message }),
    } as never)
    expect(await signedCall(ep.meteredUrl, forged.header)).toMatchObject({
      status: 402,
      reason: 'invalid_siwx_signature',
    })
    expect(upstream.count()).toBe(before + 1)
    expect(await usesLeft(ep.id, wallet)).toEqual([2])
  })
})

describe.runIf(usingServer)('two instances on one PostgreSQL drawing on one pass', () => {
  let a: Service
  let b: Service

  beforeAll(async () => {
    ;[a, b] = await startBaseSepoliaPair(chain, { proxy: { allow_private_upstreams: true } })
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
  })

  it('serve exactly N between them, whatever the concurrency', async () => {
    const N = 10
    const created = await callApi(a.url, '/api/v1/endpoints', {
      key: await registerMerchantKey(a.url, chain.payers[4]!.address, 'Two Co'),
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01, pass: { price: 0.05, calls: N } },
    })
    expect(created.status).toBe(201)
    const id: string = created.body.id
    const key = chain.payers[1]!.privateKey
    const bought = await payingFetch(key)(`${b.url}/pass/${id}`, { method: 'POST' })
    expect(bought.status, await bought.clone().text()).toBe(201)
    const signer = privateKeyToAccount(key)
    const before = upstream.count()
    const statuses = await Promise.all(
      Array.from({ length: 3 * N }, (_, i) =>
        wrapFetchWithSIWx(fetch, signer)(`${(i % 2 ? a : b).url}/m/${id}`).then((r) => r.status),
      ),
    )
    expect(statuses.filter((s) => s === 200)).toHaveLength(N)
    expect(statuses.filter((s) => s === 402)).toHaveLength(2 * N)
    expect(upstream.count() - before).toBe(N)
    const [pass] = await a.sql<{ uses_left: number; draws: number }[]>`
      SELECT p.uses_left, (SELECT count(*) FROM pass_draws d WHERE d.pass_id = p.id)::int AS draws
      FROM passes p WHERE p.endpoint_id = ${id}`
    expect(pass).toEqual({ uses_left: 0, draws: N })
  })
})
