// Merchant refunds on the real chain: a full and a partial refund reach the payers' addresses for the exact
// amounts in the next payout batch, the merchant's balance and the reconcile agree, refund.* webhooks are
// signed; an over-refund, a refund of a pending payment, a duplicate and an uncovered refund change nothing.
import { Webhook } from 'standardwebhooks'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { accountBalance } from '../../src/db/ledger.ts'
import { type Funded, fundedAccount, payUsdc, usdcBalance } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

let svc: TestService
let receiver: WebhookReceiver
let merchant: Awaited<ReturnType<typeof registerMerchant>>
let secret: string

beforeAll(async () => {
  svc = await startTestService({
    overrides: { chain: { poll_interval_ms: 100 }, webhooks: { poll_interval_ms: 100 } },
  })
  receiver = await startWebhookReceiver()
  merchant = await registerMerchant(svc)
  const wh = await svc.api('/api/v1/webhooks', {
    key: merchant.key,
    body: { url: `${receiver.url}/hook`, events: ['refund.created', 'refund.paid', 'refund.failed'] },
  })
  expect(wh.status).toBe(201)
  secret = wh.body.secret
})
afterAll(async () => {
  await svc?.stop()
  await receiver?.close()
})

/** A payment of `dollars`, paid by `payer` with a transfer of its figure presented as a hash. */
async function paidPayment(payer: Funded, dollars: number) {
  const created = await svc.api('/api/v1/payments', {
    key: merchant.key,
    body: { amount: dollars, description: 'order' },
  })
  expect(created.status).toBe(201)
  const figure = BigInt(created.body.amount_requested_atomic)
  const hash = await payUsdc(payer, svc.chain.treasury, figure)
  const r = await fetch(created.body.payment_url, { method: 'POST', headers: { 'x-payment': hash } })
  expect(r.status).toBe(200)
  return { id: created.body.id as string, figure }
}

/** The running balance itself, read from the database. */
function balance() {
  return accountBalance(svc.sql, merchant.account.id)
}

/** Everything a refused request must leave alone. */
async function snapshot() {
  const [row] = await svc.sql<{ refunds: number; entries: number; events: number; timeline: number }[]>`
    SELECT (SELECT count(*) FROM refunds)::int AS refunds, (SELECT count(*) FROM ledger_entries)::int AS entries,
           (SELECT count(*) FROM events)::int AS events, (SELECT count(*) FROM payment_timeline)::int AS timeline`
  return { ...row, balance: await balance() }
}

describe('refunds', () => {
  let payerA: Funded
  let payerB: Funded
  let a: { id: string; figure: bigint }
  let b: { id: string; figure: bigint }

  it('a full and a partial refund arrive at the payers in the next payout batch, exactly', async () => {
    payerA = await fundedAccount(10_000_000n)
    payerB = await fundedAccount(10_000_000n)
    a = await paidPayment(payerA, 2)
    b = await paidPayment(payerB, 1)
    const before = await balance()
    // Owner shares (95 %, rounded down) of both payments, unpaid.
    const ownerA = (a.figure * 9500n) / 10_000n
    const ownerB = (b.figure * 9500n) / 10_000n
    expect(before.pending_atomic).toBe(ownerA + ownerB)

    const full = await svc.api('/api/v1/refunds', {
      key: merchant.key,
      body: { payment_id: a.id, reason: 'order canceled' },
      headers: { 'idempotency-key': 'refund-a' },
    })
    expect(full.status).toBe(201)
    expect(full.body).toMatchObject({
      object: 'refund',
      status: 'pending',
      payment_id: a.id,
      amount_atomic: a.figure.toString(),
      owner_debit_atomic: ownerA.toString(),
      fee_returned_atomic: (a.figure - ownerA).toString(),
      wallet: payerA.address,
      reason: 'order canceled',
      transaction: null,
    })
    const partial = await svc.api('/api/v1/refunds', {
      key: merchant.key,
      body: { payment_id: b.id, amount: 0.25 },
    })
    expect(partial.status).toBe(201)
    // The merchant's part in the proportion of its share, rounded down (the figure carries a tiny offset).
    const debitB = (ownerB * 250_000n) / b.figure
    expect(partial.body).toMatchObject({ amount_atomic: '250000', owner_debit_atomic: debitB.toString() })

    // The merchant's unpaid balance carries its parts at once.
    const after = await balance()
    expect(after.pending_atomic).toBe(ownerA + ownerB - ownerA - debitB)

    const balA = await usdcBalance(payerA.address)
    const balB = await usdcBalance(payerB.address)
    const balMerchant = await usdcBalance(merchant.wallet as `0x${string}`)
    await svc.jobs.runNow('payout-batch')
    expect((await usdcBalance(payerA.address)) - balA).toBe(a.figure)
    expect((await usdcBalance(payerB.address)) - balB).toBe(250_000n)
    // The merchant is paid what is left of its owner shares.
    expect((await usdcBalance(merchant.wallet as `0x${string}`)) - balMerchant).toBe(ownerB - debitB)

    const got = await svc.api(`/api/v1/refunds/${full.body.id}`, { key: merchant.key })
    expect(got.body.status).toBe('paid')
    expect(got.body.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    const [payout] = await svc.sql<{ tx_hash: string; wallet: string; amount_atomic: bigint }[]>`
      SELECT tx_hash, wallet, amount_atomic FROM payouts WHERE id = ${got.body.payout_id}`
    expect(payout).toEqual({ tx_hash: got.body.transaction, wallet: payerA.address, amount_atomic: a.figure })
    const list = await svc.api('/api/v1/refunds?limit=1', { key: merchant.key })
    expect(list.body).toMatchObject({ object: 'list', has_more: true, data: [{ id: partial.body.id }] })
    const next = await svc.api(`/api/v1/refunds?limit=1&starting_after=${partial.body.id}`, {
      key: merchant.key,
    })
    expect(next.body).toMatchObject({ has_more: false, data: [{ id: full.body.id, status: 'paid' }] })

    const final = await balance()
    expect(final.pending_atomic).toBe(0n)
    expect(final.in_flight_atomic).toBe(0n)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.refunds).toMatchObject({ refunds: 2, paid: 2 })

    // refund.created and refund.paid for each, signed (Standard Webhooks).
    const verifier = new Webhook(secret)
    for (const [type, id] of [
      ['refund.created', full.body.id],
      ['refund.created', partial.body.id],
      ['refund.paid', full.body.id],
      ['refund.paid', partial.body.id],
    ]) {
      const c = await receiver.waitFor((x) => x.body.includes(`"${type}"`) && x.body.includes(id), 10_000)
      const event = verifier.verify(c.body, c.headers) as { type: string; data: Record<string, unknown> }
      expect(event).toMatchObject({ type, data: { id, object: 'refund' } })
      if (type === 'refund.paid') expect(event.data.transaction).toMatch(/^0x/)
    }
  })

  it('an over-refund, a second full refund, a pending payment and a reused key are refused and change nothing', async () => {
    const pending = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 1, description: 'unpaid' },
    })
    const before = await snapshot()
    const refuse = async (body: Record<string, unknown>, headers: Record<string, string> = {}) => {
      const r = await svc.api('/api/v1/refunds', { key: merchant.key, body, headers })
      return { status: r.status, code: r.body.error?.code, message: r.body.error?.message as string }
    }
    const over = await refuse({ payment_id: b.id, amount: 0.8 })
    expect(over).toMatchObject({ status: 400, code: 'invalid_parameter' })
    expect(over.message).toMatch(/refundable on pay_\w+: 0\.750001 /)
    expect(await refuse({ payment_id: a.id })).toMatchObject({ status: 400, code: 'invalid_parameter' })
    const notPaid = await refuse({ payment_id: pending.body.id })
    expect(notPaid).toMatchObject({ status: 409, code: 'invalid_state' })
    expect(notPaid.message).toMatch(/is pending/)
    expect(await refuse({ payment_id: 'pay_nope' })).toMatchObject({ status: 404, code: 'not_found' })
    expect(await refuse({ payment_id: b.id, call_id: 'call_x' })).toMatchObject({ status: 400 })
    expect(await refuse({ payment_id: b.id, amount: -1 })).toMatchObject({ status: 400 })
    // The key of the full refund again: the same answer replayed (no second refund), or 409 with another body.
    const replay = await svc.api('/api/v1/refunds', {
      key: merchant.key,
      body: { payment_id: a.id, reason: 'order canceled' },
      headers: { 'idempotency-key': 'refund-a' },
    })
    expect(replay.status).toBe(201)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(await refuse({ payment_id: b.id, amount: 0.1 }, { 'idempotency-key': 'refund-a' })).toMatchObject({
      status: 409,
      code: 'idempotency_key_reused',
    })
    // Everything was paid out: the merchant's unpaid balance cannot cover its part of the rest of b.
    const uncovered = await refuse({ payment_id: b.id, amount: 0.75 })
    expect(uncovered).toMatchObject({ status: 409, code: 'invalid_state' })
    expect(uncovered.message).toMatch(/unpaid balance/)
    expect(await snapshot()).toEqual(before)
  })

  it("GET /account's pending drops the moment a refund is booked, though it was read just before", async () => {
    const payer = await fundedAccount(10_000_000n)
    const paid = await paidPayment(payer, 1)
    const account = () => svc.api('/api/v1/account', { key: merchant.key })
    const before = await account()
    expect(before.status).toBe(200)
    const refund = await svc.api('/api/v1/refunds', { key: merchant.key, body: { payment_id: paid.id } })
    expect(refund.status).toBe(201)
    const after = await account()
    const debit = BigInt(refund.body.owner_debit_atomic)
    expect(debit).toBeGreaterThan(0n)
    expect(BigInt(after.body.balance.pending.amount_atomic)).toBe(
      BigInt(before.body.balance.pending.amount_atomic) - debit,
    )
    expect(after.body.balance.pending.amount_atomic).toBe((await balance()).pending_atomic.toString())
  })
})
