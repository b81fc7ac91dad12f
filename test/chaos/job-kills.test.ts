// x402 settlement and the payout batch, each SIGKILLed mid-run (the real server process) and restarted on the
// same PostgreSQL server: nothing settled twice or lost, the owner paid exactly its share, reconcile exit 0.
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { formatJobKills, runJobKills } from './job-kills.ts'

describe.runIf(existsSync('/usr/lib/postgresql'))('background jobs killed mid-run', () => {
  it('settlement killed after its first broadcast, payouts killed after theirs: all settled and paid once', async () => {
    const lines: string[] = []
    const result = await runJobKills({ authorizations: 12, log: (line) => lines.push(line) })
    const report = formatJobKills(result)
    process.stdout.write(`\n${report}\n`)
    const context = `${lines.join('\n')}\n${report}`
    expect(
      result.kills.map((k) => [k.point, k.signal, k.pidGone]),
      context,
    ).toEqual([
      ['settlement:after_broadcast', 'SIGKILL', true],
      ['payout:after_broadcast', 'SIGKILL', true],
    ])
    expect(result.served, context).toBe(12)
    expect(result.settledOnChain, context).toBe(12)
    expect(result.settledInBooks, context).toBe(12)
    expect(result.ownerShareBookedAtomic, context).toBe(result.expectedOwnerShareAtomic)
    expect(result.ownerPaidAtomic, context).toBe(result.expectedOwnerShareAtomic)
    expect(result.payoutTransfers, context).toBe(result.payoutsConfirmed)
    expect(result.reconcileExit, context).toBe(0)
    // Settlements and payouts killed mid-transition leave the running balances equal to their entries.
    expect(result.balancesChecked, context).toBeGreaterThan(0)
    expect(result.balanceDrift, context).toBe(0)
    expect(result.ok, context).toBe(true)
  })
})
