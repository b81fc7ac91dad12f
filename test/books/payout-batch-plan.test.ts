// recordPayouts sums a batch per wallet in SQL (so the entries no longer cross into the process that
// serves paid calls). What the JavaScript plan did, the SQL plan must do: one payout per wallet whatever the
// case of its address, kind payout/refund/mixed, sums below min wait, the largest wallets first up to
// max_wallets, the oldest entries first up to max_entries, every planned entry linked, and one
// payout_accounts row per account with its owner shares and refunds. Real database (server or PGlite).
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest'
import { recordPayouts } from '../../src/books/payouts.ts'
import type { Sql } from '../../src/db/sql.ts'
import { migratedDatabase } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const A = '0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'
const B = '0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'
const C = '0xcccccccccccccccccccccccccccccccccccccccc'
const D = '0xdddddddddddddddddddddddddddddddddddddddd'

beforeAll(async () => {
  db = await migratedDatabase({ max: 1 })
  sql = db.sql
  await sql`
    INSERT INTO accounts (id, wallet_address, business_name, mode)
    VALUES ('acct_a', ${A}, 'A', 'test'), ('acct_b', ${B}, 'B', 'test'), ('acct_x', ${A}, 'X', 'test')`
})
afterAll(async () => {
  await db?.stop()
})
beforeEach(async () => {
  await sql`DELETE FROM payout_accounts`
  await sql`UPDATE ledger_entries SET payout_id = NULL`
  await sql`DELETE FROM payouts`
  await sql`DELETE FROM ledger_entries`
})

type Entry = [
  account: string | null,
  kind: 'owner_share' | 'fee' | 'refund',
  wallet: string | null,
  amount: number,
]
async function entries(rows: Entry[]): Promise<void> {
  for (const [i, [account, kind, wallet, amount]] of rows.entries()) {
    await sql`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      VALUES (${account}, ${kind}, ${wallet}, ${amount}, 'call', ${`call_${i}`})`
  }
}

function record(o: { minAtomic?: bigint; maxWallets?: number; maxEntries?: number } = {}) {
  return recordPayouts(sql, {
    treasury: '0x000000000000000000000000000000000000dEaD',
    firstNonce: 0,
    minAtomic: o.minAtomic ?? 1n,
    maxWallets: o.maxWallets ?? 500,
    maxEntries: o.maxEntries ?? 100_000,
    afford: () => null,
    sign: async ({ nonce }) => ({ rawTx: '0x', hash: `0x${nonce.toString(16).padStart(64, 'e')}` }),
  })
}

async function payouts() {
  return sql<{ wallet: string; amount_atomic: bigint; kind: string; entries_count: number; nonce: bigint }[]>`
    SELECT wallet, amount_atomic, kind, entries_count, nonce FROM payouts ORDER BY nonce`
}

it('pays one sum per wallet whatever its case, with its kind, largest first, and links every entry', async () => {
  await entries([
    ['acct_a', 'owner_share', A, 900],
    ['acct_a', 'fee', null, 100],
    ['acct_x', 'owner_share', A.toUpperCase().replace('0X', '0x'), 50],
    ['acct_b', 'refund', B, 2_000],
    ['acct_b', 'owner_share', B, 5],
    [null, 'refund', C, 300],
    [null, 'refund', C, 400],
  ])
  const result = await record()
  expect(result.ok && result.waiting).toBe(0)
  expect((await payouts()).map((p) => [p.wallet, p.amount_atomic, p.kind, p.entries_count, p.nonce])).toEqual(
    [
      [B, 2_005n, 'mixed', 2, 0n],
      [A, 950n, 'payout', 2, 1n],
      [C, 700n, 'refund', 2, 2n],
    ],
  )
  const unlinked = await sql`SELECT kind FROM ledger_entries WHERE payout_id IS NULL`
  expect(unlinked.map((r) => r.kind)).toEqual(['fee'])
  const parts = await sql<{ wallet: string; account_id: string; owner: bigint; refund: bigint; n: number }[]>`
    SELECT p.wallet, a.account_id, a.owner_share_atomic AS owner, a.refund_atomic AS refund, a.entries_count AS n
    FROM payout_accounts a JOIN payouts p ON p.id = a.payout_id ORDER BY a.account_id`
  expect(parts.map((p) => [p.wallet, p.account_id, p.owner, p.refund, p.n])).toEqual([
    [A, 'acct_a', 900n, 0n, 1],
    [B, 'acct_b', 5n, 2_000n, 2],
    [A, 'acct_x', 50n, 0n, 1],
  ])
})

it('lets sums below min wait, keeps to max_wallets and to the oldest max_entries', async () => {
  await entries([
    ['acct_a', 'owner_share', A, 100],
    ['acct_b', 'owner_share', B, 300],
    [null, 'refund', C, 200],
    [null, 'refund', D, 5],
    ['acct_a', 'owner_share', A, 1_000],
  ])
  // The oldest 4 entries: A 100, B 300, C 200, D 5. D is below min; of the other three, the two largest.
  const result = await record({ minAtomic: 10n, maxWallets: 2, maxEntries: 4 })
  expect(result.ok && result.waiting).toBe(2)
  expect((await payouts()).map((p) => [p.wallet, p.amount_atomic])).toEqual([
    [B, 300n],
    [C, 200n],
  ])
  const [left] = await sql<{ n: number; sum: bigint }[]>`
    SELECT count(*)::int AS n, sum(amount_atomic)::bigint AS sum FROM ledger_entries WHERE payout_id IS NULL`
  expect([left!.n, left!.sum]).toEqual([3, 1_105n])
  // Nothing payable left above min: an empty batch records nothing.
  await sql`DELETE FROM ledger_entries WHERE payout_id IS NULL AND wallet <> ${D}`
  const empty = await record({ minAtomic: 10n })
  expect(empty).toEqual({ ok: true, payouts: [], waiting: 1 })
})

it('refuses the whole batch when the treasury cannot pay it, and changes nothing', async () => {
  await entries([['acct_a', 'owner_share', A, 900]])
  const refused = await recordPayouts(sql, {
    treasury: '0x000000000000000000000000000000000000dEaD',
    firstNonce: 0,
    minAtomic: 1n,
    maxWallets: 500,
    maxEntries: 100_000,
    afford: (total) => ({ reason: 'usdc_short', detail: `needs ${total}` }),
    sign: async () => {
      throw new Error('must not sign')
    },
  })
  expect(refused).toEqual({ ok: false, refusal: { reason: 'usdc_short', detail: 'needs 900' }, waiting: 0 })
  expect(await payouts()).toEqual([])
  const [row] = await sql`SELECT count(*)::int AS n FROM ledger_entries WHERE payout_id IS NULL`
  expect(row!.n).toBe(1)
})
