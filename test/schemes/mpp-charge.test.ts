// MPP (Machine Payments Protocol) `evm` charge beside x402 on one metered URL: the published mppx client,
// unchanged, pays a 402 that advertises both protocols; the authorization is claimed with exact's key, settled
// by the settlement batcher on anvil and booked 95/5; a replayed credential is refused on both of two
// instances of one database; each malformed or stale credential is a 402 with a fresh challenge that changes
// nothing; @x402/fetch still pays the same URL. A private anvil announced as base-sepolia (x402 clients know
// only real networks; mppx's evm method takes any chain id).

import { x402Client } from '@x402/core/client'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { Challenge, Credential, Receipt } from 'mppx'
import { Mppx } from 'mppx/client'
import { evm } from 'mppx/evm/client'
import { type Address, type Hex, keccak256, parseAbi, toHex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { challengeId, challengeKey } from '../../src/schemes/mpp-charge/challenge.ts'
import type { Service } from '../../src/service.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { startOpenAiUpstream } from '../helpers/openai-upstream.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { baseSepoliaWallet, sendUsdc, startBaseSepoliaService } from '../x402/harness.ts'

const PRICE_ATOMIC = 10_000n // 0.01 USDC
const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'
const usdcAbi = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function name() view returns (string)',
  'function version() view returns (string)',
])

let chain: DevChain
let upstream: Upstream
let funder: ReturnType<typeof wallet>
let a: Service
/** A second instance on the same database (a server database), else null. */
let b: Service | null = null
let urlA: string
let urlB: string
/** The endpoint owner's API key. */
let apiKey: string
let token: { name: string; version: string }

const wallet = (key: Hex) => baseSepoliaWallet(chain, key)
const fund = (to: Address, amount: bigint) => sendUsdc(funder, chain, to, amount)

/** A fresh payer holding `atomic`, its mppx client (unchanged) and the credentials that client sent. */
async function mppPayer(atomic: bigint) {
  const key = generatePrivateKey()
  const account = privateKeyToAccount(key)
  if (atomic > 0n) await fund(account.address, atomic)
  const sent: string[] = []
  /** Each answer mppx got: status and content type. */
  const answers: string[] = []
  // The credential as it went on the wire (the fetch mppx is given sees every request it makes).
  const recording: typeof fetch = async (input, init) => {
    const h = new Headers(init?.headers)
    const auth = h.get('authorization')
    if (auth !== null) sent.push(auth)
    const r = await fetch(input, init)
    answers.push(`${r.status} ${r.headers.get('content-type')}`)
    return r
  }
  const mppx = Mppx.create({
    methods: [evm.charge({ account, authorization: token })],
    fetch: recording,
    polyfill: false,
  })
  return { address: account.address, fetch: mppx.fetch, sent, answers }
}

async function endpoint(svc: Service, body: Record<string, unknown>): Promise<string> {
  apiKey ??= await register(svc)
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: apiKey,
    body: { upstream_url: `${upstream.url}/echo`, ...body },
  })
  expect(ep.status, ep.text).toBe(201)
  return ep.body.metered_url
}

async function register(svc: Service): Promise<string> {
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: chain.payers[4]!.address, business_name: 'MPP Co' },
  })
  expect(reg.status).toBe(201)
  return reg.body.api_key
}

/** The same path on instance B (another port, the same endpoint row). */
function onB(url: string): string {
  const u = new URL(url)
  return `${b!.url}${u.pathname}`
}

async function send(url: string, headers: Record<string, string>) {
  const r = await fetch(url, { headers })
  const text = await r.text()
  let error: string | null = null
  try {
    error = (JSON.parse(text) as { error?: string }).error ?? null
  } catch {}
  return { status: r.status, error, wwwAuthenticate: r.headers.get('www-authenticate') }
}

async function callRows(svc: Service, payer: Address) {
  return svc.sql<{ id: string; scheme: string; amount_atomic: string; proof_key: string }[]>`
    SELECT id, scheme, amount_atomic::text, call_proof_key(proof_key, proof) AS proof_key FROM calls
    WHERE lower(call_payer(payer, payer_address)) = ${payer.toLowerCase()}`
}

beforeAll(async () => {
  chain = await startTestChain({ chainId: 84532, usdcAt: BASE_SEPOLIA_USDC })
  upstream = await startUpstream()
  funder = wallet(chain.payers[0]!.privateKey)
  const read = (functionName: 'name' | 'version') =>
    funder.readContract({ address: chain.usdcAddress, abi: usdcAbi, functionName }) as Promise<string>
  token = { name: await read('name'), version: await read('version') }
  const databaseUrl = usingServer ? await freshDatabaseUrl() : null
  const env: Record<string, string> = databaseUrl ? { DATABASE_URL: databaseUrl } : {}
  const overrides = { settlement: { interval_ms: 500 } } as never
  a = await startBaseSepoliaService(chain, chain.rpcUrl, overrides, 'error', env)
  if (databaseUrl) b = await startBaseSepoliaService(chain, chain.rpcUrl, overrides, 'error', env)
  urlA = await endpoint(a, { price: Number(PRICE_ATOMIC) / 1e6 })
  urlB = b === null ? urlA : onB(urlA)
})

afterAll(async () => {
  await b?.stop()
  await a?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('MPP charge beside x402', () => {
  it('a 402 carries both an x402 PAYMENT-REQUIRED and an MPP evm charge challenge for the same terms', async () => {
    const r1 = await fetch(urlA)
    const r2 = await fetch(urlA)
    expect(r1.status).toBe(402)
    expect(r1.headers.get('payment-required')).toBeTruthy()
    const c1 = Challenge.fromResponse(r1)
    const c2 = Challenge.fromResponse(r2)
    expect(c1.method).toBe('evm')
    expect(c1.intent).toBe('charge')
    expect(c1.request).toEqual({
      amount: PRICE_ATOMIC.toString(),
      currency: chain.usdcAddress,
      recipient: chain.treasury.address,
      methodDetails: { chainId: 84532, credentialTypes: ['authorization'], decimals: 6 },
    })
    expect(Date.parse(c1.expires!)).toBeGreaterThan(Date.now())
    // A fresh id per answer: the client's EIP-3009 nonce is derived from it.
    expect(c2.id).not.toBe(c1.id)
    // Any instance verifies any instance's challenge (stateless HMAC over the parameters).
    expect(Challenge.verify(c1, { secretKey: 'not ours' })).toBe(false)
  })

  it('the published mppx client pays once: served once, settled on chain, booked 95/5 once, said paid by MPP', async () => {
    const payer = await mppPayer(PRICE_ATOMIC * 3n)
    const before = upstream.count()
    const r = await payer.fetch(urlA)
    expect(r.status).toBe(200)
    expect(upstream.count()).toBe(before + 1)
    expect(payer.sent).toHaveLength(1)
    expect(payer.sent[0]).toMatch(/^Payment /)
    // mppx announces itself (Accept-Payment): its first 402 was the spec's problem, and it paid that.
    expect(payer.answers).toHaveLength(2)
    expect(payer.answers[0]).toBe('402 application/problem+json')
    expect(payer.answers[1]).toMatch(/^200 /)
    // The upstream never sees the credential.
    expect(upstream.last()?.headers.authorization).toBeUndefined()
    const receipt = Receipt.fromResponse(r)
    expect(receipt).toMatchObject({ method: 'evm', status: 'success' })
    const credential = Credential.deserialize(payer.sent[0]!)
    const nonce = (credential.payload as { nonce: Hex }).nonce
    expect(nonce).toBe(keccak256(toHex(`${credential.challenge.id}${credential.challenge.realm}`)))
    expect(receipt.reference).toBe(nonce)
    expect(r.headers.get('x-receipt-id')).toMatch(/^rcpt_/)

    await a.flushCaptures()
    const rows = await callRows(a, payer.address)
    expect(rows).toHaveLength(1)
    expect(rows[0]!.scheme).toBe('mpp-charge')
    expect(rows[0]!.amount_atomic).toBe(PRICE_ATOMIC.toString())
    // exact's claim key for the same authorization.
    expect(rows[0]!.proof_key).toBe(
      `auth:84532:${chain.usdcAddress.toLowerCase()}:${payer.address.toLowerCase()}:${nonce}`,
    )
    // Settled by the settlement batcher: the token marks the nonce used and the money is the treasury's.
    await waitFor(
      async () => {
        await a.flushCaptures()
        const [k] = await a.sql<{ settled: boolean }[]>`
          SELECT settled_at IS NOT NULL AS settled FROM claims WHERE proof_key = ${rows[0]!.proof_key}`
        return k?.settled === true
      },
      { timeoutMs: 30_000, intervalMs: 200, what: 'the MPP authorization settled' },
    )
    const used = await funder.readContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'authorizationState',
      args: [payer.address, nonce],
    })
    expect(used).toBe(true)
    const balance = await funder.readContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'balanceOf',
      args: [payer.address],
    })
    expect(balance).toBe(PRICE_ATOMIC * 2n)
    // Booked once, 95/5, by the settlement batch that names the call.
    const entries = await a.sql<{ kind: string; amount_atomic: string }[]>`
      SELECT e.kind, e.amount_atomic::text FROM ledger_entries e
      JOIN calls c ON e.source_type = 'settlement_batch' AND e.source_id = c.ledger_batch_id::text
      WHERE c.id = ${rows[0]!.id} AND e.kind IN ('owner_share', 'fee')`
    const batchCalls = await a.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM calls WHERE ledger_batch_id = (SELECT ledger_batch_id FROM calls WHERE id = ${rows[0]!.id})`
    expect(batchCalls[0]!.n).toBe(1)
    expect(entries).toHaveLength(2)
    const by = Object.fromEntries(entries.map((e) => [e.kind, BigInt(e.amount_atomic)]))
    expect(by.owner_share).toBe((PRICE_ATOMIC * 95n) / 100n)
    expect(by.fee).toBe(PRICE_ATOMIC - (PRICE_ATOMIC * 95n) / 100n)
    // GET /calls says which protocol paid.
    const listed = await callApi(a.url, '/api/v1/calls', { key: apiKey })
    expect(listed.status).toBe(200)
    const shown = listed.body.data.find((c: { id: string }) => c.id === rows[0]!.id)
    expect(shown.scheme).toBe('mpp-charge')
    expect(shown.protocol).toBe('mpp')
    const report = await reconcile({ sql: a.sql, chain: a.chain, config: a.config })
    expect(report.differences).toEqual([])

    // The same credential again: refused on this instance and on the other, nothing served, nothing booked.
    if (usingServer) expect(new URL(urlB).port).not.toBe(new URL(urlA).port)
    for (const url of [urlA, urlB]) {
      const again = await send(url, { authorization: payer.sent[0]! })
      expect(again.status).toBe(402)
      expect(again.error).toBe('proof_already_used')
      expect(again.wwwAuthenticate).toMatch(/^Payment id="/)
    }
    // Nor through x402 exact: the same authorization is the same claim.
    const p = credential.payload as Record<string, string>
    const asExact = Buffer.from(
      JSON.stringify({
        x402Version: 1,
        scheme: 'exact',
        network: 'base-sepolia',
        payload: {
          signature: p.signature,
          authorization: {
            from: p.from,
            to: p.to,
            value: p.value,
            validAfter: p.validAfter,
            validBefore: p.validBefore,
            nonce: p.nonce,
          },
        },
      }),
    ).toString('base64')
    const viaX402 = await send(urlB, { 'x-payment': asExact })
    expect(viaX402.status).toBe(402)
    expect(viaX402.error).toBe('proof_already_used')
    expect(upstream.count()).toBe(before + 1)
    await a.flushCaptures()
    expect(await callRows(a, payer.address)).toHaveLength(1)
  })

  it('x402-fetch (v1) still pays from the body when its request also says Accept-Payment (a problem body)', async () => {
    const key = generatePrivateKey()
    const account = privateKeyToAccount(key)
    await fund(account.address, PRICE_ATOMIC)
    const answers: string[] = []
    // A client speaking both dialects: the first 402 is the payment-required problem, x402 members inside.
    const speaksBoth: typeof fetch = async (input, init) => {
      const headers = new Headers(init?.headers)
      headers.set('accept-payment', 'evm/charge')
      const r = await fetch(input, { ...init, headers })
      answers.push(`${r.status} ${r.headers.get('content-type')}`)
      return r
    }
    const before = upstream.count()
    const r = await wrapFetchV1(speaksBoth, wallet(key) as never)(urlA)
    expect(r.status).toBe(200)
    expect(answers[0]).toBe('402 application/problem+json')
    expect(upstream.count()).toBe(before + 1)
    await a.flushCaptures()
    expect((await callRows(a, account.address)).map((x) => x.scheme)).toEqual(['exact'])
  })

  it('@x402/fetch still pays the same URL', async () => {
    const key = generatePrivateKey()
    const account = privateKeyToAccount(key)
    await fund(account.address, PRICE_ATOMIC)
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: account as never })
    const before = upstream.count()
    const r = await wrapFetchWithPayment(fetch, client)(urlA)
    expect(r.status).toBe(200)
    expect(upstream.count()).toBe(before + 1)
    await a.flushCaptures()
    const rows = await callRows(a, account.address)
    expect(rows.map((x) => x.scheme)).toEqual(['exact'])
    const listed = await callApi(a.url, '/api/v1/calls', { key: apiKey })
    const shown = listed.body.data.find((c: { id: string }) => c.id === rows[0]!.id)
    expect([shown.scheme, shown.protocol]).toEqual(['exact', 'x402'])
  })
})

describe('the hosted checkout and a pass purchase, paid by mppx', () => {
  it('a checkout 402 carries both challenges; mppx pays it: paid once, its receipt names the settlement, payment.received says mpp', async () => {
    const AMOUNT = 20_000n
    apiKey ??= await register(a)
    const created = await callApi(a.url, '/api/v1/payments', {
      key: apiKey,
      body: { amount: Number(AMOUNT) / 1e6, description: 'invoice paid by MPP' },
    })
    expect(created.status).toBe(201)
    const paymentUrl: string = created.body.payment_url
    const bare = await fetch(paymentUrl, { headers: { accept: 'application/json' } })
    expect(bare.status).toBe(402)
    expect(bare.headers.get('payment-required')).not.toBeNull()
    const offered = Challenge.fromResponse(bare)
    expect(offered).toMatchObject({ method: 'evm', intent: 'charge' })
    expect(offered.request).toMatchObject({ amount: AMOUNT.toString(), recipient: chain.treasury.address })

    const payer = await mppPayer(AMOUNT * 2n)
    const r = await payer.fetch(paymentUrl, { headers: { accept: 'application/json' } })
    expect(r.status).toBe(200)
    const paid = (await r.json()) as { status: string; transaction: string; payer: string }
    expect(paid.status).toBe('paid')
    expect(paid.payer.toLowerCase()).toBe(payer.address.toLowerCase())
    expect(payer.sent).toHaveLength(1)
    // Settled before the answer: the receipt names the settlement transaction.
    const receipt = Receipt.fromResponse(r)
    expect(receipt).toMatchObject({ method: 'evm', status: 'success', reference: paid.transaction })
    const balance = await funder.readContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'balanceOf',
      args: [payer.address],
    })
    expect(balance).toBe(AMOUNT)
    const [event] = await a.sql<{ data: { proof: Record<string, unknown> } }[]>`
      SELECT data FROM events WHERE type = 'payment.received' AND data->>'id' = ${created.body.id}`
    expect(event!.data.proof).toMatchObject({ scheme: 'mpp-charge', protocol: 'mpp' })

    // The same credential again: the same paid answer, nothing more moves; a metered URL refuses it (its
    // challenge is the checkout's).
    const again = await send(paymentUrl, { authorization: payer.sent[0]!, accept: 'application/json' })
    expect(again.status).toBe(200)
    const events = await a.sql`SELECT id FROM events WHERE data->>'id' = ${created.body.id}`
    expect(events).toHaveLength(1)
    const elsewhere = await send(urlA, { authorization: payer.sent[0]! })
    expect([elsewhere.status, elsewhere.error]).toEqual([402, 'invalid_challenge'])
    const report = await reconcile({ sql: a.sql, chain: a.chain, config: a.config })
    expect(report.differences).toEqual([])
  })

  it('a pass purchase 402 carries both challenges; mppx buys the pass, its call row says mpp', async () => {
    apiKey ??= await register(a)
    const ep = await callApi(a.url, '/api/v1/endpoints', {
      key: apiKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01, pass: { price: 0.05, calls: 3 } },
    })
    expect(ep.status, ep.text).toBe(201)
    const purchaseUrl: string = ep.body.pass.purchase_url
    const bare = await fetch(purchaseUrl, { method: 'POST' })
    expect(bare.status).toBe(402)
    expect(bare.headers.get('payment-required')).not.toBeNull()
    expect(Challenge.fromResponse(bare).request).toMatchObject({ amount: '50000' })
    const payer = await mppPayer(50_000n)
    const r = await payer.fetch(purchaseUrl, { method: 'POST' })
    expect(r.status).toBe(201)
    const pass = (await r.json()) as { payer: string; uses_left: number }
    expect(pass.payer.toLowerCase()).toBe(payer.address.toLowerCase())
    expect(Receipt.fromResponse(r)).toMatchObject({ method: 'evm', status: 'success' })
    await a.flushCaptures()
    const rows = await callRows(a, payer.address)
    expect(rows.map((x) => [x.scheme, x.amount_atomic])).toEqual([['mpp-charge', '50000']])
    // A refused credential at the purchase: the spec's problem, a fresh challenge, no pass sold.
    const malformed = await fetch(purchaseUrl, { method: 'POST', headers: { authorization: 'Payment x' } })
    expect(malformed.status).toBe(402)
    expect(malformed.headers.get('content-type')).toBe('application/problem+json')
    expect(await malformed.json()).toMatchObject({
      type: 'https://paymentauth.org/problems/malformed-credential',
      error: 'malformed_credential',
    })
    const fresh = Challenge.fromResponse(bare)
    const other = await fetch(purchaseUrl, {
      method: 'POST',
      headers: { authorization: await credentialFor({ ...fresh, intent: 'session' }) },
    })
    expect(other.status).toBe(400)
    expect(await other.json()).toMatchObject({ type: 'https://paymentauth.org/problems/method-unsupported' })
    expect(Challenge.fromHeaders(other.headers).intent).toBe('charge')
    await a.flushCaptures()
    expect(await callRows(a, payer.address)).toHaveLength(1)
  })
})

describe('an endpoint turns either protocol off', () => {
  it('x402 only: no MPP challenge, an MPP credential refused; MPP only: no x402 terms, an x402 payload refused', async () => {
    const created = await callApi(a.url, '/api/v1/endpoints', {
      key: apiKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01, protocols: ['x402'] },
    })
    expect(created.status).toBe(201)
    expect(created.body.protocols).toEqual(['x402'])
    const url: string = created.body.metered_url
    const off = await fetch(url)
    expect(off.status).toBe(402)
    expect(off.headers.get('www-authenticate')).toBeNull()
    expect(((await off.json()) as { accepts: unknown[] }).accepts.length).toBeGreaterThan(0)
    // Turned on, then off again after a client took the challenge: its credential is refused, nothing served.
    const on = await callApi(a.url, `/api/v1/endpoints/${created.body.id}`, {
      key: apiKey,
      method: 'PATCH',
      body: { protocols: ['mpp'] },
    })
    expect(on.status).toBe(200)
    expect(on.body.protocols).toEqual(['mpp'])
    await waitFor(async () => (await fetch(url)).headers.get('www-authenticate') !== null, {
      timeoutMs: 5_000,
      intervalMs: 50,
      what: 'the MPP challenge offered',
    })
    const mppOnly = await fetch(url)
    const body = (await mppOnly.json()) as { accepts: unknown[] }
    expect(body.accepts).toEqual([])
    const before = upstream.count()
    const x402 = await send(url, {
      'x-payment': Buffer.from('{"x402Version":1,"scheme":"exact"}').toString('base64'),
    })
    expect([x402.status, x402.error]).toEqual([402, 'protocol_not_accepted'])
    const challenge = Challenge.fromResponse(mppOnly)
    const back = await callApi(a.url, `/api/v1/endpoints/${created.body.id}`, {
      key: apiKey,
      method: 'PATCH',
      body: { protocols: ['x402'] },
    })
    expect(back.status).toBe(200)
    await waitFor(async () => (await fetch(url)).headers.get('www-authenticate') === null, {
      timeoutMs: 5_000,
      intervalMs: 50,
      what: 'the MPP challenge withdrawn',
    })
    const refused = await send(url, { authorization: await credentialFor(challenge) })
    expect([refused.status, refused.error]).toEqual([402, 'protocol_not_accepted'])
    expect(upstream.count()).toBe(before)
    const bad = await callApi(a.url, `/api/v1/endpoints/${created.body.id}`, {
      key: apiKey,
      method: 'PATCH',
      body: { protocols: ['x402', 'lightning'] },
    })
    expect(bad.status).toBe(400)
  })
})

describe('MPP charge on a usage-priced endpoint', () => {
  it('pays the ceiling; the unused part is refunded exactly once the authorization settled', async () => {
    const CEILING = 50_000n
    const openai = await startOpenAiUpstream({ events: 50 })
    try {
      const url = await endpoint(a, {
        upstream_url: `${openai.url}/v1/chat/completions`,
        pricing: {
          model: 'usage',
          unit: 'tokens',
          max_price: Number(CEILING) / 1e6,
          input_price_per_million: 2,
          cached_input_price_per_million: 1,
          output_price_per_million: 10,
        },
      })
      const c = Challenge.fromResponse(await fetch(url, { method: 'POST' }))
      expect((c.request as { amount: string }).amount).toBe(CEILING.toString())
      const payer = await mppPayer(CEILING * 2n)
      const r = await payer.fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt', stream: true }),
      })
      expect(r.status).toBe(200)
      await r.text()
      await a.flushCaptures()
      const [call] = await a.sql<
        { id: string; scheme: string; amount_atomic: bigint; refund_atomic: bigint; proof_key: string }[]
      >`
        SELECT id, scheme, amount_atomic, refund_atomic, call_proof_key(proof_key, proof) AS proof_key FROM calls
        WHERE lower(call_payer(payer, payer_address)) = ${payer.address.toLowerCase()}`
      expect(call).toMatchObject({ scheme: 'mpp-charge', amount_atomic: 2_700n, refund_atomic: 47_300n })
      const refunds = () =>
        a.sql<{ wallet: string; amount_atomic: bigint }[]>`
          SELECT wallet, amount_atomic FROM ledger_entries
          WHERE source_type = 'call' AND source_id = ${call!.id} AND kind = 'refund'`
      await waitFor(
        async () => {
          const [k] = await a.sql<{ settled: boolean }[]>`
            SELECT settled_at IS NOT NULL AS settled FROM claims WHERE proof_key = ${call!.proof_key}`
          return k?.settled === true
        },
        { timeoutMs: 30_000, intervalMs: 200, what: 'the ceiling authorization settled' },
      )
      // The whole ceiling moved on chain; the unused part is owed back, once, to the payer.
      const balance = await funder.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName: 'balanceOf',
        args: [payer.address],
      })
      expect(balance).toBe(CEILING)
      const owed = await refunds()
      expect(owed).toHaveLength(1)
      expect(owed[0]!.wallet.toLowerCase()).toBe(payer.address.toLowerCase())
      expect(owed[0]!.amount_atomic).toBe(47_300n)
      const report = await reconcile({ sql: a.sql, chain: a.chain, config: a.config })
      expect(report.differences).toEqual([])
    } finally {
      await openai.close()
    }
  })
})

describe('MPP credentials refused as the spec names them, each with a fresh challenge, nothing changed', () => {
  const PROBLEMS = 'https://paymentauth.org/problems/'

  async function counts() {
    await a.flushCaptures()
    const [n] = await a.sql<{ calls: number; claims: number }[]>`
      SELECT (SELECT count(*)::int FROM calls) AS calls, (SELECT count(*)::int FROM claims) AS claims`
    return { upstream: upstream.count(), ...n! }
  }

  /** Whether the token counts the authorization of a credential as used (settled on chain). */
  async function usedOnChain(credential: string): Promise<boolean> {
    const p = Credential.deserialize(credential).payload as { from: Address; nonce: Hex }
    return funder.readContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'authorizationState',
      args: [p.from, p.nonce],
    })
  }

  /**
   * The answer to a credential: the spec's status, an RFC 9457 problem of the spec's type naming the fresh
   * challenge in WWW-Authenticate, tollgate's reason beside it; nothing forwarded, claimed or booked.
   */
  async function refused(authorization: string, reason: string, type: string, status = 402) {
    const before = await counts()
    const r = await fetch(urlA, { headers: { authorization } })
    expect(r.status).toBe(status)
    expect(r.headers.get('content-type')).toBe('application/problem+json')
    const problem = (await r.json()) as Record<string, unknown>
    expect(problem).toMatchObject({ type: `${PROBLEMS}${type}`, status, error: reason })
    expect(typeof problem.title).toBe('string')
    expect(typeof problem.detail).toBe('string')
    // A fresh challenge, the one the problem names; the x402 terms still beside it.
    const fresh = Challenge.fromHeaders(r.headers)
    expect(problem.challengeId).toBe(fresh.id)
    expect(fresh.id).not.toBe(safeChallengeId(authorization))
    expect(r.headers.get('payment-required')).toBeTruthy()
    expect(r.headers.get('payment-receipt')).toBeNull()
    expect(await counts()).toEqual(before)
    return problem
  }

  function safeChallengeId(authorization: string): string | null {
    try {
      return Credential.deserialize(authorization).challenge.id
    } catch {
      return null
    }
  }

  async function freshChallenge() {
    return Challenge.fromResponse(await fetch(urlA))
  }

  it('the first 402 stays the x402 body (no credential, nothing refused)', async () => {
    const r = await fetch(urlA)
    expect(r.status).toBe(402)
    expect(r.headers.get('content-type')).toMatch(/^application\/json/)
    const body = (await r.json()) as Record<string, unknown>
    expect(body.error).toBe('payment_required')
    expect(body.type).toBeUndefined()
  })

  it('the first 402 to a client speaking MPP (Accept-Payment) is the payment-required problem, x402 members kept', async () => {
    const plain = (await (await fetch(urlA)).json()) as Record<string, unknown>
    const asked: Record<string, string>[] = [
      { 'accept-payment': 'evm/charge' },
      { accept: 'application/problem+json' },
    ]
    for (const headers of asked) {
      const r = await fetch(urlA, { headers })
      expect(r.status).toBe(402)
      expect(r.headers.get('content-type')).toBe('application/problem+json')
      const problem = (await r.json()) as Record<string, unknown>
      expect(problem).toMatchObject({
        type: `${PROBLEMS}payment-required`,
        title: 'Payment Required',
        status: 402,
        error: 'payment_required',
        challengeId: Challenge.fromHeaders(r.headers).id,
      })
      expect(typeof problem.detail).toBe('string')
      // An x402 v1 client reading this body (x402-fetch) finds its terms unchanged.
      expect(problem.x402Version).toBe(1)
      expect(problem.accepts).toEqual(plain.accepts)
      expect(r.headers.get('payment-required')).toBeTruthy()
    }
  })

  it('a credential that is not base64url JSON: 402 malformed-credential', async () => {
    await refused('Payment not-a-credential', 'malformed_credential', 'malformed-credential')
  })

  it('a challenge whose terms were changed (a lower amount): 402 invalid-challenge', async () => {
    const c = await freshChallenge()
    const cheaper = { ...c, request: { ...c.request, amount: '1' } }
    await refused(await credentialFor(cheaper), 'invalid_challenge', 'invalid-challenge')
  })

  it('a challenge past its expiry (bound by our key): 402 payment-expired', async () => {
    const c = await freshChallenge()
    const expires = new Date(Date.now() - 1_000).toISOString()
    const key = challengeKey(chain.treasury.privateKey)
    const stale = { ...c, expires }
    stale.id = challengeId(key, {
      realm: c.realm,
      method: c.method,
      intent: c.intent,
      request: Buffer.from(JSON.stringify(canonical(c.request))).toString('base64url'),
      expires,
      digest: '',
      opaque: c.opaque ?? '',
    })
    const credential = await credentialFor(stale)
    await refused(credential, 'payment_expired', 'payment-expired')
    expect(await usedOnChain(credential)).toBe(false)
  })

  it('another method or intent: 400 method-unsupported, still with a fresh challenge', async () => {
    const c = await freshChallenge()
    await refused(
      await credentialFor({ ...c, method: 'tempo' }),
      'method_unsupported',
      'method-unsupported',
      400,
    )
    await refused(
      await credentialFor({ ...c, intent: 'session' }),
      'method_unsupported',
      'method-unsupported',
      400,
    )
  })

  it('a payer without the funds, through the published mppx client: 402 verification-failed each time', async () => {
    const payer = await mppPayer(0n)
    const before = await counts()
    const r = await payer.fetch(urlA)
    // mppx signs a new credential for each fresh challenge, up to its retries; each one is refused.
    expect(r.status).toBe(402)
    expect(r.headers.get('content-type')).toBe('application/problem+json')
    const problem = (await r.json()) as Record<string, unknown>
    expect(problem).toMatchObject({ type: `${PROBLEMS}verification-failed`, error: 'insufficient_funds' })
    expect(payer.sent.length).toBeGreaterThanOrEqual(1)
    expect(new Set(payer.sent).size).toBe(payer.sent.length)
    expect(await counts()).toEqual(before)
    for (const sent of payer.sent) expect(await usedOnChain(sent)).toBe(false)
  })

  it('a credential already paid with (a replay): 402 invalid-challenge, on both instances', async () => {
    const payer = await mppPayer(PRICE_ATOMIC)
    expect((await payer.fetch(urlA)).status).toBe(200)
    await a.flushCaptures()
    await refused(payer.sent[0]!, 'proof_already_used', 'invalid-challenge')
    if (b !== null) {
      const r = await fetch(urlB, { headers: { authorization: payer.sent[0]! } })
      expect(r.status).toBe(402)
      expect(await r.json()).toMatchObject({
        type: `${PROBLEMS}invalid-challenge`,
        error: 'proof_already_used',
      })
    }
    expect(await callRows(a, payer.address)).toHaveLength(1)
  })

  it('a signature for another challenge (the nonce is not this challenge’s): 402 invalid-challenge', async () => {
    const one = await freshChallenge()
    const other = await freshChallenge()
    const signed = Credential.deserialize(await credentialFor(one))
    const swapped = Credential.serialize(Credential.from({ challenge: other, payload: signed.payload }))
    await refused(swapped, 'invalid_challenge', 'invalid-challenge')
    expect(await usedOnChain(swapped)).toBe(false)
  })

  it('an authorization for less than the challenge: 402 payment-insufficient', async () => {
    const c = await freshChallenge()
    const signed = Credential.deserialize(await credentialFor(c))
    const less = { ...(signed.payload as Record<string, string>), value: '1' }
    await refused(
      Credential.serialize(Credential.from({ challenge: c, payload: less })),
      'payment_insufficient',
      'payment-insufficient',
    )
  })
})

/** Signs an authorization for `challenge` as mppx's evm client does, and serializes the credential. */
async function credentialFor(challenge: Challenge.Challenge, key: Hex = chain.payers[1]!.privateKey) {
  const account = privateKeyToAccount(key)
  const request = challenge.request as { amount: string; recipient: Address; currency: Address }
  const validBefore = BigInt(
    Math.floor(Date.parse(challenge.expires ?? new Date(Date.now() + 300_000).toISOString()) / 1000),
  )
  const nonce = keccak256(toHex(`${challenge.id}${challenge.realm}`))
  const signature = await account.signTypedData({
    domain: {
      name: token.name,
      version: token.version,
      chainId: 84532,
      verifyingContract: chain.usdcAddress,
    },
    types: {
      TransferWithAuthorization: [
        { name: 'from', type: 'address' },
        { name: 'to', type: 'address' },
        { name: 'value', type: 'uint256' },
        { name: 'validAfter', type: 'uint256' },
        { name: 'validBefore', type: 'uint256' },
        { name: 'nonce', type: 'bytes32' },
      ],
    },
    primaryType: 'TransferWithAuthorization',
    message: {
      from: account.address,
      to: request.recipient,
      value: BigInt(request.amount),
      validAfter: 0n,
      validBefore,
      nonce,
    },
  })
  return Credential.serialize(
    Credential.from({
      challenge,
      payload: {
        type: 'authorization',
        from: account.address,
        to: request.recipient,
        value: request.amount,
        validAfter: '0',
        validBefore: validBefore.toString(),
        nonce,
        signature,
      },
    }),
  )
}

/** RFC 8785 for the request's plain JSON (keys sorted, recursively), as mppx serializes it. */
function canonical(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(canonical)
  if (x !== null && typeof x === 'object')
    return Object.fromEntries(
      Object.keys(x as object)
        .sort()
        .map((k) => [k, canonical((x as Record<string, unknown>)[k])]),
    )
  return x
}
