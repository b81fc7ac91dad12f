// Payment creations that share a commit: each gets a figure of its own, the statements are fewer than the
// creations, a creation the database refuses fails alone, and a full price still answers figures_exhausted.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PaymentCreator } from '../../src/books/payment-creations.ts'
import type { NewPayment } from '../../src/books/payments.ts'
import { newId } from '../../src/ids.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
let accountId: string

beforeAll(async () => {
  svc = await startTestService({ overrides: { jobs: { enabled: false } } })
  accountId = (await registerMerchant(svc)).account.id
})
afterAll(() => svc?.stop())

function payment(amountAtomic: bigint, description = 'together'): NewPayment {
  return {
    id: newId('pay'),
    accountId,
    amountAtomic,
    description,
    metadata: { order: '1' },
    successUrl: null,
    cancelUrl: null,
    logoUrl: null,
    expiresInMs: 3_600_000,
  }
}

describe('payment creations sharing a commit', () => {
  it('200 at once, 150 of one price: each its own figure, in far fewer statements', async () => {
    const creator = new PaymentCreator(svc.sql, { batchMax: 64, concurrency: 1 })
    const asked = Array.from({ length: 200 }, (_, i) => payment(i < 150 ? 21_000_000n : 22_000_000n))
    const outcomes = await Promise.all(asked.map((p) => creator.create(p)))
    expect(outcomes.map((o) => o.kind)).toEqual(Array(200).fill('created'))
    const rows = outcomes.map((o) => (o.kind === 'created' ? o.payment : null)!)
    expect(rows.map((r) => r.id)).toEqual(asked.map((p) => p.id))
    const figures = rows.map((r) => r.amount_requested_atomic)
    expect(new Set(figures).size).toBe(200)
    for (const [i, r] of rows.entries()) {
      const price = i < 150 ? 21_000_000n : 22_000_000n
      expect(r.amount_atomic).toBe(price)
      expect(r.amount_requested_atomic).toBeGreaterThan(price)
      expect(r.amount_requested_atomic).toBeLessThanOrEqual(price + 9_999n)
      expect(r.metadata).toEqual({ order: '1' })
    }
    // Each figure is bound, open, to the payment that asks for it.
    const [bound] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM checkout_amounts c JOIN payments p ON p.id = c.payment_id
      WHERE p.id IN ${svc.sql(rows.map((r) => r.id))} AND c.amount_atomic = p.amount_requested_atomic
        AND c.held_until IS NULL`
    expect(bound!.n).toBe(200)
    // Grouped: the first statement goes alone, the rest wait for it and go in batches (plus second looks).
    expect(creator.statements).toBeLessThan(40)
    expect(creator.failedStatements).toBe(0)
  })

  it('a creation the database refuses fails alone, never the others of its statement', async () => {
    const creator = new PaymentCreator(svc.sql, { batchMax: 64, concurrency: 1 })
    // PostgreSQL refuses a NUL character in text; the first creation holds the rest back into one statement.
    const asked = Array.from({ length: 20 }, (_, i) =>
      payment(23_000_000n, i === 7 ? 'bad \u0000 byte' : 'ok'),
    )
    const outcomes = await Promise.allSettled(asked.map((p) => creator.create(p)))
    expect(outcomes.map((o) => o.status)).toEqual(asked.map((_, i) => (i === 7 ? 'rejected' : 'fulfilled')))
    const stored = await svc.sql`SELECT id FROM payments WHERE id IN ${svc.sql(asked.map((p) => p.id))}`
    expect(stored).toHaveLength(19)
    const [orphans] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM checkout_amounts WHERE payment_id = ${asked[7]!.id}`
    expect(orphans!.n).toBe(0)
  })

  it('a creation its statement cannot carry is made on its own, even when it went alone', async () => {
    // A lone surrogate cannot be spelled in the statement's JSON; as a parameter of its own it is stored (the
    // driver writes it as U+FFFD), as it was before creations shared a commit.
    const creator = new PaymentCreator(svc.sql, { batchMax: 64, concurrency: 1 })
    const outcome = await creator.create(payment(25_000_000n, 'half \ud800 pair'))
    expect(outcome.kind).toBe('created')
    expect(creator.failedStatements).toBe(1)
  })

  it('a price whose every figure is bound answers figures_exhausted, and binds nothing', async () => {
    const price = 24_000_000n
    await svc.sql`
      INSERT INTO checkout_amounts (amount_atomic, payment_id)
      SELECT ${price} + g, 'pay_filler' FROM generate_series(1, 9999) g`
    const creator = new PaymentCreator(svc.sql, { batchMax: 64, concurrency: 1 })
    const asked = [payment(price), payment(price)]
    const outcomes = await Promise.all(asked.map((p) => creator.create(p)))
    expect(outcomes).toEqual([{ kind: 'figures_exhausted' }, { kind: 'figures_exhausted' }])
    const stored = await svc.sql`SELECT id FROM payments WHERE id IN ${svc.sql(asked.map((p) => p.id))}`
    expect(stored).toHaveLength(0)
  })
})
