// x402 on the hosted checkout, on a real chain (a private anvil announced as base-sepolia, the network the
// published clients know) and a real database: the published @x402/fetch client pays a payment_url with no
// other code; the payment is paid once, by the settlement of the authorization; a paid, expired or canceled
// payment answers as for a hash and never settles the authorization; one that settles after its payment
// closed is refunded in the next payout batch.
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { Webhook } from 'standardwebhooks'
import { type Address, createWalletClient, type Hex, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import type { Service } from '../../src/service.ts'
import { callApi } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { registerMerchantKey, startBaseSepoliaChain, startBaseSepoliaService } from '../x402/harness.ts'

const NETWORK = 'eip155:84532'
const usdcAbi = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
])

let chain: DevChain
let svc: Service
let receiver: WebhookReceiver
let key: string
let secret: string

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  // Settlement runs only when a test says so (runNow): every race below is ordered by the test.
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    settlement: { interval_ms: 3_600_000 },
    payouts: { interval_ms: 3_600_000, threshold_check_interval_ms: 3_600_000 },
    webhooks: { poll_interval_ms: 100 },
  } as never)
  receiver = await startWebhookReceiver()
  key = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Checkout x402 Co')
  const wh = await callApi(svc.url, '/api/v1/webhooks', { key, body: { url: `${receiver.url}/hook` } })
  secret = wh.body.secret
})
afterAll(async () => {
  await svc?.stop()
  await receiver?.close()
  await chain?.stop()
})

function balanceOf(owner: Address): Promise<bigint> {
  return svc.chain.publicClient.readContract({
    address: chain.usdcAddress,
    abi: usdcAbi,
    functionName: 'balanceOf',
    args: [owner],
  })
}

/** The published v2 client, unchanged. */
function x402(payerKey: Hex) {
  const client = new x402Client()
  registerExactEvmScheme(client, { signer: privateKeyToAccount(payerKey) as never })
  return { client, fetch: wrapFetchWithPayment(fetch, client) }
}

async function createPayment(amount: number, extra: Record<string, unknown> = {}) {
  const r = await callApi(svc.url, '/api/v1/payments', {
    key,
    body: { amount, description: 'invoice', ...extra },
  })
  expect(r.status).toBe(201)
  return r.body as { id: string; payment_url: string; amount_requested_atomic: string }
}

/** A PAYMENT-SIGNATURE for the payment's current 402, signed by the published client. */
async function signFor(paymentUrl: string, payerKey: Hex) {
  const r = await fetch(paymentUrl, { headers: { accept: 'application/json' } })
  expect(r.status).toBe(402)
  const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
  const payload = await x402(payerKey).client.createPaymentPayload(required as never)
  return Buffer.from(JSON.stringify(payload)).toString('base64')
}

const claimStatus = async (paymentId: string) =>
  (
    await svc.sql<{ status: string }[]>`
      SELECT status FROM claims WHERE target_id = ${paymentId} AND kind = 'eip3009'`
  ).map((c) => c.status)

const until = <T>(what: string, f: () => Promise<T | null | undefined | false>) =>
  waitFor(f, { timeoutMs: 15_000, intervalMs: 50, what })

/** Waits for the authorization to be held, then settles it now. */
async function settleWhenHeld(paymentId: string) {
  await until('the authorization held', async () => (await claimStatus(paymentId)).includes('settling'))
  await svc.jobs.runNow('x402-settlement')
}

describe('x402 on the hosted checkout', () => {
  it('the 402 offers x402 exact for the price due, beside the transfer and the hash', async () => {
    const p = await createPayment(0.5)
    const r = await fetch(p.payment_url, { method: 'POST', headers: { accept: 'application/json' } })
    expect(r.status).toBe(402)
    const body = (await r.json()) as Record<string, any>
    expect(body).toMatchObject({ error: 'payment_required', price_atomic: p.amount_requested_atomic })
    expect(body.how_to_pay).toMatch(/transaction hash.*x402/)
    expect(body.x402Version).toBe(1)
    expect(body.accepts[0]).toMatchObject({
      scheme: 'exact',
      network: 'base-sepolia',
      maxAmountRequired: '500000',
      payTo: chain.treasury.address,
    })
    const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
    expect(required).toMatchObject({
      x402Version: 2,
      error: 'payment_required',
      resource: { url: p.payment_url },
      accepts: [{ scheme: 'exact', network: NETWORK, amount: '500000', asset: chain.usdcAddress }],
    })
  })

  it('the published @x402/fetch client pays a payment_url with no other code: paid once, webhooks signed', async () => {
    const p = await createPayment(0.5)
    const payer = chain.payers[0]!
    const before = await balanceOf(payer.address)
    const treasuryBefore = await balanceOf(chain.treasury.address)
    let sent = ''
    const recording: typeof fetch = (input, init) => {
      const h = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined))
      if (h.get('payment-signature')) sent = h.get('payment-signature')!
      return fetch(input, init)
    }
    const client = new x402Client()
    registerExactEvmScheme(client, { signer: privateKeyToAccount(payer.privateKey) as never })
    const paying = wrapFetchWithPayment(recording, client)(p.payment_url, {
      headers: { accept: 'application/json' },
    })
    await settleWhenHeld(p.id)
    const r = await paying
    expect(r.status, await r.clone().text()).toBe(200)
    const paid = (await r.json()) as Record<string, any>
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: payer.address })
    expect(paid).toMatchObject({
      id: p.id,
      status: 'paid',
      payer: payer.address,
      transaction: receipt.transaction,
    })
    // Exactly the price moved (no figure offset for an authorization), once.
    expect(await balanceOf(payer.address)).toBe(before - 500_000n)
    expect(await balanceOf(chain.treasury.address)).toBe(treasuryBefore + 500_000n)
    expect(await claimStatus(p.id)).toEqual(['applied'])

    // The same authorization again: the same answer, nothing more happens.
    const again = await fetch(p.payment_url, { method: 'POST', headers: { 'payment-signature': sent } })
    expect(again.status).toBe(200)
    expect(await balanceOf(payer.address)).toBe(before - 500_000n)
    const events = await svc.sql<{ type: string }[]>`
      SELECT type FROM events WHERE data->>'id' = ${p.id} ORDER BY created_at`
    expect(events.map((e) => e.type)).toEqual(['payment.received'])
    const entries = await svc.sql<{ kind: string; amount_atomic: bigint }[]>`
      SELECT kind, amount_atomic FROM ledger_entries WHERE source_type = 'payment' AND source_id = ${p.id}
      ORDER BY kind`
    expect(entries).toEqual([
      { kind: 'fee', amount_atomic: 25_000n },
      { kind: 'owner_share', amount_atomic: 475_000n },
    ])
    const c = await receiver.waitFor(
      (x) => x.body.includes('payment.received') && x.body.includes(p.id),
      10_000,
    )
    const event = new Webhook(secret).verify(c.body, c.headers) as { data: Record<string, unknown> }
    expect(event.data).toMatchObject({ id: p.id, status: 'paid', transaction: receipt.transaction })
    expect(event.data.proof).toMatchObject({ scheme: 'exact', protocol: 'x402' })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('a paid, canceled or expired payment answers as for a hash; the authorization is never settled', async () => {
    const payer = chain.payers[1]!
    const paid = await createPayment(0.3)
    const canceled = await createPayment(0.3)
    const expired = await createPayment(0.3)
    const headers = {
      paid: await signFor(paid.payment_url, payer.privateKey),
      canceled: await signFor(canceled.payment_url, payer.privateKey),
      expired: await signFor(expired.payment_url, payer.privateKey),
    }
    // Paid by another authorization of the same payer first.
    const paying = x402(payer.privateKey).fetch(paid.payment_url, { headers: { accept: 'application/json' } })
    await settleWhenHeld(paid.id)
    expect((await paying).status).toBe(200)
    expect(
      (await callApi(svc.url, `/api/v1/payments/${canceled.id}/cancel`, { key, method: 'POST' })).status,
    ).toBe(200)
    await svc.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${expired.id}`
    const before = await balanceOf(payer.address)
    const answers: Record<string, { status: number; code: string; auth: string }> = {}
    for (const [name, p] of Object.entries({ paid, canceled, expired })) {
      const r = await fetch(p.payment_url, {
        method: 'POST',
        headers: { 'payment-signature': headers[name as keyof typeof headers] },
      })
      const body = (await r.json()) as Record<string, any>
      answers[name] = { status: r.status, code: body.error.code, auth: body.authorization?.status }
    }
    expect(answers).toEqual({
      paid: { status: 409, code: 'payment_already_paid', auth: 'not_used' },
      canceled: { status: 410, code: 'payment_canceled', auth: 'not_used' },
      expired: { status: 410, code: 'payment_expired', auth: 'not_used' },
    })
    await svc.jobs.runNow('x402-settlement')
    expect(await balanceOf(payer.address)).toBe(before)
    expect(await claimStatus(canceled.id)).toEqual([])
    expect(await claimStatus(expired.id)).toEqual([])
  })

  it('an authorization that settles after its payment was paid by a hash is refunded in the next payout', async () => {
    const payer = chain.payers[2]!
    const p = await createPayment(0.2)
    const before = await balanceOf(payer.address)
    const paying = x402(payer.privateKey).fetch(p.payment_url, { headers: { accept: 'application/json' } })
    await until('the authorization held', async () => (await claimStatus(p.id)).includes('settling'))
    // Meanwhile the customer pays the figure by a plain transfer, presented as its hash.
    const wallet = createWalletClient({
      account: privateKeyToAccount(payer.privateKey),
      transport: http(chain.rpcUrl),
    })
    const hash = await wallet.writeContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'transfer',
      args: [chain.treasury.address, BigInt(p.amount_requested_atomic)],
      chain: null,
    })
    await svc.chain.publicClient.waitForTransactionReceipt({ hash })
    const byHash = await fetch(p.payment_url, { method: 'POST', headers: { 'x-payment': hash } })
    expect(byHash.status).toBe(200)
    await svc.jobs.runNow('x402-settlement')
    const r = await paying
    const body = (await r.json()) as Record<string, any>
    expect(r.status).toBe(409)
    expect(body).toMatchObject({ error: { code: 'payment_already_paid' }, refund: { status: 'scheduled' } })
    expect(await claimStatus(p.id)).toEqual(['refund_due'])
    const afterBoth = await balanceOf(payer.address)
    expect(afterBoth).toBe(before - BigInt(p.amount_requested_atomic) - 200_000n)
    await svc.jobs.runNow('payout-batch')
    expect(await balanceOf(payer.address)).toBe(afterBoth + 200_000n)
    expect(await claimStatus(p.id)).toEqual(['refunded'])
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })
})
