// The refund room on a real database (server or PGlite), no chain: the merchant's part of several partial
// refunds adds up to exactly its owner share; a refund whose payout fails turns failed, is reversed (the
// merchant's part back in its unpaid balance, the payer's part never batched again) and reconciles; a paid
// one does not move again.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { failPayout, recordPayouts } from '../../src/books/payouts.ts'
import { createRefund } from '../../src/books/refunds.ts'
import { checkBalances } from '../../src/control-plane/jobs/reconcile-balances.ts'
import { checkRefunds } from '../../src/control-plane/jobs/reconcile-refunds.ts'
import { accountBalance } from '../../src/db/ledger.ts'
import type { Sql } from '../../src/db/sql.ts'
import { newId } from '../../src/ids.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const OWNER = '0x1111111111111111111111111111111111111111'
const PAYER = '0x2222222222222222222222222222222222222222'
const ALL = { from: new Date(0), to: new Date('9999-01-01T00:00:00Z') }

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode) VALUES ('acct_r', ${OWNER}, 'R', 'test')`
})
afterAll(async () => {
  await db?.stop()
})

/** A captured call with its revenue booked (owner share + fee), as a served transaction-hash call leaves. */
async function paidCall(amount: bigint, owner: bigint): Promise<string> {
  const id = newId('call')
  const proof = `tx:0x${id.padEnd(64, '0').slice(0, 64)}`
  await sql`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status, captured_at,
                        proof_at, horizon_at)
    VALUES (${proof}, 'tx', 'call', 'ep_r', 'acct_r', ${PAYER}, ${amount}, 'captured', now(), now(), now())`
  await sql`
    INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic, fee_atomic,
                       upstream_status, method)
    VALUES (${id}, ${proof}, 'ep_r', 'acct_r', ${PAYER}, ${amount}, ${owner}, ${amount - owner}, 200, 'GET')`
  await sql`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id) VALUES
      ('acct_r', 'owner_share', ${OWNER}, ${owner}, 'call', ${id}),
      ('acct_r', 'fee', NULL, ${amount - owner}, 'call', ${id})`
  return id
}

const refund = (callId: string, amountAtomic: bigint | null) =>
  createRefund(sql, {
    id: newId('re'),
    accountId: 'acct_r',
    target: { callId },
    amountAtomic,
    reason: null,
  })

function record() {
  return recordPayouts(sql, {
    treasury: '0x000000000000000000000000000000000000dEaD',
    firstNonce: 0,
    minAtomic: 1n,
    maxWallets: 500,
    maxEntries: 100_000,
    afford: () => null,
    sign: async ({ nonce }) => ({ rawTx: '0x', hash: `0x${(nonce + 1).toString(16).padStart(64, 'f')}` }),
  })
}

it('partial refunds take back exactly the owner share, in proportion, and never more than booked', async () => {
  const call = await paidCall(10_003n, 9_502n)
  const parts: bigint[] = []
  for (const amount of [3_333n, 3_333n, 3_337n]) {
    const r = await refund(call, amount)
    if (r.kind !== 'created') throw new Error(r.kind)
    parts.push(r.refund.owner_debit_atomic)
    expect(r.refund.owner_debit_atomic + r.refund.fee_returned_atomic).toBe(amount)
  }
  expect(parts.reduce((s, p) => s + p, 0n)).toBe(9_502n)
  expect(await refund(call, 1n)).toMatchObject({ kind: 'exceeds_refundable', refundableAtomic: 0n })
  expect(await refund('call_missing', null)).toEqual({ kind: 'not_found' })
  expect((await checkRefunds(sql, ALL)).differences).toEqual([])
})

it('a refund whose payout fails is failed and reversed: the merchant gets its part back, the payer nothing twice', async () => {
  const call = await paidCall(20_000n, 19_000n)
  const before = await accountBalance(sql, 'acct_r')
  const r = await refund(call, 8_000n)
  if (r.kind !== 'created') throw new Error(r.kind)
  expect((await accountBalance(sql, 'acct_r')).pending_atomic).toBe(before.pending_atomic - 7_600n)
  const recorded = await record()
  if (!recorded.ok) throw new Error('not recorded')
  const toPayer = recorded.payouts.find((p) => p.wallet === PAYER)!
  // The payer's payout carries this refund (and the earlier ones, all still pending).
  expect(toPayer.amount_atomic).toBe(10_003n + 8_000n)
  const failed = await failPayout(sql, { id: toPayer.id, error: 'reverted', retryAt: new Date(0) })
  expect(failed.ok).toBe(true)
  const statuses = await sql<{ status: string; failure_reason: string | null }[]>`
    SELECT status, failure_reason FROM refunds ORDER BY created_at`
  expect(statuses.every((s) => s.status === 'failed' && s.failure_reason === 'reverted')).toBe(true)
  const events = await sql<{ type: string }[]>`SELECT type FROM events WHERE type = 'refund.failed'`
  expect(events).toHaveLength(4)
  // The merchant's parts are back in its unpaid balance; the payer is owed nothing and never batched again.
  const after = await accountBalance(sql, 'acct_r')
  expect(after.owner_share_atomic).toBe(9_502n + 19_000n)
  expect(after.refunds_pending_atomic).toBe(0n)
  const [payer] = await sql<{ unpaid: bigint }[]>`
    SELECT coalesce(sum(unpaid_atomic), 0)::bigint AS unpaid FROM wallet_balances WHERE wallet = ${PAYER}`
  expect(payer!.unpaid).toBe(0n)
  const again = await record()
  expect(again.ok && again.payouts.map((p) => p.wallet)).toEqual([OWNER])
  // A failed refund does not count against the call (the whole 20,000 passes the refundable check), but the
  // merchant's shares are now in a payout on its way: in flight is not unpaid, so its part is not covered.
  expect(await refund(call, 20_000n)).toMatchObject({ kind: 'insufficient_balance', unpaidAtomic: 0n })
  expect((await checkRefunds(sql, ALL)).differences).toEqual([])
  expect((await checkBalances(sql, null)).differences).toEqual([])
})
