// The x402 `payment-identifier` extension: a client that paid and lost the answer (it dropped the connection
// while the upstream worked) retries with the same identifier and the same payment, and gets the answer that
// was kept: the upstream was called once, the payer charged once. The same identifier with another payment is
// 409; an answer over the size bound is not kept and the retry says so. Payments signed by the published
// @x402/core client, the identifier appended by the published @x402/extensions code.

import { request as httpRequest } from 'node:http'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier'
import type { Address, Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaService,
  usdcBalanceOf,
} from '../x402/harness.ts'

checkPaymentProtocol()

const PRICE_ATOMIC = 10_000n

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>
let slowUrl: string
let echoUrl: string

async function endpoint(apiKey: string, path: string): Promise<string> {
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: apiKey,
    body: { upstream_url: `${upstream.url}${path}`, price: 0.01 },
  })
  expect(ep.status).toBe(201)
  return ep.body.metered_url
}

/** A PAYMENT-SIGNATURE for `url`, by the published client, carrying `id` when given. */
async function signed(url: string, key: Hex, id?: string): Promise<string> {
  const r = await fetch(url)
  expect(r.status).toBe(402)
  const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
  expect(required.extensions?.['payment-identifier']).toMatchObject({ info: { required: false } })
  if (id !== undefined) appendPaymentIdentifierToExtensions(required.extensions!, id)
  const client = new x402Client()
  registerExactEvmScheme(client, { signer: privateKeyToAccount(key) as never })
  const payload = await client.createPaymentPayload(required as never)
  return Buffer.from(JSON.stringify(payload)).toString('base64')
}

/** Sends a paid request and drops the connection once the upstream has it, before any answer. */
async function payAndDrop(url: string, header: string, forwardedWhen: () => boolean): Promise<void> {
  const req = httpRequest(url, { headers: { 'payment-signature': header } })
  req.on('error', () => {})
  req.on('response', () => {
    throw new Error('the answer came before the client dropped the connection')
  })
  req.end()
  await waitFor(forwardedWhen, { timeoutMs: 10_000, what: 'the call forwarded upstream' })
  req.destroy()
}

const balanceOf = (owner: Address) => usdcBalanceOf(chain, owner)

async function paidAnswerState(id: string): Promise<string | null> {
  const [row] = await svc.sql<{ state: string }[]>`SELECT state FROM paid_answers WHERE payment_id = ${id}`
  return row?.state ?? null
}

async function claimsOf(payer: Address): Promise<number> {
  const [row] = await svc.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM claims WHERE lower(payer) = ${payer.toLowerCase()}`
  return row!.n
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  upstream = await startUpstream()
  // 16 bytes kept per answer: /slow's "slow" fits, /echo's JSON does not.
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    x402: { paid_answers: { ttl_ms: 60_000, max_answer_bytes: 16, max_total_bytes: 1_000_000 } },
  } as never)
  const merchantKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'retry Co')
  slowUrl = await endpoint(merchantKey, '/slow')
  echoUrl = await endpoint(merchantKey, '/echo')
}, 60_000)

afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('payment-identifier: paid once, delivered twice, charged once', () => {
  it('a retry after the client dropped the connection gets the kept answer; the upstream ran once', async () => {
    const key = chain.payers[0]!.privateKey
    const payer = privateKeyToAccount(key).address
    const before = await balanceOf(payer)
    const id = generatePaymentId()
    const header = await signed(slowUrl, key, id)
    const calls = upstream.count()

    // The upstream takes 2 s: the client leaves while it works (the payment claimed, the call forwarded).
    await payAndDrop(`${slowUrl}?ms=2000`, header, () => upstream.count() > calls)
    // The answer is read to its end although the client left, and kept.
    await waitFor(async () => (await paidAnswerState(id)) === 'stored', {
      timeoutMs: 15_000,
      what: 'a kept answer',
    })
    expect(upstream.count()).toBe(calls + 1)

    const retry = await fetch(`${slowUrl}?ms=2000`, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(retry.status).toBe(200)
    expect(await retry.text()).toBe('slow')
    expect(retry.headers.get('payment-identifier-replayed')).toBe('true')
    expect(retry.headers.get('content-type')).toBe('text/plain')
    // The receipt of the first answer comes with it.
    expect(decodePaymentResponseHeader(retry.headers.get('payment-response')!)).toMatchObject({ payer })
    expect(upstream.count()).toBe(calls + 1)

    // Charged once: one claim, and once settled the payer paid the price once.
    expect(await claimsOf(payer)).toBe(1)
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    await expect.poll(() => balanceOf(payer), { timeout: 10_000, interval: 100 }).toBe(before - PRICE_ATOMIC)

    // And again: still the same answer, still one charge.
    const third = await fetch(`${slowUrl}?ms=2000`, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(await third.text()).toBe('slow')
    expect(upstream.count()).toBe(calls + 1)
    expect(await balanceOf(payer)).toBe(before - PRICE_ATOMIC)
  })

  it('the same identifier with another payment is 409, and nothing is forwarded or claimed', async () => {
    const key = chain.payers[1]!.privateKey
    const payer = privateKeyToAccount(key).address
    const id = generatePaymentId()
    const first = await fetch(slowUrl, { headers: { 'PAYMENT-SIGNATURE': await signed(slowUrl, key, id) } })
    expect(first.status).toBe(200)
    expect(await first.text()).toBe('slow')
    await waitFor(async () => (await paidAnswerState(id)) === 'stored', {
      timeoutMs: 10_000,
      what: 'a kept answer',
    })
    const calls = upstream.count()
    const other = await fetch(slowUrl, { headers: { 'PAYMENT-SIGNATURE': await signed(slowUrl, key, id) } })
    expect(other.status).toBe(409)
    expect(((await other.json()) as { error: { code: string } }).error.code).toBe('idempotency_key_reused')
    expect(upstream.count()).toBe(calls)
    expect(await claimsOf(payer)).toBe(1)
  })

  it('an answer over the size bound is not kept, and the retry says so (not charged again)', async () => {
    const key = chain.payers[2]!.privateKey
    const id = generatePaymentId()
    const header = await signed(echoUrl, key, id)
    const first = await fetch(echoUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(first.status).toBe(200)
    await first.arrayBuffer()
    await waitFor(async () => (await paidAnswerState(id)) === 'not_stored', {
      timeoutMs: 10_000,
      what: 'not kept',
    })
    const calls = upstream.count()
    const retry = await fetch(echoUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(retry.status).toBe(409)
    const body = (await retry.json()) as { error: { code: string; message: string } }
    expect(body.error.code).toBe('invalid_state')
    expect(body.error.message).toContain('over the size kept')
    expect(upstream.count()).toBe(calls)
  })

  it('a payment that does not verify writes nothing under its identifier', async () => {
    const id = generatePaymentId()
    const header = await signed(slowUrl, chain.payers[3]!.privateKey, id)
    const payload = JSON.parse(Buffer.from(header, 'base64').toString())
    // Another payer's nonce under the same signature: the signature no longer recovers the payer.
    payload.payload.authorization.nonce = `0x${'11'.repeat(32)}`
    const forged = Buffer.from(JSON.stringify(payload)).toString('base64')
    const r = await fetch(slowUrl, { headers: { 'PAYMENT-SIGNATURE': forged } })
    expect(r.status).toBe(402)
    expect(await paidAnswerState(id)).toBeNull()
  })

  it('without the extension nothing changes: a replayed payment is refused as before', async () => {
    const key = chain.payers[3]!.privateKey
    const header = await signed(slowUrl, key)
    const first = await fetch(slowUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(first.status).toBe(200)
    await first.arrayBuffer()
    const again = await fetch(slowUrl, { headers: { 'PAYMENT-SIGNATURE': header } })
    expect(again.status).toBe(402)
    expect(decodePaymentRequiredHeader(again.headers.get('payment-required')!).error).toBe(
      'proof_already_used',
    )
  })
})
