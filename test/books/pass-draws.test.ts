// Pass draws under concurrency: a wallet's uses are drawn exactly, a sign-in message is used once, a draw
// that lost the pass it picked to a concurrent draw takes the wallet's next pass instead of refusing, and
// the look for a draw whose answer was lost waits for that draw's statement if it is still running.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type DrawRequest,
  drawPassUse,
  drawTimePassUses,
  findOwnDraw,
  giveBackPassUse,
  recordPassDrawServed,
} from '../../src/books/passes.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase, usingServer } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const PAYER = '0x2222222222222222222222222222222222222222'

beforeAll(async () => {
  db = await migratedDatabase({ max: 3 })
  sql = db.sql
})
afterAll(async () => {
  await db?.stop()
})

let n = 0
/** A pass of `uses` calls on `endpoint`, expiring in `hours` (null: never). */
async function pass(endpoint: string, uses: number, hours: number | null): Promise<string> {
  const id = `pass_${++n}`
  await sql`
    INSERT INTO passes (id, proof_key, call_id, endpoint_id, account_id, payer, price_atomic, calls_total,
                        uses_left, expires_at)
    VALUES (${id}, ${`tx:${id}`}, ${`call_${id}`}, ${endpoint}, 'acct_passes', ${PAYER}, 1000, ${uses}, ${uses},
            ${hours === null ? sql`'infinity'::timestamptz` : sql`now() + ${hours} * interval '1 hour'`})`
  return id
}

/** A pass of time only on `endpoint`, ending in `hours`. */
async function timePass(endpoint: string, hours: number): Promise<string> {
  const id = `pass_${++n}`
  await sql`
    INSERT INTO passes (id, proof_key, call_id, endpoint_id, account_id, payer, price_atomic, calls_total,
                        uses_left, expires_at)
    VALUES (${id}, ${`tx:${id}`}, ${`call_${id}`}, ${endpoint}, 'acct_passes', ${PAYER}, 1000, NULL, NULL,
            now() + ${hours} * interval '1 hour')`
  return id
}

function draw(endpoint: string, nonce: string): DrawRequest {
  return {
    endpointId: endpoint,
    payer: PAYER,
    nonce,
    token: `tok_${nonce}`,
    nonceExpiresAt: new Date(Date.now() + 60_000),
  }
}

/**
 * A draw in a transaction left open once it has drawn (`expected`); the function returned commits it and
 * reports the draw's own failure, if any.
 */
async function drawHeldOpen(
  endpoint: string,
  nonce: string,
  expected: Record<string, unknown>,
): Promise<() => Promise<void>> {
  let commit!: () => void
  const held = new Promise<void>((r) => {
    commit = r
  })
  let settled!: () => void
  const drawnOrFailed = new Promise<void>((r) => {
    settled = r
  })
  const drawing = sql.begin(async (tx) => {
    try {
      expect(await drawPassUse(tx as unknown as Sql, draw(endpoint, nonce))).toMatchObject(expected)
    } finally {
      settled()
    }
    await held
  })
  // Awaited by the returned function; a failed draw is reported there, not as an unhandled rejection.
  drawing.catch(() => {})
  await drawnOrFailed
  return async () => {
    commit()
    await drawing
  }
}

async function usesLeft(id: string): Promise<number | null> {
  const [row] = await sql<{ uses_left: number | null }[]>`SELECT uses_left FROM passes WHERE id = ${id}`
  return row!.uses_left
}

describe('pass draws', () => {
  it('draws the soonest-expiring pass first, then the next, and never past their uses', async () => {
    const soon = await pass('ep_seq', 1, 1)
    const later = await pass('ep_seq', 1, null)
    expect(await drawPassUse(sql, draw('ep_seq', 'seq_1'))).toMatchObject({ ok: true, passId: soon })
    expect(await drawPassUse(sql, draw('ep_seq', 'seq_2'))).toMatchObject({ ok: true, passId: later })
    expect(await drawPassUse(sql, draw('ep_seq', 'seq_3'))).toEqual({ ok: false, reason: 'none' })
    expect(await usesLeft(soon)).toBe(0)
    expect(await usesLeft(later)).toBe(0)
  })

  it("records many draws' served calls in one statement, once each, never a given-back one", async () => {
    await pass('ep_served', 5, null)
    for (const n of ['served_1', 'served_2', 'served_3']) await drawPassUse(sql, draw('ep_served', n))
    expect(await giveBackPassUse(sql, { nonce: 'served_3' })).toBe(true)
    const served = ['served_1', 'served_2', 'served_3'].map((nonce) => ({
      nonce,
      receiptId: `rcpt_${nonce}`,
      upstreamStatus: 200,
      method: 'GET',
    }))
    expect(await recordPassDrawServed(sql, served)).toBe(2)
    // Again (a retry after a lost answer): nothing more.
    expect(await recordPassDrawServed(sql, served)).toBe(0)
    const rows = await sql<{ nonce: string; receipt_id: string | null }[]>`
      SELECT nonce, receipt_id FROM pass_draws WHERE nonce LIKE 'served_%' ORDER BY nonce`
    expect(rows.map((r) => [r.nonce, r.receipt_id])).toEqual([
      ['served_1', 'rcpt_served_1'],
      ['served_2', 'rcpt_served_2'],
      ['served_3', null],
    ])
  })

  it('a sign-in message is used once', async () => {
    await pass('ep_nonce', 5, null)
    expect(await drawPassUse(sql, draw('ep_nonce', 'once'))).toMatchObject({ ok: true })
    expect(await drawPassUse(sql, draw('ep_nonce', 'once'))).toEqual({ ok: false, reason: 'replayed' })
  })

  it('a draw looked for after its answer was lost: found when it committed, fenced when it did not', async () => {
    const p = await pass('ep_lost', 2, null)
    const committed = draw('ep_lost', 'lost_1')
    await drawPassUse(sql, committed)
    expect(await findOwnDraw(sql, committed)).toEqual({ kind: 'mine', passId: p })
    const never = draw('ep_lost', 'lost_2')
    expect(await findOwnDraw(sql, never)).toEqual({ kind: 'absent' })
    // Arriving late, that draw finds its message spent: it takes nothing.
    expect(await drawPassUse(sql, never)).toEqual({ ok: false, reason: 'replayed' })
    expect(await usesLeft(p)).toBe(1)
  })
})

describe('draws on passes of time, grouped', () => {
  it('draws each on its pass of time in one statement, a message once, and leaves a counted pass alone', async () => {
    const timed = await timePass('ep_group', 2)
    const counted = await pass('ep_group_counted', 2, 1)
    expect((await drawPassUse(sql, draw('ep_group', 'group_used'))).ok).toBe(true)
    const answers = await drawTimePassUses(sql, [
      draw('ep_group', 'group_a'),
      draw('ep_group', 'group_used'),
      draw('ep_group', 'group_b'),
      // The same message twice in one group draws once, as two statements would.
      draw('ep_group', 'group_twice'),
      { ...draw('ep_group', 'group_twice'), token: 'tok_other' },
      draw('ep_group_counted', 'group_counted'),
      draw('ep_group_none', 'group_none'),
    ])
    expect(answers).toEqual([
      { ok: true, passId: timed, usesLeft: null, expiresMs: expect.any(Number) },
      { ok: false, reason: 'replayed' },
      { ok: true, passId: timed, usesLeft: null, expiresMs: expect.any(Number) },
      { ok: true, passId: timed, usesLeft: null, expiresMs: expect.any(Number) },
      { ok: false, reason: 'replayed' },
      { ok: false, reason: 'no_time_pass' },
      { ok: false, reason: 'no_time_pass' },
    ])
    expect((answers[0] as { expiresMs: number }).expiresMs).toBeGreaterThan(Date.now() + 3_500_000)
    const draws = await sql`SELECT nonce FROM pass_draws WHERE pass_id = ${timed} ORDER BY nonce`
    expect(draws.map((d) => d.nonce)).toEqual(['group_a', 'group_b', 'group_twice', 'group_used'])
    // The message of a draw left to drawPassUse is not spent by the group: the lone draw takes its use.
    const left = await sql`SELECT nonce FROM sign_in_nonces WHERE nonce IN ('group_counted', 'group_none')`
    expect(left).toHaveLength(0)
    expect(await drawPassUse(sql, draw('ep_group_counted', 'group_counted'))).toMatchObject({
      ok: true,
      passId: counted,
      usesLeft: 1,
    })
    expect(await drawPassUse(sql, draw('ep_group_none', 'group_none'))).toEqual({ ok: false, reason: 'none' })
    // Its own draw found by its token after an answer lost in flight, as a lone draw's is.
    expect(await findOwnDraw(sql, draw('ep_group', 'group_b'))).toEqual({ kind: 'mine', passId: timed })
  })
})

describe.runIf(usingServer)('a draw that waited for another draw of the same pass', () => {
  it('draws on a pass of time only without locking or rewriting it, and keeps the counted uses', async () => {
    const counted = await pass('ep_time', 2, 1)
    const timed = await timePass('ep_time', 2)
    const version = async () =>
      (await sql<{ v: string }[]>`SELECT xmin::text AS v FROM passes WHERE id = ${timed}`)[0]!.v
    const before = await version()
    // a's draw held open in its transaction: b's draw on the same pass must not wait for a's commit.
    const commit = await drawHeldOpen('ep_time', 'time_a', { ok: true, passId: timed, usesLeft: null })
    const b = await Promise.race([
      drawPassUse(sql, draw('ep_time', 'time_b')),
      new Promise<'waited'>((r) => setTimeout(() => r('waited'), 3_000)),
    ])
    await commit()
    expect(b).toMatchObject({ ok: true, passId: timed, usesLeft: null })
    expect(await usesLeft(counted)).toBe(2)
    expect(await version()).toBe(before)
    // Both draws are recorded (their receipts and give-backs name them); a give-back changes no count.
    const draws = await sql`SELECT nonce FROM pass_draws WHERE pass_id = ${timed} ORDER BY nonce`
    expect(draws.map((d) => d.nonce)).toEqual(['time_a', 'time_b'])
    expect(await giveBackPassUse(sql, { nonce: 'time_a' })).toBe(false)
    expect(await usesLeft(counted)).toBe(2)
  })

  it("takes the wallet's next pass when the other draw took the last use", async () => {
    const soon = await pass('ep_race', 1, 1)
    const later = await pass('ep_race', 3, null)
    // a's draw of soon's last use, committed only once b's draw waits on soon's row.
    const commit = await drawHeldOpen('ep_race', 'race_a', { ok: true, passId: soon })
    const taking = drawPassUse(sql, draw('ep_race', 'race_b'))
    let waited = false
    for (let i = 0; i < 200 && !waited; i++) {
      const [w] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`
      waited = w!.n > 0
      if (!waited) await new Promise((r) => setTimeout(r, 10))
    }
    expect(waited).toBe(true)
    await commit()
    // b picked soon in its snapshot (one use left); a took that use while b waited. b holds a pass with
    // three uses: it must draw one of them, not be refused with its sign-in message spent.
    expect(await taking).toMatchObject({ ok: true, passId: later, usesLeft: 2 })
    expect(await usesLeft(soon)).toBe(0)
    expect(await usesLeft(later)).toBe(2)
  })

  it('the look for a draw whose answer was lost waits for its statement, then gives its use back', async () => {
    const p = await pass('ep_flight', 2, null)
    const request = draw('ep_flight', 'flight_1')
    // The draw's statement still running on the server (its client gave up on the answer): committed only
    // once the look waits on its nonce.
    let commit!: () => void
    const held = new Promise<void>((r) => {
      commit = r
    })
    let drawn!: () => void
    const inTransaction = new Promise<void>((r) => {
      drawn = r
    })
    const drawing = sql.begin(async (tx) => {
      expect(await drawPassUse(tx as unknown as Sql, request)).toMatchObject({ ok: true, passId: p })
      drawn()
      await held
    })
    await inTransaction
    const looking = findOwnDraw(sql, request)
    let waited = false
    for (let i = 0; i < 100 && !waited; i++) {
      const [w] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`
      waited = w!.n > 0
      if (!waited) await new Promise((r) => setTimeout(r, 10))
    }
    commit()
    await drawing
    // Read as absent, the use drawn by the statement that committed meanwhile was never given back.
    expect(await looking).toEqual({ kind: 'mine', passId: p })
    expect(waited).toBe(true)
    expect(await giveBackPassUse(sql, { nonce: request.nonce })).toBe(true)
    expect(await usesLeft(p)).toBe(2)
  })
})
