// Reconcile from a checkpoint: the first run checks everything and stores where it got to; the next checks
// only what is new since (a drift in an account untouched since is the full run's to find); a run with
// differences does not move the checkpoint; --full checks everything again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcileFromCheckpoint } from '../../src/control-plane/jobs/reconcile-checkpoint.ts'
import { type Funded, fundedAccount } from '../helpers/accounts.ts'
import { startTestService, type TestService } from '../helpers/service.ts'
import { createOwners, type Owner, seedPaidCalls } from '../payouts/seed.ts'

const HOUR = 3_600_000
let svc: TestService
let owners: Owner[]
let payers: Funded[]

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      // No look-back: "new since the checkpoint" is exactly what came after it.
      payouts: { interval_ms: HOUR, threshold_check_interval_ms: HOUR, reconcile_lookback_ms: 1 },
      settlement: { interval_ms: HOUR },
    },
  })
  owners = await createOwners(svc.sql, 2)
  payers = [await fundedAccount(100_000_000n)]
}, 60_000)
afterAll(async () => {
  await svc?.stop()
})

const deps = () => ({ sql: svc.sql, chain: svc.chain, config: svc.config })

async function untilAfter(ms: number) {
  // The database clock must move past the checkpoint before the next writes (a poll, not a sleep).
  const deadline = Date.now() + 5_000
  while ((await svc.sql<{ t: Date }[]>`SELECT now() AS t`)[0]!.t.getTime() <= ms) {
    if (Date.now() > deadline) throw new Error('clock did not move')
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe('reconcile from a checkpoint', () => {
  it('checks what is new since the last clean run; --full checks everything', async () => {
    await seedPaidCalls(svc.sql, { treasury: svc.chain.treasury, owners: [owners[0]!], payers, calls: 5 })
    const first = await reconcileFromCheckpoint(deps(), { full: false, commitLagMs: 0 })
    expect(first.differences).toEqual([])
    expect(first.checkpoint).toMatchObject({ mode: 'full', since: null, saved: true })
    const [cp] = await svc.sql`SELECT to_time, ledger_entry_id FROM reconcile_checkpoints`
    expect(cp!.ledger_entry_id).toBeGreaterThan(0n)
    await untilAfter(cp!.to_time.getTime())

    // New calls for the second owner only; the first owner's balance drifts (untouched since the checkpoint).
    await seedPaidCalls(svc.sql, { treasury: svc.chain.treasury, owners: [owners[1]!], payers, calls: 3 })
    const [slot] = await svc.sql<{ slot: number }[]>`
      SELECT slot FROM account_balances WHERE account_id = ${owners[0]!.accountId} LIMIT 1`
    await svc.sql`UPDATE account_balances SET fees_atomic = fees_atomic + 7
                  WHERE account_id = ${owners[0]!.accountId} AND slot = ${slot!.slot}`

    const second = await reconcileFromCheckpoint(deps(), { full: false, commitLagMs: 0 })
    expect(second.checkpoint?.mode).toBe('incremental')
    expect(second.differences).toEqual([])
    expect(second.inflow.claims).toBe(3)
    expect(second.balances.accounts_checked).toBe(1)
    const [moved] = await svc.sql`SELECT to_time FROM reconcile_checkpoints`
    expect(moved!.to_time.getTime()).toBeGreaterThan(cp!.to_time.getTime())

    const full = await reconcileFromCheckpoint(deps(), { full: true, commitLagMs: 0 })
    expect(full.checkpoint).toMatchObject({ mode: 'full', saved: false })
    expect(full.ok).toBe(false)
    expect(full.differences.join('\n')).toContain(`balance of account ${owners[0]!.accountId}`)
    expect(full.inflow.claims).toBe(8)
    const [kept] = await svc.sql`SELECT to_time FROM reconcile_checkpoints`
    expect(kept!.to_time).toEqual(moved!.to_time)

    // A drift in an account touched since the checkpoint is the incremental run's to find.
    await untilAfter(moved!.to_time.getTime())
    await seedPaidCalls(svc.sql, { treasury: svc.chain.treasury, owners: [owners[1]!], payers, calls: 1 })
    await svc.sql`UPDATE account_balances SET fees_atomic = fees_atomic - 7
                  WHERE account_id = ${owners[0]!.accountId} AND slot = ${slot!.slot}`
    const [slot1] = await svc.sql<{ slot: number }[]>`
      SELECT slot FROM account_balances WHERE account_id = ${owners[1]!.accountId} LIMIT 1`
    await svc.sql`UPDATE account_balances SET paid_out_atomic = paid_out_atomic + 1
                  WHERE account_id = ${owners[1]!.accountId} AND slot = ${slot1!.slot}`
    const third = await reconcileFromCheckpoint(deps(), { full: false, commitLagMs: 0 })
    expect(third.ok).toBe(false)
    expect(third.checkpoint).toMatchObject({ mode: 'incremental', saved: false })
    expect(third.differences.join('\n')).toContain(`balance of account ${owners[1]!.accountId}`)
    await svc.sql`UPDATE account_balances SET paid_out_atomic = paid_out_atomic - 1
                  WHERE account_id = ${owners[1]!.accountId} AND slot = ${slot1!.slot}`
    const clean = await reconcileFromCheckpoint(deps(), { full: true, commitLagMs: 0 })
    expect(clean.differences).toEqual([])
    expect(clean.checkpoint).toMatchObject({ mode: 'full', saved: true })
  }, 120_000)
})
