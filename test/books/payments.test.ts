// The payment transitions of src/books/payments.ts: an illegal move changes nothing and says why, and the
// unique figures are reserved atomically, held after a payment closes, and refused when none is left.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cancelPayment, expireDuePayments, MAX_FIGURE_OFFSET_ATOMIC } from '../../src/books/payments.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

const view = () => ({
  publicUrl: svc.url,
  network: 'local',
  chainId: svc.chain.chainId,
  treasury: svc.chain.treasury,
  usdcAddress: svc.chain.usdc.address,
})

async function create(amount: number, description = 'books') {
  const r = await svc.api('/api/v1/payments', { key: merchant.key, body: { amount, description } })
  if (r.status !== 201) throw new Error(`create payment: ${r.status} ${r.text}`)
  return r.body as { id: string; payment_url: string; amount_requested_atomic: string }
}

/** Everything a transition could have touched, to compare before and after. */
async function snapshot(id: string) {
  const [p] =
    await svc.sql`SELECT status, amount_received_atomic, amount_requested_atomic FROM payments WHERE id = ${id}`
  const timeline = await svc.sql`SELECT type FROM payment_timeline WHERE payment_id = ${id} ORDER BY id`
  const ledger =
    await svc.sql`SELECT kind, amount_atomic FROM ledger_entries WHERE source_id = ${id} ORDER BY id`
  const events = await svc.sql`SELECT type FROM events WHERE data->>'id' = ${id} ORDER BY created_at, id`
  const figures =
    await svc.sql`SELECT amount_atomic, held_until IS NULL AS open FROM checkout_amounts WHERE payment_id = ${id}`
  return { p, timeline, ledger, events, figures }
}

beforeAll(async () => {
  svc = await startTestService({ overrides: { jobs: { enabled: false } } })
  payer = await fundedAccount(100_000_000n)
  merchant = await registerMerchant(svc)
})
afterAll(() => svc?.stop())

describe('illegal transitions change nothing', () => {
  it('cancel of a paid payment: invalid_state, nothing written', async () => {
    const p = await create(2)
    const hash = await payUsdc(payer, svc.chain.treasury, 2_000_000n)
    const paid = await fetch(p.payment_url, { method: 'POST', headers: { 'x-payment': hash } })
    expect(paid.status).toBe(200)
    const before = await snapshot(p.id)
    const outcome = await cancelPayment(svc.sql, { accountId: merchant.account.id, id: p.id, view: view() })
    expect(outcome).toMatchObject({ kind: 'invalid_state', payment: { status: 'paid' } })
    expect(await snapshot(p.id)).toEqual(before)
    const api = await svc.api(`/api/v1/payments/${p.id}/cancel`, { key: merchant.key, method: 'POST' })
    expect(api.status).toBe(409)
    expect(api.body.error.message).toContain('is paid; only a pending payment can be canceled')
  })

  it('cancel of another account’s payment: not_found, nothing written', async () => {
    const p = await create(3)
    const before = await snapshot(p.id)
    const outcome = await cancelPayment(svc.sql, { accountId: 'acct_someoneelse', id: p.id, view: view() })
    expect(outcome).toEqual({ kind: 'not_found' })
    expect(await snapshot(p.id)).toEqual(before)
  })

  it('expiry leaves paid, canceled and not-yet-due payments alone', async () => {
    const open = await create(4)
    const canceled = await create(4)
    await cancelPayment(svc.sql, { accountId: merchant.account.id, id: canceled.id, view: view() })
    const before = [await snapshot(open.id), await snapshot(canceled.id)]
    // Past due but canceled: the precondition (status = 'pending') does not hold.
    await svc.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${canceled.id}`
    expect(await expireDuePayments(svc.sql, { view: view() })).toBe(0)
    expect([await snapshot(open.id), await snapshot(canceled.id)]).toEqual(before)
  })
})

describe('figures', () => {
  it('twenty payments of one price created at once get twenty different figures', async () => {
    const created = await Promise.all(Array.from({ length: 20 }, (_, i) => create(9, `burst ${i}`)))
    const figures = created.map((p) => BigInt(p.amount_requested_atomic))
    expect(new Set(figures).size).toBe(20)
    for (const f of figures) {
      expect(f).toBeGreaterThan(9_000_000n)
      expect(f).toBeLessThanOrEqual(9_000_000n + MAX_FIGURE_OFFSET_ATOMIC)
    }
  })

  it('a closed payment keeps its figure for the hold; after it, the figure is free again', async () => {
    const a = await create(11)
    await cancelPayment(svc.sql, { accountId: merchant.account.id, id: a.id, view: view() })
    const b = await create(11)
    expect(b.amount_requested_atomic).not.toBe(a.amount_requested_atomic)
    await svc.sql`UPDATE checkout_amounts SET held_until = now() - interval '1 second' WHERE payment_id = ${a.id}`
    const c = await create(11)
    expect(c.amount_requested_atomic).toBe(a.amount_requested_atomic)
  })

  it('a free figure among the lowest 32 is taken before any higher one, and a figure past its hold with it', async () => {
    const anchor = await create(15)
    // The lowest 32 figures of 15 USDC taken but 15.000017, and 15.000009 held past its hold.
    await svc.sql`
      INSERT INTO checkout_amounts (amount_atomic, payment_id)
      SELECT 15000000 + o, ${anchor.id} FROM generate_series(2, 32) o WHERE o <> 17
      ON CONFLICT (amount_atomic) DO NOTHING`
    await svc.sql`
      UPDATE checkout_amounts SET held_until = now() - interval '1 second' WHERE amount_atomic = 15000009`
    expect((await create(15)).amount_requested_atomic).toBe('15000009')
    expect((await create(15)).amount_requested_atomic).toBe('15000017')
    const beyond = BigInt((await create(15)).amount_requested_atomic)
    expect(beyond).toBeGreaterThan(15_000_032n)
  })

  it('the one figure of a price left free is found, however high it is', async () => {
    const anchor = await create(14)
    // Every figure of 14 USDC but 14.004321 taken (the lowest window and random looks find none free).
    await svc.sql`
      INSERT INTO checkout_amounts (amount_atomic, payment_id)
      SELECT 14000000 + o, ${anchor.id} FROM generate_series(1, ${Number(MAX_FIGURE_OFFSET_ATOMIC)}) o
      WHERE o <> 4321
      ON CONFLICT (amount_atomic) DO NOTHING`
    expect((await create(14)).amount_requested_atomic).toBe('14004321')
    const r = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 14, description: 'full' },
    })
    expect(r.status).toBe(503)
  })

  it('when every figure of a price is taken, creation is refused with 503 and nothing is written', async () => {
    const anchor = await create(13)
    // Take every other figure of 13 USDC for the anchor payment (as 9,998 other open payments would).
    await svc.sql`
      INSERT INTO checkout_amounts (amount_atomic, payment_id)
      SELECT 13000000 + o, ${anchor.id} FROM generate_series(1, ${Number(MAX_FIGURE_OFFSET_ATOMIC)}) o
      ON CONFLICT (amount_atomic) DO NOTHING`
    const before = (await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM payments`)[0]!.n
    const r = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 13, description: 'full' },
    })
    expect(r.status).toBe(503)
    expect(r.headers.get('retry-after')).toBe('60')
    expect(r.body.error).toMatchObject({ code: 'service_unavailable', param: 'amount' })
    const after = (await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM payments`)[0]!.n
    expect(after).toBe(before)
    // Another price is unaffected.
    expect((await create(13.5)).amount_requested_atomic).toBe('13500001')
  })
})
