// The payer reservation's running totals (migration 0079): after any sequence of the books' own transitions
// of x402 exact authorizations and upto permits (claims, releases and their retries, captures, settlements,
// failures, voids, facilitator claims, prunes, a day partition made under claims already in the default one),
// payer_reserved answers exactly what the sums it replaced answer (migration 0070's function, installed here
// under another name as the reference), and reconcile's holds check finds nothing.
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, expect, it } from 'vitest'
import {
  type ClaimRequest,
  captureClaim,
  claimProof,
  releaseClaim,
  voidClaim,
} from '../../src/books/claims.ts'
import { failSettlement } from '../../src/books/settlement.ts'
import { failUptoSettlement, settleUptoClaims } from '../../src/books/upto-settlement.ts'
import { checkHolds } from '../../src/control-plane/jobs/reconcile-holds.ts'
import type { Sql } from '../../src/db/sql.ts'
import { newId } from '../../src/ids.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const ACCOUNT = 'acct_holds'
const PAYERS = ['0x' + 'a1'.repeat(20), '0x' + 'B2'.repeat(20), '0x' + 'c3'.repeat(20)]

beforeAll(async () => {
  db = await migratedDatabase({ max: 2 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
    VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
  const before = readFileSync(
    new URL('../../src/db/migrations/0070_facilitator_upto.sql', import.meta.url),
    'utf8',
  )
  await sql.unsafe(before.replace('FUNCTION payer_reserved(', 'FUNCTION payer_reserved_summed('))
})
afterAll(() => db?.stop())

/** A deterministic sequence (the failing step can be replayed). */
function random(seed: number): () => number {
  let s = seed
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31
    return s / 2 ** 31
  }
}

interface Held {
  request: ClaimRequest
  attempt: number
}

let n = 0
function request(
  payer: string,
  kind: 'eip3009' | 'upto',
  amount: bigint,
  validBeforeS: number,
): ClaimRequest {
  n++
  return {
    proofKey:
      kind === 'upto'
        ? `upto:84532:${payer.toLowerCase()}:${n}`
        : `auth:84532:usdc:${payer.toLowerCase()}:${n}`,
    kind,
    targetType: 'call',
    targetId: 'ep_1',
    accountId: ACCOUNT,
    payer,
    amountAtomic: amount,
    retryWindowMs: 600_000,
    leaseMs: 30_000,
    authorization:
      kind === 'upto'
        ? { from: payer, amount: amount.toString(), deadline: String(validBeforeS) }
        : { from: payer, value: amount.toString(), validBefore: String(validBeforeS) },
    proofAtMs: null,
    reserve: { balanceAtomic: 10n ** 15n, block: 100n },
  }
}

async function assertSameAsSums(step: string): Promise<void> {
  for (const p of PAYERS) {
    for (const block of [0n, 100n, 10n ** 9n]) {
      const [r] = await sql<{ running: string; summed: string }[]>`
        SELECT payer_reserved(lower(${p}), ${block.toString()}::bigint)::text AS running,
               payer_reserved_summed(lower(${p}), ${block.toString()}::bigint)::text AS summed`
      expect(r!.running, `${step}: payer ${p}, balance read at ${block}`).toBe(r!.summed)
    }
  }
  const check = await checkHolds(sql)
  expect(check.differences, step).toEqual([])
}

it('answers what the sums answered after every transition of a random sequence', async () => {
  const next = random(54_051)
  const pick = <T>(xs: T[]): T | undefined => xs[Math.floor(next() * xs.length)]
  const claims: Held[] = []
  const now = Math.floor(Date.now() / 1000)
  for (let step = 0; step < 240; step++) {
    const op = Math.floor(next() * 10)
    const c = pick(claims)
    const what = `step ${step} op ${op}`
    if (op <= 2 || c === undefined) {
      const r = request(
        pick(PAYERS)!,
        next() < 0.6 ? 'eip3009' : 'upto',
        BigInt(1 + Math.floor(next() * 9_999)),
        now + 600,
      )
      const won = await claimProof(sql, r)
      if (won.outcome === 'won') claims.push({ request: r, attempt: won.attempt })
    } else if (op === 3) {
      const released = await releaseClaim(sql, { proofKey: c.request.proofKey, attempt: c.attempt })
      // A released claim's retry, half the time: taken over, held again.
      if (released.ok && next() < 0.5) {
        const again = await claimProof(sql, c.request)
        if (again.outcome === 'won') c.attempt = again.attempt
      }
    } else if (op === 4 || op === 5) {
      const charge = c.request.kind === 'upto' ? c.request.amountAtomic / 2n : c.request.amountAtomic
      await captureClaim(sql, {
        callId: newId('call'),
        proofKey: c.request.proofKey,
        endpointId: 'ep_1',
        accountId: ACCOUNT,
        ownerWallet: '0x1111111111111111111111111111111111111111',
        payer: c.request.payer,
        amountAtomic: charge,
        ownerShareAtomic: charge,
        feeAtomic: 0n,
        upstreamStatus: 200,
        method: 'POST',
        scheme: c.request.kind === 'upto' ? 'upto' : 'exact',
      })
    } else if (op === 6) {
      const block = next() < 0.3 ? null : BigInt(90 + Math.floor(next() * 20))
      if (c.request.kind === 'upto') {
        await settleUptoClaims(sql, {
          settled: [
            {
              proofKey: c.request.proofKey,
              settledAtomic: c.request.amountAtomic / 2n,
              block: block ?? 100n,
            },
          ],
        })
      } else {
        await sql`UPDATE claims SET settled_at = now(), settlement_block = ${block === null ? null : block.toString()}::bigint
                  WHERE proof_key = ${c.request.proofKey} AND status = 'captured' AND settled_at IS NULL`
      }
    } else if (op === 7) {
      if (c.request.kind === 'upto')
        await failUptoSettlement(sql, { proofKey: c.request.proofKey, reason: 'reverted' })
      else await failSettlement(sql, { proofKey: c.request.proofKey, reason: 'reverted' })
    } else if (op === 8) {
      // The expiry job: an uncaptured claim whose window ended is voided.
      await sql`UPDATE claims SET retry_until = now() - interval '1 second', lease_until = NULL
                WHERE proof_key = ${c.request.proofKey} AND status = 'claimed'`
      await voidClaim(sql, { proofKey: c.request.proofKey })
    } else {
      // The facilitator's claim (books/facilitator.ts): settling at once, no call; or a closed claim pruned.
      if (next() < 0.5) {
        const r = request(pick(PAYERS)!, next() < 0.5 ? 'eip3009' : 'upto', 777n, now + 600)
        await sql`INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic,
                                      status, authorization_payload, horizon_at)
                  SELECT ${r.proofKey}, ${r.kind}, 'facilitator', 'fst_x', ${ACCOUNT}, ${r.payer}, 777, 'settling',
                         a.auth, claim_horizon_at(${r.kind}, NULL, a.auth)
                  FROM (SELECT ${sql.json(r.authorization as never)}::jsonb AS auth) a`
      } else {
        await sql`DELETE FROM claims WHERE proof_key = ${c.request.proofKey}
                  AND (settled_at IS NOT NULL OR settlement_error IS NOT NULL OR status = 'void')`
      }
    }
    await assertSameAsSums(what)
  }
  // The sequence reached every state that holds and every one that does not.
  const states = await sql<{ status: string }[]>`SELECT DISTINCT status FROM claims`
  expect(states.map((s) => s.status).sort()).toEqual(
    expect.arrayContaining(['captured', 'claimed', 'settling', 'void']),
  )
})

it('keeps a claim held when its day partition is made after it, under rows of the default partition', async () => {
  // Far enough ahead that no day partition exists yet: the claims land in claims_default.
  const ahead = new Date(Date.now() + 40 * 86_400_000)
  const day = ahead.toISOString().slice(0, 10)
  const validBefore = Math.floor(ahead.getTime() / 1000)
  const [p] = PAYERS
  const r = request(p!, 'eip3009', 5_000n, validBefore)
  expect((await claimProof(sql, r)).outcome).toBe('won')
  const [where] = await sql<{ part: string }[]>`
    SELECT tableoid::regclass::text AS part FROM claims WHERE proof_key = ${r.proofKey}`
  expect(where!.part).toBe('claims_default')
  const [made] = await sql<{ made: boolean }[]>`SELECT claims_day_partition(${day}::date) AS made`
  expect(made!.made).toBe(true)
  const [moved] = await sql<{ part: string }[]>`
    SELECT tableoid::regclass::text AS part FROM claims WHERE proof_key = ${r.proofKey}`
  expect(moved!.part).toBe(`claims_d${day.replaceAll('-', '')}`)
  await assertSameAsSums('after the day partition was made')
  // And the moved row's triggers are the partition's now: its release is counted.
  expect((await releaseClaim(sql, { proofKey: r.proofKey, attempt: 1 })).ok).toBe(true)
  await assertSameAsSums('after the moved claim was released')
})
