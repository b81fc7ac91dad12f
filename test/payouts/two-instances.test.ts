import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { transferEvent } from '../../src/chain/usdc.ts'
import { chainClients, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { startTestService, type TestService } from '../helpers/service.ts'
import { createOwners, seedPaidCalls, sumBy } from './seed.ts'

describe.runIf(usingServer)('two instances on one database', () => {
  let a: TestService
  let b: TestService
  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl, overrides: { chain: { poll_interval_ms: 100 } } })
    b = await startTestService({
      databaseUrl,
      treasury: a.treasury,
      overrides: { chain: { poll_interval_ms: 100 } },
    })
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
  })

  it('run one batch, not two, even when both are asked at once', async () => {
    const owners = await createOwners(a.sql, 3)
    const payers = [await fundedAccount(10_000_000n), await fundedAccount(10_000_000n)]
    const calls = await seedPaidCalls(a.sql, { treasury: a.chain.treasury, owners, payers, calls: 30 })
    await Promise.all([
      a.jobs.runNow('payout-batch'),
      b.jobs.runNow('payout-batch'),
      a.jobs.runNow('payout-threshold'),
      b.jobs.runNow('payout-batch'),
    ])
    // Whichever instance was turned away, a later run of either finds nothing left to pay.
    await Promise.all([a.jobs.runNow('payout-batch'), b.jobs.runNow('payout-batch')])
    for (const o of owners) {
      expect(await usdcBalance(o.wallet)).toBe(
        sumBy(
          calls.filter((c) => c.owner === o),
          (c) => c.ownerShare,
        ),
      )
    }
    const rows = await a.sql<{ status: string }[]>`SELECT status FROM payouts`
    expect(rows).toHaveLength(3)
    expect(rows.every((r) => r.status === 'confirmed')).toBe(true)
    const { publicClient, usdc } = chainClients()
    const out = await publicClient.getLogs({
      address: usdc,
      event: transferEvent,
      args: { from: a.chain.treasury },
      fromBlock: 0n,
    })
    expect(out).toHaveLength(3)
  })
})
