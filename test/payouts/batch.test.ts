import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { startTestService, type TestService } from '../helpers/service.ts'
import {
  captureCalls,
  createOwners,
  type Owner,
  payTreasury,
  type SeededCall,
  seedPaidCalls,
  sumBy,
} from './seed.ts'

const SMALL = 5_000n

const ADMIN_TOKEN = 'batch-test-admin-token-0123456789'
let svc: TestService
let owners: Owner[]
let small: Owner | undefined
let calls: SeededCall[]
let before: bigint[]

beforeAll(async () => {
  svc = await startTestService({ adminToken: ADMIN_TOKEN, overrides: { chain: { poll_interval_ms: 100 } } })
  owners = await createOwners(svc.sql, 3)
  ;[small] = await createOwners(svc.sql, 1)
  const payers: Funded[] = []
  for (let i = 0; i < 20; i++) payers.push(await fundedAccount(100_000_000n))
  calls = await seedPaidCalls(svc.sql, { treasury: svc.chain.treasury, owners, payers, calls: 1000 })
  // One call of 0.005 USDC for a fourth owner: its 95% (0.00475) is below payouts.min_amount (0.01).
  const [hash] = await payTreasury(svc.chain.treasury, [{ payer: payers[0]!, amount: SMALL }])
  await captureCalls(svc.sql, [{ owner: small!, payer: payers[0]!.address, hash: hash!, amount: SMALL }])
  before = await Promise.all(owners.map((o) => usdcBalance(o.wallet)))
}, 120_000)

afterAll(async () => {
  await svc?.stop()
})

describe('one batch of 1,000 paid calls', () => {
  it('pays each owner exactly the sum of its 95% shares; the treasury keeps exactly the fees', async () => {
    const fees = sumBy(calls, (c) => c.fee)
    const received = sumBy(calls, (c) => c.amount)
    expect(await usdcBalance(svc.chain.treasury)).toBe(received + SMALL)

    await svc.jobs.runNow('payout-batch')

    for (const [i, o] of owners.entries()) {
      const share = sumBy(
        calls.filter((c) => c.owner === o),
        (c) => c.ownerShare,
      )
      expect(share).toBeGreaterThan(0n)
      expect((await usdcBalance(o.wallet)) - before[i]!).toBe(share)
    }
    // The fees, plus the small owner's whole call (its share waits for the minimum).
    expect(await usdcBalance(svc.chain.treasury)).toBe(fees + SMALL)
    const payouts = await svc.sql<{ wallet: string; status: string; entries_count: number }[]>`
      SELECT wallet, status, entries_count FROM payouts ORDER BY wallet`
    expect(payouts).toHaveLength(3)
    expect(payouts.every((p) => p.status === 'confirmed')).toBe(true)
    // One owner share entry per owner per capture batch (1,000 calls captured 256 a statement: 4 batches),
    // not one per call.
    expect(payouts.reduce((s, p) => s + p.entries_count, 0)).toBe(4 * owners.length)
    const [unpaid] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM ledger_entries
      WHERE kind = 'owner_share' AND payout_id IS NULL AND account_id <> ${small!.accountId}`
    expect(unpaid!.n).toBe(0)
    const events = await svc.sql<
      { account_id: string }[]
    >`SELECT account_id FROM events WHERE type = 'payout.sent'`
    expect(events.map((e) => e.account_id).sort()).toEqual(owners.map((o) => o.accountId).sort())
  })

  it('reconciles to a zero difference, per time range too', async () => {
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.ok).toBe(true)
    const received = sumBy(calls, (c) => c.amount)
    expect(report.inflow.chain_proof_transfers_atomic).toBe((received + SMALL).toString())
    expect(report.inflow.captured_calls_atomic).toBe((received + SMALL).toString())
    expect(report.split.captured_atomic).toBe((received + SMALL).toString())
    const fromNow = await reconcile(
      { sql: svc.sql, chain: svc.chain, config: svc.config },
      { fromMs: Date.now() - 3_600_000, toMs: Date.now() + 60_000 },
    )
    expect(fromNow.differences).toEqual([])
    expect(report.outflow.chain_transfers_atomic).toBe(report.outflow.confirmed_payouts_atomic)
    expect(report.outflow.difference_atomic).toBe('0')
  })

  it('lets amounts below payouts.min_amount wait', async () => {
    expect(await usdcBalance(small!.wallet)).toBe(0n)
    const [row] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM ledger_entries WHERE account_id = ${small!.accountId} AND payout_id IS NULL
        AND kind = 'owner_share'`
    expect(row!.n).toBe(1)
  })
})

describe('API', () => {
  it('lists the account’s payouts with their transaction, and shows the balance on GET /account', async () => {
    // The owners were inserted directly; give the first one an API key through the real register flow.
    const reg = await svc.api('/api/v1/register', {
      body: { wallet_address: owners[0]!.wallet, business_name: 'Owner 0 (API)' },
    })
    expect(reg.status).toBe(201)
    // A second account on the same wallet sees nothing of the first account's payouts.
    const list = await svc.api('/api/v1/payouts', { key: reg.body.api_key })
    expect(list.status).toBe(200)
    expect(list.body).toMatchObject({ object: 'list', data: [], has_more: false })
    const key = await apiKeyFor(owners[0]!.accountId)
    const mine = await svc.api('/api/v1/payouts?limit=10', { key })
    expect(mine.body.data).toHaveLength(1)
    const p = mine.body.data[0]
    expect(p).toMatchObject({
      object: 'payout',
      status: 'confirmed',
      kind: 'payout',
      wallet: owners[0]!.wallet,
    })
    expect(p.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    // Its owner shares of the 4 capture batches (test/payouts/seed.ts captures 256 calls a statement).
    expect(p.entries_count).toBe(4)
    const one = await svc.api(`/api/v1/payouts/${p.id}`, { key })
    expect(one.body).toEqual(p)
    expect((await svc.api('/api/v1/payouts/po_nope', { key })).status).toBe(404)
    expect((await svc.api('/api/v1/payouts?status=bogus', { key })).status).toBe(400)
    const account = await svc.api('/api/v1/account', { key })
    expect(account.body.balance.paid_out.amount_atomic).toBe(p.amount_atomic)
    expect(account.body.balance.pending.amount_atomic).toBe('0')
    const owner0Calls = calls.filter((c) => c.owner === owners[0])
    expect(account.body.balance.captured.amount_atomic).toBe(sumBy(owner0Calls, (c) => c.amount).toString())
    expect(account.body.balance.fees.amount_atomic).toBe(sumBy(owner0Calls, (c) => c.fee).toString())
  })

  it('serves the reconcile report on the admin port', async () => {
    const r = await fetch(`http://127.0.0.1:${svc.adminPort}/reconcile`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    })
    const body = await r.json()
    expect(body.differences).toEqual([])
    expect(r.status).toBe(200)
  })
})

/** A fresh API key for an account created directly in the database. */
async function apiKeyFor(accountId: string): Promise<string> {
  const { newApiKey, hashApiKey, apiKeyHint, newId } = await import('../../src/ids.ts')
  const { insertApiKey } = await import('../../src/db/accounts.ts')
  const key = newApiKey('test')
  await insertApiKey(svc.sql, {
    id: newId('key'),
    accountId,
    keyHash: hashApiKey(key),
    hint: apiKeyHint(key),
  })
  return key
}
