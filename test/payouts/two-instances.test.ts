import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { createWalletClient, http } from 'viem'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { transferEvent } from '../../src/chain/usdc.ts'
import { chainClients, erc20, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
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

  it('npm run reconcile: exit 0 when the books match, 1 with the difference listed when they do not', async () => {
    const root = join(import.meta.dirname, '..', '..')
    const run = () =>
      promisify(execFile)(join(root, 'node_modules', '.bin', 'tsx'), ['src/cli/reconcile.ts'], {
        cwd: root,
        env: {
          ...process.env,
          NODE_ENV: 'test',
          DATABASE_URL: a.databaseUrl,
          RPC_URL: inject('rpcUrl'),
          USDC_ADDRESS: inject('usdcAddress'),
          TREASURY_PRIVATE_KEY: a.treasury.privateKey,
        },
      }).then(
        (r) => ({ code: 0, out: r.stdout }),
        (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }),
      )
    const ok = await run()
    expect(ok.out).toMatch(/OK: no difference/)
    expect(ok.code).toBe(0)
    // USDC leaves the treasury outside any payout: the books no longer match the chain.
    const wallet = createWalletClient({ account: a.treasury.account, transport: http(inject('rpcUrl')) })
    const sink = (await fundedAccount(0n)).address
    const hash = await wallet.writeContract({
      address: a.chain.usdc.address,
      abi: erc20,
      functionName: 'transfer',
      args: [sink, 1n],
      chain: null,
    })
    await a.chain.publicClient.waitForTransactionReceipt({ hash })
    const bad = await run()
    expect(bad.code).toBe(1)
    expect(bad.out).toMatch(/unknown outflow\s+1 /)
    expect(bad.out).toContain(`outflow ${hash}: 1 to ${sink} matches no payout`)
  }, 60_000)
})
