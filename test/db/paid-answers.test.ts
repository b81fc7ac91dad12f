// The payment-identifier's reservations and kept answers, a group at a time (one statement each, as the
// data plane's group commit sends them): each request answered as if alone, an identifier twice in one group
// reserved once, an expired identifier taken over, answers kept or marked not_stored only while pending.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { readPaidAnswer, reservePaidAnswers, storePaidAnswers } from '../../src/db/paid-answers.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined

beforeAll(async () => {
  db = await migratedDatabase({ max: 2 })
  sql = db.sql
})
afterAll(() => db?.stop())

const ask = (paymentId: string, digest = 'd1') => ({ paymentId, digest, endpointId: 'ep_1', ttlMs: 60_000 })

it('reserves a group in one statement, each answered as if alone', async () => {
  // One already kept, one expired (free again), one twice in the group, one new.
  await reservePaidAnswers(sql, [ask('kept_aaaaaaaaaaaaaa'), ask('expired_aaaaaaaaaaa')])
  await storePaidAnswers(sql, [
    {
      paymentId: 'kept_aaaaaaaaaaaaaa',
      status: 200,
      headers: [['x-a', '1']],
      body: Buffer.from('hi'),
      keep: true,
    },
  ])
  await sql`UPDATE paid_answers SET expires_at = now() - interval '1 second' WHERE payment_id = 'expired_aaaaaaaaaaa'`
  const out = await reservePaidAnswers(sql, [
    ask('kept_aaaaaaaaaaaaaa'),
    ask('new_aaaaaaaaaaaaaaa'),
    ask('expired_aaaaaaaaaaa', 'd2'),
    ask('new_aaaaaaaaaaaaaaa'),
  ])
  expect(out[0]).toMatchObject({
    reserved: false,
    answer: { state: 'stored', status: 200, headers: [['x-a', '1']] },
  })
  expect((out[0] as { answer: { body: Buffer } }).answer.body.toString()).toBe('hi')
  expect(out[1]).toEqual({ reserved: true })
  expect(out[2]).toEqual({ reserved: true })
  // The twin meets its first's reservation: in progress, as on another connection.
  expect(out[3]).toMatchObject({ reserved: false, answer: { state: 'pending', payment_digest: 'd1' } })
  expect(await readPaidAnswer(sql, 'expired_aaaaaaaaaaa')).toMatchObject({
    state: 'pending',
    payment_digest: 'd2',
  })
})

it('keeps a group of answers in one statement; over the budget, not_stored; only while pending', async () => {
  await reservePaidAnswers(sql, [ask('store_aaaaaaaaaaaaa'), ask('budget_aaaaaaaaaaaa')])
  const body = Buffer.from([0, 1, 2, 255])
  await storePaidAnswers(sql, [
    { paymentId: 'store_aaaaaaaaaaaaa', status: 201, headers: [['content-type', 'x']], body, keep: true },
    { paymentId: 'budget_aaaaaaaaaaaa', status: 200, headers: [], body, keep: false },
  ])
  const kept = await readPaidAnswer(sql, 'store_aaaaaaaaaaaaa')
  expect(kept).toMatchObject({ state: 'stored', status: 201, headers: [['content-type', 'x']] })
  expect(kept!.body!.equals(body)).toBe(true)
  expect(await readPaidAnswer(sql, 'budget_aaaaaaaaaaaa')).toMatchObject({
    state: 'not_stored',
    status: 200,
    body: null,
  })
  // A second store of a kept answer changes nothing.
  await storePaidAnswers(sql, [
    { paymentId: 'store_aaaaaaaaaaaaa', status: 500, headers: [], body: Buffer.from('x'), keep: true },
  ])
  expect(await readPaidAnswer(sql, 'store_aaaaaaaaaaaaa')).toMatchObject({ status: 201 })
})
