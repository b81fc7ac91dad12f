import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

async function createPayment(body: Record<string, unknown>, key = merchant.key) {
  const r = await svc.api('/api/v1/payments', { key, body })
  if (r.status !== 201) throw new Error(`create payment: ${r.status} ${r.text}`)
  return r.body as {
    id: string
    payment_url: string
    amount_atomic: string
    amount_requested_atomic: string
    created_at: string
  }
}

/** What an agent does: POST /pay/:id with the transaction hash. */
async function payWith(id: string, hash: string) {
  const r = await fetch(`${svc.url}/pay/${id}`, {
    method: 'POST',
    headers: { 'x-payment': hash, accept: 'application/json' },
  })
  return { status: r.status, body: await r.json() }
}

async function getPayment(id: string) {
  const r = await svc.api(`/api/v1/payments/${id}`, { key: merchant.key })
  expect(r.status).toBe(200)
  return r.body
}

async function eventsOf(paymentId: string) {
  return svc.sql<{ type: string; data: any }[]>`
    SELECT type, data FROM events WHERE data->>'id' = ${paymentId} ORDER BY created_at, id`
}

async function ledgerOf(paymentId: string, proofs: string[] = []) {
  const keys = proofs.map((h) => `tx:${h.toLowerCase()}`)
  return svc.sql<{ kind: string; wallet: string | null; amount_atomic: bigint }[]>`
    SELECT kind, wallet, amount_atomic FROM ledger_entries
    WHERE (source_type = 'payment' AND source_id = ${paymentId}) OR (source_type = 'claim' AND source_id = ANY(${keys}))
    ORDER BY kind, id`
}

async function claimsOf(paymentId: string) {
  return svc.sql<{ proof_key: string; status: string; amount_atomic: bigint; payer: string }[]>`
    SELECT proof_key, status, amount_atomic, payer FROM claims
    WHERE target_type = 'payment' AND target_id = ${paymentId} ORDER BY claimed_at, proof_key`
}

beforeAll(async () => {
  // The sweeper runs when a test asks (runNow), not on its own timer.
  svc = await startTestService({
    // The transfers are mined before they are shown, so the wait only matters when a loaded machine's
    // anvil answers late; 1.5 s ran out once in a full CI pass (a 402 payment_pending).
    overrides: { verify: { wait_ms: 8000 }, jobs: { expiry_interval_ms: 3_600_000 } },
  })
  payer = await fundedAccount(1_000_000_000n)
  merchant = await registerMerchant(svc)
})
afterAll(() => svc?.stop())

describe('the seed sample, end to end', () => {
  it('creates, reads back, pays with a transaction hash, records payment.received once and the exact ledger', async () => {
    const created = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 100, description: 'Order #123' },
    })
    expect(created.status).toBe(201)
    const p = created.body
    expect(p).toMatchObject({
      object: 'payment',
      status: 'pending',
      amount: 100,
      amount_atomic: '100000000',
      amount_received: 0,
      currency: 'USDC',
      description: 'Order #123',
      metadata: {},
      recipient: svc.chain.treasury,
      network: 'local',
      chain_id: svc.chain.chainId,
      asset: svc.chain.usdc.address,
      paid_at: null,
      transaction: null,
      payer: null,
    })
    expect(p.id).toMatch(/^pay_/)
    expect(p.payment_url).toBe(`${svc.url}/pay/${p.id}`)
    expect(Date.parse(p.expires_at) - Date.parse(p.created_at)).toBe(3_600_000)

    const read = await getPayment(p.id)
    expect(read).toMatchObject({ id: p.id, status: 'pending', amount_atomic: '100000000' })
    expect(read.timeline).toEqual([
      {
        type: 'created',
        created_at: p.created_at,
        amount_atomic: '100000000',
        amount_requested_atomic: p.amount_requested_atomic,
      },
    ])
    // The first line is the payment row itself: a creation stores no timeline line.
    const stored = await svc.sql`SELECT 1 FROM payment_timeline WHERE payment_id = ${p.id}`
    expect(stored).toHaveLength(0)

    // An agent asks the payment URL for JSON: the same 402 requirement as a metered call.
    const challenge = await fetch(p.payment_url, { headers: { accept: 'application/json' } })
    expect(challenge.status).toBe(402)
    const requirement = await challenge.json()
    // The price plus the smallest free offset: the figure that tells this payment's transfer apart.
    expect(requirement).toMatchObject({
      error: 'payment_required',
      price: 100.000001,
      price_atomic: '100000001',
      recipient: svc.chain.treasury,
      currency: 'USDC',
      asset: svc.chain.usdc.address,
      network: 'local',
      chain_id: svc.chain.chainId,
      payment_id: p.id,
    })
    // Beside the figure, x402 `exact` for the price due (the offset only tags plain transfers), in the
    // body (v1) and in PAYMENT-REQUIRED (v2).
    expect(requirement.accepts).toMatchObject([{ scheme: 'exact', maxAmountRequired: '100000000' }])
    const v2 = JSON.parse(Buffer.from(challenge.headers.get('payment-required')!, 'base64').toString())
    expect(v2).toMatchObject({ x402Version: 2, accepts: [{ scheme: 'exact', amount: '100000000' }] })

    // A hash payer who sends the round price pays it too (the offset is a tag, never owed).
    const hash = await payUsdc(payer, svc.chain.treasury, 100_000_000n)
    const paid = await payWith(p.id, hash)
    expect(paid.status).toBe(200)
    expect(paid.body).toMatchObject({ id: p.id, status: 'paid', transaction: hash, payer: payer.address })

    const after = await getPayment(p.id)
    expect(after).toMatchObject({
      status: 'paid',
      transaction: hash,
      payer: payer.address,
      amount_received: 100,
      amount_received_atomic: '100000000',
      amount_surplus_atomic: '0',
    })
    expect(Date.parse(after.paid_at)).toBeGreaterThan(0)
    expect(after.timeline.map((t: any) => t.type)).toEqual(['created', 'proof_applied', 'paid'])
    expect(after.timeline[1]).toMatchObject({ transaction: hash, amount_atomic: '100000000' })

    // Presented again: already used, nothing changes; GET answers 200 with the status now.
    const replay = await payWith(p.id, hash)
    expect(replay.status).toBe(200)
    expect((await fetch(p.payment_url, { headers: { accept: 'application/json' } })).status).toBe(200)

    const events = await eventsOf(p.id)
    expect(events.map((e) => e.type)).toEqual(['payment.received'])
    expect(events[0]!.data).toMatchObject({ id: p.id, status: 'paid', proof: { transaction: hash } })
    expect(await ledgerOf(p.id)).toEqual([
      { kind: 'fee', wallet: null, amount_atomic: 5_000_000n },
      { kind: 'owner_share', wallet: merchant.wallet, amount_atomic: 95_000_000n },
    ])
    expect(await claimsOf(p.id)).toEqual([
      { proof_key: `tx:${hash}`, status: 'applied', amount_atomic: 100_000_000n, payer: payer.address },
    ])
  })

  it('lists payments newest first with a cursor and a status filter', async () => {
    const m = await registerMerchant(svc)
    const a = await createPayment({ amount: 1, description: 'a' }, m.key)
    const b = await createPayment({ amount: 2, description: 'b' }, m.key)
    const c = await createPayment({ amount: 3, description: 'c' }, m.key)
    await svc.api(`/api/v1/payments/${b.id}/cancel`, { key: m.key, method: 'POST' })
    const first = await svc.api('/api/v1/payments?limit=2', { key: m.key })
    expect(first.body.data.map((p: any) => p.id)).toEqual([c.id, b.id])
    expect(first.body.has_more).toBe(true)
    const next = await svc.api(`/api/v1/payments?limit=2&starting_after=${b.id}`, { key: m.key })
    expect(next.body).toMatchObject({ data: [{ id: a.id }], has_more: false })
    const canceled = await svc.api('/api/v1/payments?status=canceled', { key: m.key })
    expect(canceled.body.data.map((p: any) => p.id)).toEqual([b.id])
    // Another merchant's payment is a 404, like a missing one.
    expect((await svc.api(`/api/v1/payments/${a.id}`, { key: merchant.key })).status).toBe(404)
  })
})

describe('idempotency', () => {
  it('same key + same body → the same payment, once; same key + another body → 409', async () => {
    const key = `idem-${Date.now()}`
    const body = { amount: '12.5', description: 'Order #9', metadata: { order: '9' } }
    const one = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body,
      headers: { 'idempotency-key': key },
    })
    const two = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body,
      headers: { 'idempotency-key': key },
    })
    expect(one.status).toBe(201)
    expect(two.status).toBe(201)
    expect(two.body.id).toBe(one.body.id)
    expect(two.headers.get('idempotent-replayed')).toBe('true')
    const rows = await svc.sql`SELECT id FROM payments WHERE description = 'Order #9'`
    expect(rows).toHaveLength(1)
    const other = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { ...body, amount: 13 },
      headers: { 'idempotency-key': key },
    })
    expect(other.status).toBe(409)
    expect(other.body.error.code).toBe('idempotency_key_reused')
  })
})

describe('bad input', () => {
  it.each([
    ['amount 0', { amount: 0, description: 'x' }, 'amount'],
    ['negative amount', { amount: -5, description: 'x' }, 'amount'],
    ['7 decimals', { amount: 0.0000001, description: 'x' }, 'amount'],
    ['7 decimals as text', { amount: '1.1234567', description: 'x' }, 'amount'],
    ['string garbage', { amount: 'ten dollars', description: 'x' }, 'amount'],
    ['amount as object', { amount: { v: 1 }, description: 'x' }, 'amount'],
    ['above the maximum', { amount: 1_000_001, description: 'x' }, 'amount'],
    ['missing amount', { description: 'x' }, 'amount'],
    ['missing description', { amount: 1 }, 'description'],
    ['empty description', { amount: 1, description: '   ' }, 'description'],
    ['huge description', { amount: 1, description: 'x'.repeat(1001) }, 'description'],
    ['unknown field', { amount: 1, description: 'x', currency: 'EUR' }, 'currency'],
    ['metadata not strings', { amount: 1, description: 'x', metadata: { n: 1 } }, 'metadata.n'],
    ['expires_in too short', { amount: 1, description: 'x', expires_in: 5 }, 'expires_in'],
    ['expires_in fractional', { amount: 1, description: 'x', expires_in: 90.5 }, 'expires_in'],
    [
      'success_url not http',
      { amount: 1, description: 'x', success_url: 'javascript:alert(1)' },
      'success_url',
    ],
  ])('POST /payments refuses %s with 400 naming the field', async (_name, body, param) => {
    const r = await svc.api('/api/v1/payments', { key: merchant.key, body })
    expect(r.status).toBe(400)
    expect(r.body.error.param).toBe(param)
    expect(r.body.error.message).toContain(param)
  })

  it('refuses bad list, read and cancel parameters, and answers without a key with 401', async () => {
    const list = await svc.api('/api/v1/payments?status=lost', { key: merchant.key })
    expect([list.status, list.body.error.param]).toEqual([400, 'status'])
    const limit = await svc.api('/api/v1/payments?limit=0', { key: merchant.key })
    expect([limit.status, limit.body.error.param]).toEqual([400, 'limit'])
    expect((await svc.api('/api/v1/payments/pay_nope', { key: merchant.key })).status).toBe(404)
    const p = await createPayment({ amount: 1, description: 'x' })
    const cancelBody = await svc.api(`/api/v1/payments/${p.id}/cancel`, {
      key: merchant.key,
      body: { reason: 'x' },
    })
    expect([cancelBody.status, cancelBody.body.error.param]).toEqual([400, 'reason'])
    expect((await svc.api('/api/v1/payments')).status).toBe(401)
    expect((await svc.api(`/api/v1/payments/${p.id}/cancel`, { method: 'POST' })).status).toBe(401)
  })

  it('refuses a bad proof on /pay/:id with a 402 reason, and unknown payments with 404', async () => {
    const p = await createPayment({ amount: 1, description: 'x' })
    const bad = await payWith(p.id, 'not-a-hash')
    expect([bad.status, bad.body.error]).toEqual([402, 'invalid_proof'])
    const unknown = await fetch(`${svc.url}/pay/pay_doesnotexist`, {
      headers: { accept: 'application/json' },
    })
    expect(unknown.status).toBe(404)
    expect((await unknown.json()).error.code).toBe('payment_not_found')
    const html = await fetch(`${svc.url}/pay/pay_doesnotexist`, { headers: { accept: 'text/html' } })
    expect(html.status).toBe(404)
    expect(await html.text()).toContain('Payment not found')
    expect((await fetch(`${svc.url}/pay/${p.id}`, { method: 'DELETE' })).status).toBe(405)
  })
})

describe('proofs that race, fall short, overshoot or come late', () => {
  it('two full proofs racing for one payment: one pays it, the other is scheduled for refund', async () => {
    const p = await createPayment({ amount: 5, description: 'race' })
    const other = await fundedAccount(100_000_000n)
    const [h1, h2] = await Promise.all([
      payUsdc(payer, svc.chain.treasury, 5_000_000n),
      payUsdc(other, svc.chain.treasury, 5_000_000n),
    ])
    const results = await Promise.all([payWith(p.id, h1), payWith(p.id, h2)])
    const statuses = results.map((r) => r.status).sort()
    expect(statuses).toEqual([200, 409])
    const loser = results.find((r) => r.status === 409)!
    expect(loser.body.error.code).toBe('payment_already_paid')
    const after = await getPayment(p.id)
    expect(after).toMatchObject({ status: 'paid', amount_received_atomic: '5000000' })
    const winnerHash = after.transaction as string
    const loserHash = winnerHash === h1 ? h2 : h1
    const loserPayer = winnerHash === h1 ? other.address : payer.address
    const claims = await claimsOf(p.id)
    expect(claims.map((c) => [c.proof_key, c.status]).sort()).toEqual(
      [
        [`tx:${winnerHash}`, 'applied'],
        [`tx:${loserHash}`, 'refund_due'],
      ].sort(),
    )
    expect(await ledgerOf(p.id, [loserHash])).toEqual([
      { kind: 'fee', wallet: null, amount_atomic: 250_000n },
      { kind: 'owner_share', wallet: merchant.wallet, amount_atomic: 4_750_000n },
      { kind: 'refund', wallet: loserPayer, amount_atomic: 5_000_000n },
    ])
    const types = (await eventsOf(p.id)).map((e) => e.type).sort()
    expect(types).toEqual(['payment.received', 'payment.refund_scheduled'])
  })

  it('underpay then top up: pending with amount_received, then paid once the sum covers it', async () => {
    const p = await createPayment({ amount: 10, description: 'partial' })
    const h1 = await payUsdc(payer, svc.chain.treasury, 4_000_000n)
    const first = await payWith(p.id, h1)
    expect(first.status).toBe(402)
    // What is left (10.000001 − 4), under a figure of its own so a plain top-up is matched too.
    expect(first.body).toMatchObject({
      error: 'underpaid',
      price: 6.000001,
      price_atomic: '6000001',
      amount_received_atomic: '4000000',
    })
    const mid = await getPayment(p.id)
    expect(mid).toMatchObject({
      status: 'pending',
      amount_received_atomic: '4000000',
      amount_due_atomic: '6000001',
    })
    // Held, not booked: nothing in the ledger until the payment completes (or is refunded).
    expect(await ledgerOf(p.id)).toEqual([])
    const status = await (await fetch(`${svc.url}/pay/${p.id}/status`)).json()
    expect(status).toMatchObject({ status: 'pending', amount_due_atomic: '6000001' })

    const h2 = await payUsdc(payer, svc.chain.treasury, 6_000_000n)
    const second = await payWith(p.id, h2)
    expect(second.status).toBe(200)
    const after = await getPayment(p.id)
    expect(after).toMatchObject({ status: 'paid', amount_received_atomic: '10000000', transaction: h2 })
    expect(after.timeline.map((t: any) => t.type)).toEqual([
      'created',
      'proof_applied',
      'proof_applied',
      'paid',
    ])
    expect(after.timeline.slice(1, 3).map((t: any) => t.transaction)).toEqual([h1, h2])
    // The top-up reserved a figure of its own; the created line, stored just before, shows the first one.
    const created =
      await svc.sql`SELECT 1 FROM payment_timeline WHERE payment_id = ${p.id} AND type = 'created'`
    expect(created).toHaveLength(1)
    expect(after.timeline[0]).toEqual({
      type: 'created',
      created_at: p.created_at,
      amount_atomic: '10000000',
      amount_requested_atomic: p.amount_requested_atomic,
    })
    expect(await ledgerOf(p.id)).toEqual([
      { kind: 'fee', wallet: null, amount_atomic: 500_000n },
      { kind: 'owner_share', wallet: merchant.wallet, amount_atomic: 9_500_000n },
    ])
    expect((await eventsOf(p.id)).map((e) => e.type)).toEqual(['payment.underpaid', 'payment.received'])
  })

  it('overpay: paid with the real amount_received, the surplus over the requested figure owed back', async () => {
    const p = await createPayment({ amount: 1.5, description: 'over' })
    // A round 2 USDC, which no figure of this file's payments is (each price's figures start one base unit
    // above it): 2.000001 is the figure the canceled payment of 2 USDC above holds, and the watcher matched a
    // transfer of it to that payment whenever it polled before this proof was presented (first claim wins).
    const hash = await payUsdc(payer, svc.chain.treasury, 2_000_000n)
    const paid = await payWith(p.id, hash)
    expect([paid.status, paid.body]).toMatchObject([200, { status: 'paid' }])
    const after = await getPayment(p.id)
    expect(after).toMatchObject({
      status: 'paid',
      amount: 1.5,
      amount_requested_atomic: '1500001',
      amount_received: 2,
      amount_received_atomic: '2000000',
      amount_surplus_atomic: '499999',
    })
    expect(after.timeline.at(-2)).toMatchObject({ type: 'paid', amount_surplus_atomic: '499999' })
    // 95% of the requested 1.500001 rounded down to the base unit; the fee is the rest; the surplus refunded.
    expect(await ledgerOf(p.id, [hash])).toEqual([
      { kind: 'fee', wallet: null, amount_atomic: 75_001n },
      { kind: 'owner_share', wallet: merchant.wallet, amount_atomic: 1_425_000n },
      { kind: 'refund', wallet: payer.address, amount_atomic: 499_999n },
    ])
  })

  it('pay after expiry: the proof is claimed and scheduled for refund, the status stays expired', async () => {
    const p = await createPayment({ amount: 3, description: 'late' })
    await svc.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${p.id}`
    const hash = await payUsdc(payer, svc.chain.treasury, 3_000_000n)
    const r = await payWith(p.id, hash)
    expect(r.status).toBe(410)
    expect(r.body).toMatchObject({
      error: { code: 'payment_expired' },
      refund: { status: 'scheduled', transaction: hash },
    })
    const after = await getPayment(p.id)
    expect(after).toMatchObject({ status: 'expired', amount_received_atomic: '0', paid_at: null })
    expect(after.timeline.map((t: any) => t.type)).toEqual(['created', 'expired', 'refund_scheduled'])
    expect(await claimsOf(p.id)).toEqual([
      { proof_key: `tx:${hash}`, status: 'refund_due', amount_atomic: 3_000_000n, payer: payer.address },
    ])
    expect(await ledgerOf(p.id, [hash])).toEqual([
      { kind: 'refund', wallet: payer.address, amount_atomic: 3_000_000n },
    ])
    // One transaction: same created_at, so compare as a set.
    expect((await eventsOf(p.id)).map((e) => e.type).sort()).toEqual([
      'payment.expired',
      'payment.refund_scheduled',
    ])
    // The same proof again is spent, not refunded twice.
    const again = await payWith(p.id, hash)
    expect(again.status).toBe(410)
    expect(await ledgerOf(p.id, [hash])).toHaveLength(1)
  })

  it('a proof used by another payment is refused with proof_already_used', async () => {
    const a = await createPayment({ amount: 1, description: 'a' })
    const b = await createPayment({ amount: 1, description: 'b' })
    const hash = await payUsdc(payer, svc.chain.treasury, 1_000_000n)
    expect((await payWith(a.id, hash)).status).toBe(200)
    const r = await payWith(b.id, hash)
    expect([r.status, r.body.error]).toEqual([402, 'proof_already_used'])
    expect((await getPayment(b.id)).status).toBe('pending')
  })
})

describe('expiry and cancel', () => {
  it('the sweeper expires a pending payment, emits payment.expired and refunds what it held', async () => {
    const p = await createPayment({ amount: 8, description: 'sweep' })
    const untouched = await createPayment({ amount: 8, description: 'still open' })
    const hash = await payUsdc(payer, svc.chain.treasury, 2_000_000n)
    expect((await payWith(p.id, hash)).status).toBe(402)
    await svc.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${p.id}`
    await svc.jobs.runNow('payment-expiry')
    const after = await getPayment(p.id)
    expect(after).toMatchObject({ status: 'expired', amount_received_atomic: '2000000' })
    const events = await eventsOf(p.id)
    expect(events.map((e) => e.type).sort()).toEqual([
      'payment.expired',
      'payment.refund_scheduled',
      'payment.underpaid',
    ])
    expect(events.find((e) => e.type === 'payment.expired')!.data).toMatchObject({
      id: p.id,
      status: 'expired',
    })
    expect(await ledgerOf(p.id, [hash])).toEqual([
      { kind: 'refund', wallet: payer.address, amount_atomic: 2_000_000n },
    ])
    expect((await getPayment(untouched.id)).status).toBe('pending')
    // Running again changes nothing.
    await svc.jobs.runNow('payment-expiry')
    expect((await eventsOf(p.id)).length).toBe(3)
    const page = await fetch(p.payment_url, { headers: { accept: 'text/html' } })
    expect(page.status).toBe(410)
    expect(await page.text()).toContain('This payment has expired')
  })

  it('cancel: pending → canceled (410 on the page); a second cancel is 409', async () => {
    const p = await createPayment({ amount: 2, description: 'cancel me' })
    const r = await svc.api(`/api/v1/payments/${p.id}/cancel`, { key: merchant.key, method: 'POST' })
    expect(r.status).toBe(200)
    expect(r.body).toMatchObject({ status: 'canceled' })
    expect(Date.parse(r.body.canceled_at)).toBeGreaterThan(0)
    const again = await svc.api(`/api/v1/payments/${p.id}/cancel`, { key: merchant.key, method: 'POST' })
    expect([again.status, again.body.error.code]).toEqual([409, 'invalid_state'])
    const json = await fetch(p.payment_url, { headers: { accept: 'application/json' } })
    expect(json.status).toBe(410)
    expect((await json.json()).error.code).toBe('payment_canceled')
  })
})

describe('checkout page', () => {
  it('serves a small page with the amount, recipient, QR code and a strict CSP', async () => {
    const p = await createPayment({
      amount: 42.5,
      description: 'Order <b>#7</b>',
      success_url: 'https://shop.example/ok',
    })
    const r = await fetch(p.payment_url, { headers: { accept: 'text/html' } })
    expect(r.status).toBe(200)
    expect(r.headers.get('content-type')).toContain('text/html')
    expect(r.headers.get('content-security-policy')).toContain("default-src 'none'")
    expect(r.headers.get('content-security-policy')).toContain("script-src 'self'")
    expect(r.headers.get('x-content-type-options')).toBe('nosniff')
    expect(r.headers.get('referrer-policy')).toBe('no-referrer')
    expect(r.headers.get('uwebsockets')).toBeNull()
    const html = await r.text()
    expect(html.length).toBeLessThan(40_000)
    expect(html).toContain('Acme Data')
    expect(html).toContain('Order &lt;b&gt;#7&lt;/b&gt;')
    expect(html).not.toContain('<b>#7')
    expect(html).toContain('42.500001')
    expect(html).toContain(svc.chain.treasury)
    expect(html).toMatch(/<svg[^>]+viewBox/)
    expect(html).toContain(
      `ethereum:${svc.chain.usdc.address}@${svc.chain.chainId}/transfer?address=${svc.chain.treasury}&amp;uint256=42500001`,
    )
    const svg = await fetch(`${svc.url}/pay/${p.id}/qr.svg`)
    expect(svg.headers.get('content-type')).toBe('image/svg+xml')
    expect(await svg.text()).toMatch(/^<svg[^>]+viewBox/)
    // The stylesheet and script are real files under content-hashed names, cached for a year.
    const css = html.match(/href="(\/pay\/assets\/page\.[0-9a-f]{12}\.css)"/)![1]!
    const js = html.match(/src="(\/pay\/assets\/page\.[0-9a-f]{12}\.js)"/)![1]!
    for (const path of [css, js]) {
      const a = await fetch(`${svc.url}${path}`)
      expect(a.status).toBe(200)
      expect(a.headers.get('cache-control')).toBe('public, max-age=31536000, immutable')
      expect(a.headers.get('x-content-type-options')).toBe('nosniff')
    }
    expect((await fetch(`${svc.url}/pay/assets/page.000000000000.css`)).status).toBe(404)
  })

  it('no `<html` or `<style` inside any .ts file of src/: markup lives in real files', async () => {
    const { readdirSync, readFileSync } = await import('node:fs')
    const root = new URL('../../src/', import.meta.url).pathname
    const offenders = (readdirSync(root, { recursive: true }) as string[])
      .filter((f) => f.endsWith('.ts'))
      .filter((f) => /<html|<style/i.test(readFileSync(`${root}${f}`, 'utf8')))
    expect(offenders).toEqual([])
  })
})
