// Sustained x402 load, bounded for CI: 300 calls paid by the published x402 client, one fresh authorization
// each, signed before the load. The settlement job runs on its own timer while they are served: every served
// call settles before its validBefore, none expires, revenue is booked only for settled money, the payers are
// debited exactly, and reconcile finds no difference.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decodePayment } from 'x402/schemes'
import { fire, startX402Setup, waitForDrain, type X402Setup } from './harness.ts'

const CALLS = 300

let setup: X402Setup
beforeAll(async () => {
  // The leader's batches under load: calls settle after (explicitly; the default settles before the answer).
  setup = await startX402Setup({
    overrides: { settlement: { interval_ms: 200, before_answer: { enabled: false } } },
  })
})
afterAll(async () => {
  await setup?.stop()
})

describe('x402 settlement under sustained load', () => {
  it('settles every served call before its validBefore and books only settled money', async () => {
    const { chain, priceAtomic } = setup
    const signed = await setup.sign(CALLS)
    const payers = chain.payers.slice(0, 4).map((p) => p.address)
    const before = await Promise.all(payers.map((p) => setup.balanceOf(p)))
    const treasuryBefore = await setup.balanceOf(chain.treasury.address)

    const load = await fire(
      setup,
      signed.map((s) => s.header),
      32,
    )
    expect(Object.fromEntries(load.statuses)).toEqual({ 200: CALLS })
    expect(setup.upstream.count()).toBe(CALLS)

    const drain = await waitForDrain(setup, 60_000)
    expect(drain.state).toMatchObject({
      captured: CALLS,
      settled: CALLS,
      expired: 0,
      reverted: 0,
      backlog: 0,
    })

    // Each authorization used on chain (a successful transferWithAuthorization is mined before validBefore).
    for (const { header } of signed.filter((_, i) => i % 25 === 0)) {
      const a = (
        decodePayment(header).payload as { authorization: { from: `0x${string}`; nonce: `0x${string}` } }
      ).authorization
      expect(await setup.authorizationUsed(a.from, a.nonce)).toBe(true)
    }
    // Payers debited exactly for their calls; the treasury received all of it.
    const after = await Promise.all(payers.map((p) => setup.balanceOf(p)))
    for (const [i] of payers.entries()) {
      const calls = BigInt(signed.filter((s) => s.payer === i).length)
      expect(before[i]! - after[i]!).toBe(calls * priceAtomic)
    }
    expect((await setup.balanceOf(chain.treasury.address)) - treasuryBefore).toBe(BigInt(CALLS) * priceAtomic)

    // Revenue only for settled authorizations: owner share + fee == settled × price, split by the bps.
    const share = (priceAtomic * BigInt(setup.svc.config.fees.owner_share_bps)) / 10_000n
    expect(drain.state.ownerShareAtomic).toBe(BigInt(CALLS) * share)
    expect(drain.state.feeAtomic).toBe(BigInt(CALLS) * (priceAtomic - share))
    expect(drain.state.unsettledBookedEntries).toBe(0)
    expect(await setup.reconcileDifferences()).toEqual([])
    console.log(
      `x402 settle (CI): ${CALLS} calls served at ${load.callsPerS.toFixed(0)}/s; drained ${Math.round(drain.drainedMs)} ms after the load, max backlog seen ${drain.maxBacklog}`,
    )
  })
})
