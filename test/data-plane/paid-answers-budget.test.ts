// The budget of kept paid answers (x402.paid_answers.max_total_bytes): an answer that would pass it is marked
// not_stored, whichever process kept the others. The live total is read from the database at most once a
// second, plus what this process kept since: a store no longer sums every live answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PaidAnswers } from '../../src/data-plane/paid-answers.ts'
import { reservePaidAnswers } from '../../src/db/paid-answers.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'
import { captureLogs } from '../helpers/log-capture.ts'
import { waitFor } from '../helpers/wait-for.ts'

let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
let sql: Sql
beforeAll(async () => {
  db = await migratedDatabase({ max: 3 })
  sql = db.sql
})
afterAll(async () => {
  await db?.stop()
})

const settings = { ttlMs: 60_000, maxAnswerBytes: 100, maxTotalBytes: 250 }

async function keep(answers: PaidAnswers, id: string, bytes: number): Promise<string> {
  await reservePaidAnswers(sql, [
    { paymentId: id, digest: 'd', endpointId: 'ep_budget', ttlMs: settings.ttlMs },
  ])
  answers.store(id, 200, [['content-type', 'text/plain']], Buffer.alloc(bytes, 1))
  return waitFor(
    async () => {
      const [row] = await sql<{ state: string }[]>`SELECT state FROM paid_answers WHERE payment_id = ${id}`
      return row?.state === 'pending' ? undefined : row?.state
    },
    { timeoutMs: 5_000, what: `the answer of ${id} written` },
  )
}

describe('the budget of kept paid answers', () => {
  it("keeps answers until the budget is spent, counting this process's at once and the others' once read", async () => {
    const one = new PaidAnswers(sql, captureLogs().logger, settings)
    const other = new PaidAnswers(sql, captureLogs().logger, settings)
    // 100 + 100 kept; a third 100 would pass 250, even sent before any new read of the table.
    expect(await keep(one, 'budget_id_0000001', 100)).toBe('stored')
    expect(await keep(one, 'budget_id_0000002', 100)).toBe('stored')
    expect(await keep(one, 'budget_id_0000003', 100)).toBe('not_stored')
    expect(await keep(one, 'budget_id_0000004', 50)).toBe('stored')
    // Another process reads the table (its first store): the 250 bytes kept by the first are counted.
    expect(await keep(other, 'budget_id_0000005', 1)).toBe('not_stored')
    const [row] = await sql<{ total: string }[]>`
      SELECT sum(bytes)::text AS total FROM paid_answers WHERE state = 'stored'`
    expect(Number(row!.total)).toBe(250)
  })
})
