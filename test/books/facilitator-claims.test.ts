// The facilitator's claims in one group transaction (claimFacilitatorPayments): each payload decided as if
// alone and in order, the group's earlier claims held against the payer's balance, a refused payload's
// settlement row gone, a retry of a claimed payload found. The SQL alone, on a real database (PGlite or a
// server).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimProof } from '../../src/books/claims.ts'
import {
  claimFacilitatorPayments,
  type FacilitatorClaimRequest,
  readClaimedOrReserved,
} from '../../src/books/facilitator.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const ACCOUNT = 'acct_fac_group'
let n = 0

beforeAll(async () => {
  db = await migratedDatabase({ max: 2 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
    VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
})
afterAll(() => db?.stop())

function payerAddress(): string {
  n++
  return `0x${n.toString(16).padStart(40, 'b')}`
}

function request(payer: string, valueAtomic: bigint, balanceAtomic: bigint): FacilitatorClaimRequest {
  const nonce = `0x${(++n).toString(16).padStart(64, '0')}`
  return {
    accountId: ACCOUNT,
    proofKey: `auth:84532:usdc:${payer}:${nonce}`,
    paymentIdentifier: null,
    custody: 'treasury',
    payTo: '0x2222222222222222222222222222222222222222',
    payer,
    valueAtomic,
    network: 'eip155:84532',
    x402Version: 2,
    kind: 'eip3009',
    authorization: {
      signature: '0x00',
      from: payer as `0x${string}`,
      to: '0x2222222222222222222222222222222222222222',
      value: valueAtomic.toString(),
      validAfter: '0',
      validBefore: String(Math.floor(Date.now() / 1000) + 600),
      nonce: nonce as `0x${string}`,
    },
    ownerShareBps: 9500,
    reserve: { balanceAtomic, block: 100n },
  }
}

async function rows(proofKeys: string[]): Promise<number> {
  const [r] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM facilitator_settlements WHERE proof_key = ANY(${proofKeys}::text[])`
  return r!.n
}

describe('claimFacilitatorPayments: a group in one transaction', () => {
  it('holds the group’s earlier claims against the balance, in order; a refused payload leaves no row', async () => {
    const payer = payerAddress()
    const group = [request(payer, 10n, 25n), request(payer, 10n, 25n), request(payer, 10n, 25n)]
    const other = payerAddress()
    group.push(request(other, 5n, 5n))
    const claims = await claimFacilitatorPayments(sql, group)
    expect(claims.map((c) => c.kind)).toEqual(['claimed', 'claimed', 'insufficient_funds', 'claimed'])
    expect(await rows(group.map((q) => q.proofKey))).toBe(3)
    // A retry of the same payloads finds the claimed ones; the refused one is refused again.
    const again = await claimFacilitatorPayments(sql, group)
    expect(again.map((c) => c.kind)).toEqual(['existing', 'existing', 'insufficient_funds', 'existing'])
  })

  it('refuses a payload another proof path claimed, beside a new one, and leaves its row out', async () => {
    const payer = payerAddress()
    const taken = request(payer, 10n, 1_000n)
    const fresh = request(payer, 10n, 1_000n)
    const metered = await claimProof(sql, {
      proofKey: taken.proofKey,
      kind: 'eip3009',
      targetType: 'call',
      targetId: 'ep_1',
      accountId: ACCOUNT,
      payer,
      amountAtomic: 10n,
      retryWindowMs: 600_000,
      leaseMs: 30_000,
      authorization: taken.authorization,
      proofAtMs: null,
    })
    expect(metered.outcome).toBe('won')
    const claims = await claimFacilitatorPayments(sql, [taken, fresh])
    expect(claims.map((c) => c.kind)).toEqual(['proof_already_used', 'claimed'])
    expect(await rows([taken.proofKey])).toBe(0)
    expect(await rows([fresh.proofKey])).toBe(1)
  })

  it('decides each payload as if alone: a refused one holds nothing for the ones after it', async () => {
    const payer = payerAddress()
    const group = [request(payer, 20n, 25n), request(payer, 10n, 25n), request(payer, 5n, 25n)]
    const claims = await claimFacilitatorPayments(sql, group)
    expect(claims.map((c) => c.kind)).toEqual(['claimed', 'insufficient_funds', 'claimed'])
    expect(await rows(group.map((q) => q.proofKey))).toBe(2)
  })

  it('a payload twice in one group is claimed once; its payment-identifier on another payload conflicts', async () => {
    const payer = payerAddress()
    const first = { ...request(payer, 10n, 1_000n), paymentIdentifier: `pay_${n}` }
    const other = { ...request(payer, 10n, 1_000n), paymentIdentifier: first.paymentIdentifier }
    const claims = await claimFacilitatorPayments(sql, [first, { ...first }, other])
    expect(claims.map((c) => c.kind)).toEqual(['claimed', 'existing', 'payment_identifier_conflict'])
    expect(await rows([first.proofKey, other.proofKey])).toBe(1)
  })
})

describe('readClaimedOrReserved: the /verify reads of a group in one statement', () => {
  it('answers each read: its proof claimed, or its payer’s reservation at its own block', async () => {
    const payer = payerAddress()
    const other = payerAddress()
    const held = request(payer, 10n, 1_000n)
    expect((await claimFacilitatorPayments(sql, [held])).map((c) => c.kind)).toEqual(['claimed'])
    // Settled in block 105: a balance read at 100 does not show it yet, one at 105 does.
    const settledOne = request(payer, 7n, 1_000n)
    expect((await claimFacilitatorPayments(sql, [settledOne])).map((c) => c.kind)).toEqual(['claimed'])
    await sql`UPDATE claims SET settled_at = now(), settlement_block = 105 WHERE proof_key = ${settledOne.proofKey}`
    const fresh = request(payer, 1n, 1_000n)
    const answers = await readClaimedOrReserved(sql, [
      { proofKey: held.proofKey, payer, block: 100n },
      { proofKey: fresh.proofKey, payer: payer.toUpperCase().replace('0X', '0x'), block: 100n },
      { proofKey: fresh.proofKey, payer, block: 105n },
      { proofKey: request(other, 1n, 1n).proofKey, payer: other, block: 100n },
    ])
    expect(answers).toEqual([
      { claimed: true },
      { claimed: false, reserved: 17n },
      { claimed: false, reserved: 10n },
      { claimed: false, reserved: 0n },
    ])
  })
})
