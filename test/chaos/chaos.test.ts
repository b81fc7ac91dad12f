// The bounded chaos run for CI: two server processes on a private PostgreSQL server under paid load,
// PostgreSQL restarted twice (the SIGKILL, RPC and upstream rounds run in `npm run chaos`). The processes
// must survive the restarts, answer 503 only while the database is down (at once: no client times out), and
// recover within a grace of its return; no proof is served twice (replayed on both instances afterwards) and
// nobody is charged for a call not served. A quarter of the calls are usage-priced token streams, paid at
// the ceiling and charged what they streamed, the rest refunded once.
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { READY_TIMEOUT_MS } from '../../src/observability/admin.ts'
import { formatTable, runChaos } from './harness.ts'

describe.runIf(existsSync('/usr/lib/postgresql'))('chaos (bounded)', () => {
  it('PostgreSQL restarted twice under paid load: no crash, 503 only in the outage, recovery', async () => {
    const lines: string[] = []
    const result = await runChaos({
      proofs: 160,
      faults: ['pg-restart', 'pg-restart'],
      roundMs: 8_000,
      concurrency: 8,
      log: (line) => lines.push(line),
    })
    const table = formatTable(result)
    process.stdout.write(`\n${table}\n`)
    const context = `${lines.join('\n')}\n${table}\n${result.crashOutput.join('\n')}`
    // No instance died on its own: a database restart is a fault to ride out, not a reason to exit.
    expect(result.crashed, context).toBe(0)
    for (const round of result.rounds) {
      expect(round.crashed, context).toBe(0)
      // Recovery: every proof ended served or refused, none left hanging.
      expect(round.gaveUp, context).toBe(0)
      expect(round.served, context).toBe(round.proofs)
      // 503 (with Retry-After) while the database is down, never outside the fault and its grace; no network
      // error outside it either, and no client left waiting out its timeout: an outage answers at once.
      expect(round.status503Outside, context).toBe(0)
      expect(round.networkOutside, context).toBe(0)
      expect(round.clientTimeouts, context).toBe(0)
      // /readyz answers within its own deadline whatever the database does (plus scheduling slack).
      expect(round.readyzMaxMs, context).toBeLessThan(READY_TIMEOUT_MS + 1_500)
      expect(round.status503NoRetryAfter, context).toBe(0)
      expect(round.api500, context).toBe(0)
      expect(round.readyAfter, context).toBe(true)
      if (round.fault === 'pg-restart') {
        expect(round.status503, context).toBeGreaterThan(0)
        expect(round.readyRedSeen, context).toBe(true)
      }
      expect(round.reconcileExit, context).toBe(0)
      // The running balances still equal the sums of their entries after the fault.
      expect(round.balancesChecked, context).toBeGreaterThan(0)
      expect(round.balanceDrift, context).toBe(0)
    }
    // A proof serves at most once, also when every proof is replayed on both instances afterwards; nobody is
    // charged for a call the upstream did not serve.
    for (const round of result.rounds) {
      expect(round.servedTwice, context).toBe(0)
      expect(round.chargedNotServed, context).toBe(0)
      // A database restart loses no capture: captures of served calls wait in memory and are written
      // once it is back (only a killed process may lose the ones it held, and none is killed here).
      expect(round.servedNotCaptured + round.servedNotCapturedKilledInFlight, context).toBe(0)
      // Usage-priced calls (a prepaid ceiling, tokens read from a stream a restart lands in the middle of):
      // every one served, received whole by its client, charged exactly the usage it received (never above
      // the ceiling), and the rest of the ceiling refunded by exactly one ledger entry.
      expect(round.usageServed, context).toBe(round.usageProofs)
      expect(round.usageCompleted, context).toBe(round.usageServed)
      expect(round.usageServedUnpaid, context).toBe(0)
      expect(round.usageOverCeiling, context).toBe(0)
      expect(round.usageChargeMismatch, context).toBe(0)
      expect(round.usageRefundMismatch, context).toBe(0)
      expect(round.usageCharged + round.usageRefunded, context).toBe(1_000n * BigInt(round.usageProofs))
    }
    // The restarts landed mid-stream: at least one stream in all ran across a restart and was charged right.
    expect(
      result.rounds.reduce((n, r) => n + r.usageMidStream, 0),
      context,
    ).toBeGreaterThan(0)
    expect(result.replayServedAgain, context).toBe(0)
    // A proof refused with a 402 during the load and served on replay is no double serve, but that 402 was
    // not final: say so loudly (the harness prints each such proof's attempts and claim).
    if (result.replayFirstServes > 0) {
      console.warn(
        `chaos: ${result.replayFirstServes} proof(s) first served on replay after a 402\n${context}`,
      )
    }
  })
})
