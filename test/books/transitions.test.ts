// Each transition of the money room applies only from the states its SQL names; an illegal one changes
// nothing and says why. Real database: a fresh server database (DATABASE_URL) or embedded PGlite.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import {
  type Capture,
  type ClaimRequest,
  captureClaim,
  claimProof,
  markRefundDue,
  releaseClaim,
  voidClaim,
} from '../../src/books/claims.ts'
import { bookCallRevenue, linkEntriesToPayouts } from '../../src/books/ledger.ts'
import { confirmPayout, failPayout, markPayoutSubmitted } from '../../src/books/payouts.ts'
import { claimCallExpectations, fromStates } from '../../src/books/transitions.ts'
import type { Sql } from '../../src/db/sql.ts'
import { newId } from '../../src/ids.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const ACCOUNT = 'acct_books'
const WALLET = '0x1111111111111111111111111111111111111111'

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode) VALUES (${ACCOUNT}, ${WALLET}, 'B', 'test')`
})
afterAll(async () => {
  await db?.stop()
})

let n = 0
let key = ''
const BLOCK_AT_MS = Date.now() - 60_000
beforeEach(() => {
  key = `tx:0x${(++n).toString(16).padStart(64, '0')}${Date.now()}`
})

function request(o: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    proofKey: key,
    kind: 'tx',
    // The proof's block time: the same for every presentation of one proof, as the chain says.
    proofAtMs: BLOCK_AT_MS,
    targetType: 'call',
    targetId: 'ep_1',
    accountId: ACCOUNT,
    payer: '0x2222222222222222222222222222222222222222',
    amountAtomic: 10_000n,
    retryWindowMs: 600_000,
    leaseMs: 30_000,
    authorization: null,
    ...o,
  }
}

/** An x402 exact claim: its day is its authorization's validBefore (no block time). */
function x402Request(): ClaimRequest {
  const validBefore = String(Math.floor(Date.now() / 1000) + 600)
  return request({ kind: 'eip3009', proofAtMs: null, authorization: { validBefore } })
}

function capture(o: Partial<Capture> = {}): Capture {
  return {
    callId: newId('call'),
    proofKey: key,
    endpointId: 'ep_1',
    accountId: ACCOUNT,
    ownerWallet: WALLET,
    payer: '0x2222222222222222222222222222222222222222',
    amountAtomic: 10_000n,
    ownerShareAtomic: 9_500n,
    feeAtomic: 500n,
    upstreamStatus: 200,
    method: 'GET',
    ...o,
  }
}

async function claimRow() {
  const [row] = await sql`SELECT status, attempts, releases FROM claims WHERE proof_key = ${key}`
  return row
}
async function counts() {
  const [row] = await sql<{ calls: number; entries: number }[]>`
    SELECT (SELECT count(*) FROM calls WHERE call_proof_key(proof_key, proof) = ${key})::int AS calls,
           -- Its own entries, or those of the capture or settlement batch that booked it (alone in it here).
           (SELECT count(*) FROM ledger_entries e
              WHERE e.source_id = ${key} OR e.source_id IN (SELECT id FROM calls WHERE call_proof_key(proof_key, proof) = ${key})
                 OR (e.source_type IN ('capture_batch', 'settlement_batch') AND (e.source_id, e.account_id) IN
                       (SELECT ledger_batch_id::text, account_id FROM calls WHERE call_proof_key(proof_key, proof) = ${key})))::int
             AS entries`
  return row
}
/** The clock, injected: the claim's window and lease as if that much time had passed. */
async function age(o: { windowOver?: boolean; leaseOver?: boolean }) {
  if (o.windowOver)
    await sql`UPDATE claims SET retry_until = now() - interval '1 second' WHERE proof_key = ${key}`
  if (o.leaseOver)
    await sql`UPDATE claims SET lease_until = now() - interval '1 minute' WHERE proof_key = ${key}`
}

describe('the transition table', () => {
  it('knows which claim states carry a call', () => {
    const e = claimCallExpectations()
    expect(e.get('captured')).toBe('one')
    expect(e.get('claimed')).toBe('none')
    expect(e.get('refund_due')).toBe('none')
    expect(e.get('refunded')).toBe('none')
    expect(e.get('applied')).toBe('none')
    expect(e.get('void')).toBe('none')
    expect(fromStates('payout', 'confirmPayout').sort()).toEqual(['pending', 'submitted'])
  })
})

describe('claim and capture', () => {
  it('a claimed proof is captured once: call row and revenue once, the second capture is refused', async () => {
    expect(await claimProof(sql, request())).toEqual({
      outcome: 'won',
      attempt: 1,
      horizonAt: expect.any(String),
    })
    expect(await captureClaim(sql, capture())).toEqual({ ok: true })
    expect(await captureClaim(sql, capture())).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'captured',
    })
    expect(await counts()).toEqual({ calls: 1, entries: 2 })
  })

  it("a capture naming its claim's partition key applies there; a wrong key applies nothing", async () => {
    const won = await claimProof(sql, request())
    if (won.outcome !== 'won') throw new Error(`claim: ${won.outcome}`)
    const other = new Date(BLOCK_AT_MS - 86_400_000).toISOString()
    expect(await captureClaim(sql, capture({ horizonAt: other }))).toMatchObject({ ok: false })
    expect(await counts()).toEqual({ calls: 0, entries: 0 })
    expect(await captureClaim(sql, capture({ horizonAt: won.horizonAt }))).toEqual({ ok: true })
    expect(await counts()).toEqual({ calls: 1, entries: 2 })
  })

  it('capture of a voided claim changes nothing and says why', async () => {
    await claimProof(sql, x402Request())
    await age({ windowOver: true, leaseOver: true })
    expect(await voidClaim(sql, { proofKey: key })).toMatchObject({ ok: true, n: 1 })
    expect(await captureClaim(sql, capture())).toEqual({ ok: false, reason: 'wrong_state', status: 'void' })
    expect(await counts()).toEqual({ calls: 0, entries: 0 })
  })

  it('an x402 capture writes the call but books no revenue until settlement books it, once', async () => {
    await claimProof(sql, x402Request())
    expect(await captureClaim(sql, capture())).toEqual({ ok: true })
    expect(await counts()).toEqual({ calls: 1, entries: 0 })
    const book = () => sql.begin((tx) => bookCallRevenue(tx, { proofKeys: [key] }))
    expect(await book()).toBe(1)
    expect(await book()).toBe(0)
    expect(await counts()).toEqual({ calls: 1, entries: 2 })
  })

  it('capture of an unknown proof is refused as not_found', async () => {
    expect(await captureClaim(sql, capture())).toEqual({ ok: false, reason: 'not_found', status: null })
  })
})

describe('release and retry', () => {
  it('a released claim is won again once; a second release of the same attempt is refused', async () => {
    await claimProof(sql, request())
    expect(await claimProof(sql, request())).toEqual({ outcome: 'busy' })
    expect(await releaseClaim(sql, { proofKey: key, attempt: 1 })).toEqual({ ok: true })
    expect(await releaseClaim(sql, { proofKey: key, attempt: 1 })).toEqual({
      ok: false,
      reason: 'not_held',
      status: 'claimed',
    })
    expect(await claimProof(sql, request())).toEqual({
      outcome: 'won',
      attempt: 2,
      horizonAt: expect.any(String),
    })
    expect(await claimProof(sql, request())).toEqual({ outcome: 'busy' })
    expect(await claimRow()).toEqual({ status: 'claimed', attempts: 2, releases: 1 })
  })

  it('a lease that ran out without a release never lets another request win the proof', async () => {
    await claimProof(sql, request())
    // Just run out: its holder may still write its outcome (DOUBT_GRACE_MS), so the retry is told to wait.
    await sql`UPDATE claims SET lease_until = now() - interval '1 second' WHERE proof_key = ${key}`
    expect(await claimProof(sql, request())).toEqual({ outcome: 'busy' })
    await age({ leaseOver: true })
    expect(await claimProof(sql, request())).toEqual({ outcome: 'used' })
    expect(await claimRow()).toEqual({ status: 'claimed', attempts: 1, releases: 0 })
  })

  it('release of a captured claim changes nothing', async () => {
    await claimProof(sql, request())
    await captureClaim(sql, capture())
    expect(await releaseClaim(sql, { proofKey: key, attempt: 1 })).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'captured',
    })
    expect(await claimProof(sql, request())).toEqual({ outcome: 'used' })
  })

  it('a proof claimed for one endpoint is used for another', async () => {
    await claimProof(sql, request())
    await releaseClaim(sql, { proofKey: key, attempt: 1 })
    expect(await claimProof(sql, request({ targetId: 'ep_other' }))).toEqual({ outcome: 'used' })
  })
})

describe('refund and void', () => {
  it('refund of a captured claim changes nothing and says why', async () => {
    await claimProof(sql, request())
    await captureClaim(sql, capture())
    await age({ windowOver: true })
    expect(await markRefundDue(sql, { proofKey: key })).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'captured',
    })
    expect(await counts()).toEqual({ calls: 1, entries: 2 })
  })

  it('refund inside the retry window is refused; after it, an in-doubt claim is refunded once', async () => {
    await claimProof(sql, request())
    expect(await markRefundDue(sql, { proofKey: key })).toEqual({
      ok: false,
      reason: 'retry_window_open',
      status: 'claimed',
    })
    await age({ windowOver: true })
    expect(await markRefundDue(sql, { proofKey: key })).toEqual({
      ok: false,
      reason: 'lease_held',
      status: 'claimed',
    })
    await age({ leaseOver: true })
    expect(await markRefundDue(sql, { proofKey: key })).toEqual({ ok: true, n: 1 })
    expect(await markRefundDue(sql, { proofKey: key })).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'refund_due',
    })
    expect(await counts()).toEqual({ calls: 0, entries: 1 })
  })

  it('void of a transaction-hash claim is refused (those are refunded, not voided)', async () => {
    await claimProof(sql, request())
    await age({ windowOver: true, leaseOver: true })
    expect((await voidClaim(sql, { proofKey: key })).ok).toBe(false)
    expect(await claimRow()).toMatchObject({ status: 'claimed' })
  })
})

describe('payouts and their entries', () => {
  let nonce = 0
  async function payout(status: string): Promise<string> {
    const id = newId('po')
    nonce++
    await sql`
      INSERT INTO payouts (id, wallet, amount_atomic, kind, status, treasury, nonce, tx_hash, raw_tx)
      VALUES (${id}, ${WALLET}, 9500, 'payout', ${status}, '0xtreasury', ${nonce}, ${`0xhash${id}`}, '0x')`
    return id
  }

  it('an entry already in a payout cannot be put in another', async () => {
    await claimProof(sql, request())
    await captureClaim(sql, capture())
    const [entry] = await sql<{ id: bigint }[]>`
      SELECT e.id FROM ledger_entries e
      JOIN calls k ON e.source_type = 'capture_batch' AND e.source_id = k.ledger_batch_id::text
        AND e.account_id = k.account_id
      WHERE call_proof_key(k.proof_key, k.proof) = ${key} AND e.kind = 'owner_share'`
    const a = await payout('pending')
    const b = await payout('pending')
    const ids = `{${entry!.id}}`
    const first = await sql.begin((tx) => linkEntriesToPayouts(tx, [{ payoutId: a, entryIds: ids }]))
    expect(first.map((p) => [p.payout_id, p.entries_count])).toEqual([[a, 1]])
    const second = await sql.begin((tx) => linkEntriesToPayouts(tx, [{ payoutId: b, entryIds: ids }]))
    expect(second).toEqual([])
    const [row] = await sql`SELECT payout_id FROM ledger_entries WHERE id = ${entry!.id}`
    expect(row!.payout_id).toBe(a)
  })

  it('confirm of a failed payout changes nothing and says why', async () => {
    const id = await payout('pending')
    const failed = await failPayout(sql, { id, error: 'reverted', retryAt: new Date() })
    expect(failed.ok).toBe(true)
    expect(await confirmPayout(sql, { id, hash: '0xabc', blockNumber: 1n })).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'failed',
    })
    const [row] = await sql`SELECT status, tx_hash FROM payouts WHERE id = ${id}`
    expect(row).toEqual({ status: 'failed', tx_hash: `0xhash${id}` })
  })

  it('a confirmed payout is neither submitted again nor failed', async () => {
    const id = await payout('submitted')
    expect((await confirmPayout(sql, { id, hash: `0xhash${id}`, blockNumber: 7n })).ok).toBe(true)
    expect(await markPayoutSubmitted(sql, id)).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'confirmed',
    })
    expect(await failPayout(sql, { id, error: 'x', retryAt: new Date() })).toEqual({
      ok: false,
      reason: 'wrong_state',
      status: 'confirmed',
    })
    expect(await markPayoutSubmitted(sql, 'po_missing')).toEqual({
      ok: false,
      reason: 'not_found',
      status: null,
    })
  })
})
