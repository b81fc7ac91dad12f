// The bounded chaos round of the charges measured after the call: x402 `upto` (a fresh permit per call) and
// batch-settlement channels (a voucher per call, charged the tokens measured) pay token streams through two
// instances on one PostgreSQL server, restarted twice while streams are in flight (fast, then a crash).
// Every call serves at most once (also when every payment header is sent again), none is served unpaid,
// each is charged exactly the tokens streamed; upto permits settle for exactly their charge (the payer's
// wallet moves by their sum), channels are charged the sum of their calls and claimed on chain for it (one
// channel call in ten hangs upstream: booked in doubt at its ceiling, never served, the client paying on);
// reconcile exits 0 and every running balance equals its entries. Two of the upto payers never approved
// Permit2: each permit carries its EIP-2612 approval (eip2612GasSponsoring), submitted at settlement. One is a
// contract wallet (ERC-1271): its permits are checked by the wallet, at verification and at settlement.
import { existsSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { formatSchemes, runSchemesChaos } from './schemes-restart.ts'

describe.runIf(existsSync('/usr/lib/postgresql'))('chaos: upto and batch-settlement through restarts', () => {
  it('PostgreSQL restarted twice mid-stream: measured charges served once, paid, settled exactly', async () => {
    const lines: string[] = []
    const result = await runSchemesChaos({
      loadMs: 15_000,
      uptoWorkers: 4,
      sponsoredPayers: 2,
      smartWalletPayers: 1,
      channels: 4,
      restarts: ['fast', 'immediate'],
      log: (line) => lines.push(line),
    })
    const report = formatSchemes(result)
    process.stdout.write(`\n${report}\n`)
    const context = `${lines.join('\n')}\n${report}\n${result.crashOutput.join('\n')}`
    // The instances ride the restarts out.
    expect(result.crashed, context).toBe(0)
    expect(result.restarts, context).toHaveLength(2)
    // The restarts landed while streams were being served.
    for (const r of result.restarts) expect(r.streamsInFlight, context).toBeGreaterThan(0)
    for (const f of [result.upto, result.batch]) {
      expect(f.calls, context).toBeGreaterThan(10)
      // Every call ended served (a restart costs a 503 and a retry, never the call).
      expect(f.gaveUp, context).toBe(0)
      expect(f.served, context).toBe(f.calls - f.refused - f.inDoubt)
      // At most once, never unpaid, never paid without being served.
      expect(f.servedTwice, context).toBe(0)
      expect(f.servedUnpaid, context).toBe(0)
      expect(f.paidNotServed, context).toBe(0)
      // Charged exactly the tokens streamed (prompt and output, to the base unit).
      expect(f.chargeMismatch, context).toBe(0)
      // A PostgreSQL restart does not cut a stream: the upstream and the client's connection do not need it.
      expect(f.cut, context).toBe(0)
      expect(f.whole, context).toBe(f.served)
    }
    // Nothing the load refused was refused for good (a permit is refused only if spent; none is).
    expect(result.upto.refused + result.batch.refused, context).toBe(0)
    expect(result.upto.acrossRestart + result.batch.acrossRestart, context).toBeGreaterThan(0)
    // upto: each permit settled for its charge, never above what was signed; the wallet moved their sum.
    expect(result.upto.unsettled, context).toBe(0)
    // Settled before the answer by default: such receipts exist, and each names the transaction that settled
    // its permit (the claim's, settled).
    expect(result.upto.settledBeforeAnswer, context).toBeGreaterThan(0)
    expect(result.upto.receiptOtherTx, context).toBe(0)
    expect(result.upto.settledNotBooked, context).toBe(0)
    expect(result.upto.overSigned, context).toBe(0)
    expect(result.upto.uncapturedSettled, context).toBe(0)
    expect(result.upto.payerMovedAtomic, context).toBe(result.upto.charged)
    // Payers that never approved Permit2 were served and their permits settled with the approval (each
    // one at a time: a 402 while the previous is unsettled, then a new signature).
    expect(result.upto.sponsoredServed, context).toBeGreaterThan(0)
    expect(result.upto.sponsoredSettled, context).toBe(result.upto.sponsoredServed)
    // The smart wallet's calls were served and each permit settled, the wallet asked both times.
    expect(result.upto.smartWalletServed, context).toBeGreaterThan(0)
    expect(result.upto.smartWalletSettled, context).toBe(result.upto.smartWalletServed)
    // A channel call the upstream never answered is in doubt: booked once at its voucher's whole ceiling
    // (a cumulative voucher cannot be skipped), never served, and its client pays on after the corrective 402.
    expect(result.upto.inDoubt, context).toBe(0)
    expect(result.batch.inDoubt, context).toBeGreaterThan(0)
    expect(result.batch.doubtRows, context).toBe(result.batch.inDoubt)
    expect(result.batch.doubtMismatch, context).toBe(0)
    // Channels: charged the sum of their calls (those in doubt included), claimed (books and chain) for it.
    expect(result.batch.chargedNotSum, context).toBe(0)
    expect(result.batch.claimedNotCharged, context).toBe(0)
    expect(result.batch.onChainNotCharged, context).toBe(0)
    // The published client was put right by the corrective 402 (each call is charged below its voucher).
    expect(result.batch.corrections, context).toBeGreaterThan(0)
    // Sent again on both instances, no permit or voucher serves a second time.
    expect(result.replaySends, context).toBeGreaterThan(0)
    expect(result.replayServed, context).toBe(0)
    expect(result.reconcileExit, context).toBe(0)
    expect(result.balancesChecked, context).toBeGreaterThan(0)
    expect(result.balanceDrift, context).toBe(0)
  })
})
