import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { startTestService, type TestService } from '../helpers/service.ts'
import { captureCalls, createOwners, mintUsdc, type Owner, payTreasury } from './seed.ts'

let svc: TestService
let owner: Owner | undefined

beforeAll(async () => {
  svc = await startTestService({ overrides: { chain: { poll_interval_ms: 100 } } })
  ;[owner] = await createOwners(svc.sql, 1)
})
afterAll(async () => {
  await svc?.stop()
})

async function payoutsCheck() {
  const r = await fetch(`http://127.0.0.1:${svc.adminPort}/readyz`)
  const body = await r.json()
  return body.checks.find((c: { name: string }) => c.name === 'payouts')
}

describe('treasury short of USDC', () => {
  it('waits, says why in readiness and metrics, marks nothing paid; once topped up, pays', async () => {
    const payer = await fundedAccount(10_000_000n)
    const [hash] = await payTreasury(svc.chain.treasury, [{ payer, amount: 2_000_000n }])
    await captureCalls(svc.sql, [{ owner: owner!, payer: payer.address, hash: hash!, amount: 2_000_000n }])
    // The treasury's USDC leaves (an operator sweep, say): the 1.9 USDC owed can no longer be paid.
    const sweep = await import('viem').then(({ createWalletClient, http }) =>
      createWalletClient({ account: svc.treasury.account, transport: http(svc.chain.rpcUrl) }),
    )
    const { erc20 } = await import('../helpers/accounts.ts')
    const sink = (await fundedAccount(0n)).address
    const tx = await sweep.writeContract({
      address: svc.chain.usdc.address,
      abi: erc20,
      functionName: 'transfer',
      args: [sink, 2_000_000n],
      chain: null,
    })
    await svc.chain.publicClient.waitForTransactionReceipt({ hash: tx })
    expect(await usdcBalance(svc.chain.treasury)).toBe(0n)

    await svc.jobs.runNow('payout-batch')
    expect(await svc.sql`SELECT id FROM payouts`).toHaveLength(0)
    const [unpaid] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM ledger_entries WHERE payout_id IS NULL AND kind = 'owner_share'`
    expect(unpaid!.n).toBe(1)
    const check = await payoutsCheck()
    expect(check.ok).toBe(false)
    expect(check.detail).toMatch(/holds 0 USDC but the next payout batch needs 1\.9 USDC/)
    const metrics = await (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
    expect(metrics).toMatch(/tollgate_payouts_blocked\{reason="usdc_short"\} 1/)
    expect(await usdcBalance(owner!.wallet)).toBe(0n)

    await mintUsdc(svc.chain.treasury, 1_900_000n)
    await svc.jobs.runNow('payout-batch')
    expect(await usdcBalance(owner!.wallet)).toBe(1_900_000n)
    expect((await payoutsCheck()).ok).toBe(true)
    const [p] = await svc.sql<{ status: string }[]>`SELECT status FROM payouts`
    expect(p!.status).toBe('confirmed')
  })
})

describe('treasury short of gas', () => {
  it('waits with a readiness reason and pays once it has gas again', async () => {
    const payer = await fundedAccount(10_000_000n)
    const [hash] = await payTreasury(svc.chain.treasury, [{ payer, amount: 1_000_000n }])
    await captureCalls(svc.sql, [{ owner: owner!, payer: payer.address, hash: hash!, amount: 1_000_000n }])
    const setBalance = (wei: string) =>
      svc.chain.publicClient.request({
        method: 'anvil_setBalance' as never,
        params: [svc.chain.treasury, wei] as never,
      })
    await setBalance('0x0')
    await svc.jobs.runNow('payout-batch')
    const check = await payoutsCheck()
    expect(check.ok).toBe(false)
    expect(check.detail).toMatch(/gas/)
    expect(await svc.sql`SELECT id FROM payouts WHERE status <> 'confirmed'`).toHaveLength(0)
    await setBalance('0x8ac7230489e80000')
    await svc.jobs.runNow('payout-batch')
    expect(await usdcBalance(owner!.wallet)).toBe(1_900_000n + 950_000n)
    expect((await payoutsCheck()).ok).toBe(true)
  })
})
