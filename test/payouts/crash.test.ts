// The batcher SIGKILLed at each crash point (TOLLGATE_FAULT_POINT), then restarted without the fault on the
// same database: every owner is paid exactly once. Server only: PGlite is not safe to reopen after SIGKILL.
import type { Address } from 'viem'
import { afterEach, describe, expect, it } from 'vitest'
import { transferEvent } from '../../src/chain/usdc.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { startChildService } from '../helpers/child-service.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { createOwners, killedAtFaultPoint, seedPaidCalls, sumBy } from './seed.ts'

const POINTS = ['payout:before_broadcast', 'payout:after_broadcast', 'payout:after_confirm'] as const
const SETTINGS = {
  payouts: { interval_ms: 300, threshold_check_interval_ms: 300 },
  chain: { poll_interval_ms: 100 },
  log: { level: 'info' },
}

const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
})

async function transfersFrom(treasury: Address) {
  const { publicClient, usdc } = chainClients()
  return publicClient.getLogs({
    address: usdc,
    event: transferEvent,
    args: { from: treasury },
    fromBlock: 0n,
  })
}

describe.runIf(usingServer)('crash safety', () => {
  for (const point of POINTS) {
    it(`SIGKILL at ${point}: after restart every owner is paid exactly once`, async () => {
      const databaseUrl = (await freshDatabaseUrl())!
      const sql: Sql = createSql(databaseUrl, { max: 2 })
      cleanups.push(() => sql.end({ timeout: 5 }))
      await migrate(sql)
      const treasury: Funded = await fundedAccount(0n)
      const owners = await createOwners(sql, 3)
      const payers = [await fundedAccount(10_000_000n), await fundedAccount(10_000_000n)]
      const calls = await seedPaidCalls(sql, { treasury: treasury.address, owners, payers, calls: 12 })

      const first = await killedAtFaultPoint(
        { databaseUrl, treasuryKey: treasury.privateKey, point, settings: SETTINGS },
        cleanups,
      )
      expect(first.output()).not.toMatch(/shutting down/)
      const recorded = await sql<{ status: string }[]>`SELECT status FROM payouts`
      expect(recorded).toHaveLength(3)
      expect(recorded.every((p) => p.status === 'pending' || p.status === 'submitted')).toBe(true)
      // The kill happened where it says: nothing sent / the first transfer mined / all mined, none marked.
      const minedAtKill = {
        'payout:before_broadcast': 0,
        'payout:after_broadcast': 1,
        'payout:after_confirm': 3,
      }
      expect(await transfersFrom(treasury.address)).toHaveLength(minedAtKill[point])

      const second = await startChildService({
        databaseUrl,
        treasuryKey: treasury.privateKey,
        settings: SETTINGS,
      })
      cleanups.push(() => second.kill())
      await waitFor(
        async () => {
          const rows = await sql<{ status: string }[]>`SELECT status FROM payouts`
          return rows.length === 3 && rows.every((r) => r.status === 'confirmed')
        },
        { what: 'all payouts confirmed', timeoutMs: 45_000, intervalMs: 100 },
      )
      // Let a few more runs pass: nothing new may be sent (a fixed wait on purpose, for a negative).
      await new Promise((r) => setTimeout(r, 1_000))
      for (const o of owners) {
        const share = sumBy(
          calls.filter((c) => c.owner === o),
          (c) => c.ownerShare,
        )
        expect(await usdcBalance(o.wallet)).toBe(share)
      }
      expect(await transfersFrom(treasury.address)).toHaveLength(3)
      expect(await usdcBalance(treasury.address)).toBe(sumBy(calls, (c) => c.fee))
      const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM payouts`
      expect(row!.n).toBe(3)
      const events = await sql`SELECT id FROM events WHERE type = 'payout.sent'`
      expect(events).toHaveLength(3)
    }, 90_000)
  }
})
