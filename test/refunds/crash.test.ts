// Merchant refunds under a SIGKILL of the payout batcher at each of its crash points (TOLLGATE_FAULT_POINT),
// restarted without the fault on the same database: each refund reaches its payer exactly once, for its exact
// amount, the merchant is paid exactly what its refunds left it, and the books reconcile. Server only: PGlite
// is not safe to reopen after SIGKILL.
import type { Address } from 'viem'
import { afterEach, describe, expect, it } from 'vitest'
import { createRefund } from '../../src/books/refunds.ts'
import { transferEvent } from '../../src/chain/usdc.ts'
import { loadConfig } from '../../src/config/load.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { newId } from '../../src/ids.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { startChildService } from '../helpers/child-service.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { createOwners, killedAtFaultPoint, seedPaidCalls, sumBy } from '../payouts/seed.ts'

const POINTS = ['payout:before_broadcast', 'payout:after_broadcast', 'payout:after_confirm'] as const
const SETTINGS = {
  // Refunds of parts of 0.01–0.015 calls are below the default smallest payout.
  payouts: { interval_ms: 300, threshold_check_interval_ms: 300, min_amount: 0.000001 },
  chain: { poll_interval_ms: 100 },
  log: { level: 'info' },
}

const cleanups: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
})

const until = <T>(what: string, f: () => Promise<T | null | undefined | false>, ms = 45_000): Promise<T> =>
  waitFor(f, { timeoutMs: ms, intervalMs: 100, what })

async function transfers(from: Address, to: Address) {
  const { publicClient, usdc } = chainClients()
  const logs = await publicClient.getLogs({
    address: usdc,
    event: transferEvent,
    args: { from, to },
    fromBlock: 0n,
  })
  return logs.map((l) => l.args.value!)
}

describe.runIf(usingServer)('refunds when the payout batcher is killed', () => {
  for (const point of POINTS) {
    it(`SIGKILL at ${point}: after restart each refund is paid once, exactly`, async () => {
      const databaseUrl = (await freshDatabaseUrl())!
      const sql: Sql = createSql(databaseUrl, { max: 2 })
      cleanups.push(() => sql.end({ timeout: 5 }))
      await migrate(sql)
      const treasury: Funded = await fundedAccount(0n)
      const [owner] = await createOwners(sql, 1)
      const payers = [await fundedAccount(10_000_000n), await fundedAccount(10_000_000n)]
      // Call i is paid by payers[(i * 7) % 2]: call 0 by the first payer, call 1 by the second.
      const calls = await seedPaidCalls(sql, {
        treasury: treasury.address,
        owners: [owner!],
        payers,
        calls: 4,
      })
      const ids = await sql<
        { id: string; proof_key: string }[]
      >`SELECT id, call_proof_key(proof_key, proof) AS proof_key FROM calls`
      const callId = (i: number) => ids.find((r) => r.proof_key === `tx:${calls[i]!.hash.toLowerCase()}`)!.id
      const full = await createRefund(sql, {
        id: newId('re'),
        accountId: owner!.accountId,
        target: { callId: callId(0) },
        amountAtomic: null,
        reason: 'full',
      })
      const half = calls[1]!.amount / 2n
      const partial = await createRefund(sql, {
        id: newId('re'),
        accountId: owner!.accountId,
        target: { callId: callId(1) },
        amountAtomic: half,
        reason: 'partial',
      })
      if (full.kind !== 'created' || partial.kind !== 'created') throw new Error('refunds not created')
      expect(full.refund.amount_atomic).toBe(calls[0]!.amount)
      const before = await Promise.all(payers.map((p) => usdcBalance(p.address)))

      await killedAtFaultPoint(
        { databaseUrl, treasuryKey: treasury.privateKey, point, settings: SETTINGS },
        cleanups,
      )
      const recorded = await sql<{ status: string }[]>`SELECT status FROM payouts`
      // The owner's payout and one refund payout per payer, none resolved at the kill.
      expect(recorded).toHaveLength(3)
      expect(recorded.every((p) => p.status === 'pending' || p.status === 'submitted')).toBe(true)
      expect(await sql`SELECT id FROM refunds WHERE status <> 'pending'`).toHaveLength(0)

      const second = await startChildService({
        databaseUrl,
        treasuryKey: treasury.privateKey,
        settings: SETTINGS,
      })
      cleanups.push(() => second.kill())
      await until('all payouts confirmed and both refunds paid', async () => {
        const rows = await sql<{ status: string }[]>`SELECT status FROM payouts`
        const refunds = await sql<{ status: string }[]>`SELECT status FROM refunds`
        return (
          rows.length === 3 &&
          rows.every((r) => r.status === 'confirmed') &&
          refunds.every((r) => r.status === 'paid')
        )
      })
      // A few more runs pass: nothing new may be sent (a fixed wait on purpose, for a negative).
      await new Promise((r) => setTimeout(r, 1_000))

      // Each payer got its refund once, in one transfer of exactly its amount.
      expect(await transfers(treasury.address, payers[0]!.address)).toEqual([full.refund.amount_atomic])
      expect(await transfers(treasury.address, payers[1]!.address)).toEqual([half])
      expect(await usdcBalance(payers[0]!.address)).toBe(before[0]! + full.refund.amount_atomic)
      expect(await usdcBalance(payers[1]!.address)).toBe(before[1]! + half)
      // The owner: its shares less its parts of the two refunds, once.
      const owed =
        sumBy(calls, (c) => c.ownerShare) - full.refund.owner_debit_atomic - partial.refund.owner_debit_atomic
      expect(await transfers(treasury.address, owner!.wallet)).toEqual([owed])
      const paid = await sql<{ id: string; transaction: string; tx_hash: string }[]>`
        SELECT r.id, r.transaction, p.tx_hash FROM refunds r JOIN payouts p ON p.id = r.payout_id
        WHERE r.status = 'paid' ORDER BY r.id`
      expect(paid).toHaveLength(2)
      for (const r of paid) expect(r.transaction).toBe(r.tx_hash)
      const events = await sql<
        { type: string }[]
      >`SELECT type FROM events WHERE type LIKE 'refund.%' ORDER BY type`
      expect(events.map((e) => e.type)).toEqual([
        'refund.created',
        'refund.created',
        'refund.paid',
        'refund.paid',
      ])

      const config = loadConfig({ env: { NODE_ENV: 'test', DATABASE_URL: databaseUrl } })
      const { publicClient, usdc } = chainClients()
      const report = await reconcile({
        sql,
        chain: { publicClient, treasury: treasury.address, usdc: { address: usdc } } as never,
        config,
      })
      expect(report.differences).toEqual([])
      expect(report.refunds).toMatchObject({ refunds: 2, paid: 2 })
    }, 120_000)
  }
})
