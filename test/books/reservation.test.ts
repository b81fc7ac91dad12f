// The payer reservation in the claim statement (src/books/claims.ts, migrations 0045 and 0065): an x402 exact
// authorization or upto permit is claimed only if the payer's balance as read covers it (a permit: its
// maximum) on top of what the payer's unsettled authorizations and permits hold and those settled after the
// read's block. The SQL alone, on a real database (PGlite or a server).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type ClaimRequest,
  captureClaim,
  claimAndCapture,
  claimProof,
  releaseClaim,
  voidClaim,
} from '../../src/books/claims.ts'
import { failSettlement } from '../../src/books/settlement.ts'
import { failUptoSettlement, settleUptoClaims } from '../../src/books/upto-settlement.ts'
import type { Sql } from '../../src/db/sql.ts'
import { newId } from '../../src/ids.ts'
import { migratedDatabase, usingServer } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const ACCOUNT = 'acct_reserve'
let n = 0

beforeAll(async () => {
  // Several connections: the concurrent case below sends its claims on different sessions.
  db = await migratedDatabase({ max: 4 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
    VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
})
afterAll(() => db?.stop())

/** A fresh payer address (each test its own). */
function payerAddress(): `0x${string}` {
  n++
  return `0x${n.toString(16).padStart(40, 'a')}` as `0x${string}`
}

function auth(
  payer: string,
  amountAtomic: bigint,
  reserve: { balanceAtomic: bigint; block: bigint } | null,
  key = `auth:84532:usdc:${payer.toLowerCase()}:${++n}`,
): ClaimRequest {
  return {
    proofKey: key,
    kind: 'eip3009',
    targetType: 'call',
    targetId: 'ep_1',
    accountId: ACCOUNT,
    payer,
    amountAtomic,
    retryWindowMs: 600_000,
    leaseMs: 30_000,
    authorization: {
      from: payer,
      value: amountAtomic.toString(),
      validBefore: String(Math.floor(Date.now() / 1000) + 600),
    },
    proofAtMs: null,
    reserve,
  }
}

const outcome = async (r: ClaimRequest) => (await claimProof(sql, r)).outcome

/** What settleAuthorizations leaves on a claim (its revenue aside): settled, in `block` (null: unknown). */
async function settled(proofKey: string, block: bigint | null): Promise<void> {
  await sql`UPDATE claims SET status = 'captured', captured_at = now(), settled_at = now(),
                              settlement_block = ${block === null ? null : block.toString()}::bigint
            WHERE proof_key = ${proofKey}`
}

describe('x402 exact reservation', () => {
  it('claims one payer up to its balance, whatever the case of its address; the rest insufficient_funds', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 30_000n, block: 100n }
    expect(await outcome(auth(p, 10_000n, read))).toBe('won')
    expect(await outcome(auth(p.toUpperCase().replace('0X', '0x'), 10_000n, read))).toBe('won')
    expect(await outcome(auth(p, 10_000n, read))).toBe('won')
    expect(await outcome(auth(p, 1n, read))).toBe('insufficient_funds')
    // Another payer is not held by this one's authorizations.
    expect(await outcome(auth(payerAddress(), 10_000n, read))).toBe('won')
    // A claim that brings no balance read (none to check against) is not refused for funds.
    expect(await outcome(auth(p, 10_000n, null))).toBe('won')
  })

  it('one statement: its own claims of a payer count against each other, in order', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 30_000n, block: 100n }
    const claims = [auth(p, 15_000n, read), auth(p, 15_000n, read), auth(p, 1n, read)]
    const r = await claimAndCapture(sql, { claims, captures: [] })
    expect(r.claims.map((c) => c.outcome)).toEqual(['won', 'won', 'insufficient_funds'])
  })

  it('a replay of a spent authorization is proof_already_used, not insufficient_funds', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 10_000n, block: 100n }
    const first = auth(p, 10_000n, read)
    expect(await outcome(first)).toBe('won')
    await settled(first.proofKey, null)
    expect(await outcome({ ...first, targetId: 'ep_other' })).toBe('used')
  })

  it('a released claim leaves the sum; its retry claims again, against what is left', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 10_000n, block: 100n }
    const first = auth(p, 10_000n, read)
    expect(await claimProof(sql, first)).toEqual({
      outcome: 'won',
      attempt: 1,
      horizonAt: expect.any(String),
    })
    expect(await outcome(auth(p, 10_000n, read))).toBe('insufficient_funds')
    expect((await releaseClaim(sql, { proofKey: first.proofKey, attempt: 1 })).ok).toBe(true)
    // Released: another authorization of the payer takes the money, and the retry is refused for funds.
    expect(await outcome(auth(p, 10_000n, read))).toBe('won')
    expect(await outcome(first)).toBe('insufficient_funds')
  })

  it('a settled authorization counts until a balance read at or after its block shows it', async () => {
    const p = payerAddress()
    const first = auth(p, 10_000n, { balanceAtomic: 20_000n, block: 100n })
    expect(await outcome(first)).toBe('won')
    await settled(first.proofKey, 105n)
    // Read at block 100: the balance still holds the 10,000 settled in 105; counted, as if unsettled.
    expect(await outcome(auth(p, 10_001n, { balanceAtomic: 20_000n, block: 100n }))).toBe(
      'insufficient_funds',
    )
    // Read at block 105: the balance shows it moved (10,000 left), and it is not counted again.
    expect(await outcome(auth(p, 10_000n, { balanceAtomic: 10_000n, block: 105n }))).toBe('won')
  })

  it('a settlement with no known block counts for two minutes; a failed settlement leaves the sum', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 20_000n, block: 100n }
    const a = auth(p, 10_000n, read)
    const b = auth(p, 10_000n, read)
    expect(await outcome(a)).toBe('won')
    expect(await outcome(b)).toBe('won')
    // Used some other way, block unknown: counted against any read for now (a false refusal, bounded).
    await settled(a.proofKey, null)
    expect(await outcome(auth(p, 10_000n, { balanceAtomic: 10_000n, block: 200n }))).toBe(
      'insufficient_funds',
    )
    await sql`UPDATE claims SET settled_at = now() - interval '3 minutes' WHERE proof_key = ${a.proofKey}`
    // b reverted: that money never moves.
    await sql`UPDATE claims SET status = 'captured', captured_at = now() WHERE proof_key = ${b.proofKey}`
    expect(await failSettlement(sql, { proofKey: b.proofKey, reason: 'reverted' })).toBe(true)
    expect(await outcome(auth(p, 10_000n, { balanceAtomic: 10_000n, block: 200n }))).toBe('won')
  })
})

describe.runIf(usingServer)('x402 exact reservation, concurrent sessions', () => {
  it('claims of one payer racing on separate connections never take more than its balance', async () => {
    const read = { balanceAtomic: 10_000n, block: 100n }
    let won = 0
    for (let round = 0; round < 20; round++) {
      const p = payerAddress()
      const results = await Promise.all(Array.from({ length: 4 }, () => outcome(auth(p, 10_000n, read))))
      expect(results.filter((r) => r === 'won').length).toBeLessThanOrEqual(1)
      won += results.filter((r) => r === 'won').length
    }
    // Each payer's one authorization it can pay went through (a refusal here is never spurious).
    expect(won).toBe(20)
  })
})

/** An upto permit's claim for `max` (its signed maximum). */
function permit(
  payer: string,
  max: bigint,
  reserve: { balanceAtomic: bigint; block: bigint } | null,
): ClaimRequest {
  return {
    ...auth(payer, max, reserve, `upto:84532:${payer.toLowerCase()}:${++n}`),
    kind: 'upto',
    authorization: {
      from: payer,
      amount: max.toString(),
      deadline: String(Math.floor(Date.now() / 1000) + 600),
    },
  }
}

/** The capture the data plane writes for a served upto call charged `charge`. */
async function capturedFor(r: ClaimRequest, charge: bigint): Promise<void> {
  const applied = await captureClaim(sql, {
    callId: newId('call'),
    proofKey: r.proofKey,
    endpointId: 'ep_1',
    accountId: ACCOUNT,
    ownerWallet: '0x1111111111111111111111111111111111111111',
    payer: r.payer,
    amountAtomic: charge,
    ownerShareAtomic: charge,
    feeAtomic: 0n,
    upstreamStatus: 200,
    method: 'POST',
    scheme: 'upto',
  })
  expect(applied).toEqual({ ok: true })
}

describe('x402 upto in the payer reservation', () => {
  it('a claimed permit holds its maximum: a second one past the balance is insufficient_funds', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 60_000n, block: 100n }
    expect(await outcome(permit(p, 50_000n, read))).toBe('won')
    expect(await outcome(permit(p, 50_000n, read))).toBe('insufficient_funds')
    // One wallet, one reservation: an exact authorization of the same payer meets the permit's maximum too.
    expect(await outcome(auth(p, 10_001n, read))).toBe('insufficient_funds')
    expect(await outcome(auth(p, 10_000n, read))).toBe('won')
    expect(await outcome(permit(p, 1n, read))).toBe('insufficient_funds')
  })

  it('one statement: a permit and an authorization of one payer count against each other, in order', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 60_000n, block: 100n }
    const r = await claimAndCapture(sql, {
      claims: [permit(p, 50_000n, read), auth(p, 10_000n, read), permit(p, 1n, read)],
      captures: [],
    })
    expect(r.claims.map((c) => c.outcome)).toEqual(['won', 'won', 'insufficient_funds'])
  })

  it('once captured a permit holds its charge; settled, what the chain moved until a read shows it', async () => {
    const p = payerAddress()
    const first = permit(p, 50_000n, { balanceAtomic: 60_000n, block: 100n })
    expect(await outcome(first)).toBe('won')
    await capturedFor(first, 20_000n)
    // Charged 20,000: 40,000 of the 60,000 is free, not 10,000.
    expect(await outcome(permit(p, 40_001n, { balanceAtomic: 60_000n, block: 100n }))).toBe(
      'insufficient_funds',
    )
    const second = permit(p, 40_000n, { balanceAtomic: 60_000n, block: 100n })
    expect(await outcome(second)).toBe('won')
    await voidFreed(second)
    expect(
      await settleUptoClaims(sql, {
        settled: [{ proofKey: first.proofKey, settledAtomic: 20_000n, block: 105n }],
      }),
    ).toEqual([first.proofKey])
    // Read at 100: the 20,000 settled in 105 still counts; read at 105, the balance shows it, not counted again.
    expect(await outcome(permit(p, 40_001n, { balanceAtomic: 60_000n, block: 100n }))).toBe(
      'insufficient_funds',
    )
    expect(await outcome(permit(p, 40_000n, { balanceAtomic: 40_000n, block: 105n }))).toBe('won')
  })

  it('a released, voided or failed permit holds nothing: no money moves for it', async () => {
    const p = payerAddress()
    const read = { balanceAtomic: 50_000n, block: 100n }
    const released = permit(p, 50_000n, read)
    expect(await claimProof(sql, released)).toMatchObject({ outcome: 'won', attempt: 1 })
    expect(await outcome(permit(p, 1n, read))).toBe('insufficient_funds')
    expect((await releaseClaim(sql, { proofKey: released.proofKey, attempt: 1 })).ok).toBe(true)
    const failed = permit(p, 50_000n, read)
    expect(await outcome(failed)).toBe('won')
    await capturedFor(failed, 50_000n)
    expect(await outcome(permit(p, 1n, read))).toBe('insufficient_funds')
    expect(await failUptoSettlement(sql, { proofKey: failed.proofKey, reason: 'reverted' })).toBe(true)
    expect(await outcome(permit(p, 50_000n, read))).toBe('won')
  })
})

/** An uncaptured permit whose window ended (the expiry job): void, out of the sum. */
async function voidFreed(r: ClaimRequest): Promise<void> {
  await sql`UPDATE claims SET retry_until = now() - interval '1 second', lease_until = NULL
            WHERE proof_key = ${r.proofKey}`
  expect(await voidClaim(sql, { proofKey: r.proofKey })).toEqual({ ok: true, n: 1 })
}
