// Payments of one price created at once, each in its own database session: every one gets its own figure,
// and none is refused while figures are free. Before, every retry went for the same next figure, one session
// won each round, and a session that lost 20 rounds answered 503 "too many open payments of this amount"
// (4-7 of ~1,100 in the bench's payment-create run, 32 connections). Needs a server: PGlite is one session.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPayment } from '../../src/books/payments.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'

const SESSIONS = 10
const WORKERS = 32
const TOTAL = 2_000
let sql: Sql

describe.runIf(usingServer)('figures under contention', () => {
  beforeAll(async () => {
    sql = createSql((await freshDatabaseUrl())!, { max: SESSIONS })
    await migrate(sql)
    await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
              VALUES ('acct_fig', '0x1111111111111111111111111111111111111111', 'F', 'test')`
  })
  afterAll(() => sql?.end())

  const create = (i: number) =>
    createPayment(sql, {
      id: `pay_fig_${i}`,
      accountId: 'acct_fig',
      amountAtomic: 5_000_000n,
      description: 'rush',
      metadata: {},
      successUrl: null,
      cancelUrl: null,
      logoUrl: null,
      expiresInMs: 3_600_000,
    })

  it('the lowest free figure when uncontended', async () => {
    expect(await create(0)).toMatchObject({ kind: 'created' })
    const [f] = await sql<{ amount_atomic: bigint }[]>`
      SELECT amount_atomic FROM checkout_amounts WHERE payment_id = 'pay_fig_0'`
    expect(f!.amount_atomic).toBe(5_000_001n)
  })

  it(`${WORKERS} creators for ${TOTAL} payments on ${SESSIONS} sessions: all created, each with its own figure`, async () => {
    // As the bench's payment-create run: 32 clients creating back to back, on a 10-connection pool.
    let next = 1
    const refused: string[] = []
    const worker = async () => {
      while (next <= TOTAL) {
        const outcome = await create(next++)
        if (outcome.kind !== 'created') refused.push(outcome.kind)
      }
    }
    await Promise.all(Array.from({ length: WORKERS }, worker))
    expect(refused).toEqual([])
    const figures = await sql<{ amount_atomic: bigint }[]>`
      SELECT amount_atomic FROM checkout_amounts WHERE payment_id LIKE 'pay_fig_%' AND held_until IS NULL`
    expect(figures).toHaveLength(TOTAL + 1)
    expect(new Set(figures.map((f) => f.amount_atomic)).size).toBe(TOTAL + 1)
    for (const f of figures) {
      expect(f.amount_atomic).toBeGreaterThanOrEqual(5_000_001n)
      expect(f.amount_atomic).toBeLessThanOrEqual(5_009_999n)
    }
  })
})
