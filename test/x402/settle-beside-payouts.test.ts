// Payouts and x402 settlement share the treasury's nonce sequence, so they share a lock. A payout batch waiting
// for its confirmations must not hold that lock: authorizations have a validBefore, and a settlement stuck
// behind a payout batch (up to payouts.confirm_timeout_ms) can expire unpaid. Here blocks stop coming while a
// payout batch waits on chain; the settlement run must still sign and broadcast its batch meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rpc as anvilRpc } from '../helpers/anvil.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startX402Setup, type X402Setup } from './harness.ts'

let setup: X402Setup

beforeAll(async () => {
  setup = await startX402Setup({
    overrides: {
      // The leader's settlement batches beside payouts: calls settle after (the default settles before).
      settlement: { interval_ms: 3_600_000, before_answer: { enabled: false } },
      payouts: {
        interval_ms: 3_600_000,
        threshold_check_interval_ms: 3_600_000,
        min_amount: 0.001,
        confirm_timeout_ms: 60_000,
      },
    },
    logLevel: 'error',
  })
})
afterAll(async () => {
  await rpc('evm_setAutomine', [true]).catch(() => {})
  await setup?.stop()
})

const rpc = (method: string, params: unknown[] = []) => anvilRpc(setup.chain.rpcUrl, method, params)

async function count(query: Promise<Array<{ n: number }>>): Promise<number> {
  const [row] = await query
  return row?.n ?? 0
}

describe('x402 settlement beside a payout batch', () => {
  it('is signed and broadcast while a payout batch waits for its confirmations', async () => {
    const { svc } = setup
    // Settled calls give the owner something to be paid.
    for (const s of await setup.sign(4)) expect((await setup.pay(s.header)).status).toBe(200)
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    expect((await setup.settlementState()).settled).toBe(4)
    // Three more calls await settlement.
    for (const s of await setup.sign(3)) expect((await setup.pay(s.header)).status).toBe(200)
    await svc.flushCaptures()

    // No more blocks: the payout batch broadcasts and then waits on chain.
    await rpc('evm_setAutomine', [false])
    let payoutDone = false
    const payoutRun = svc.jobs.runNow('payout-batch').finally(() => {
      payoutDone = true
    })
    await waitFor(
      () =>
        count(svc.sql`SELECT count(*)::int AS n FROM payouts WHERE status = 'submitted'`).then(
          (n) => n === 1,
        ),
      { what: 'the payout batch broadcast', timeoutMs: 15_000 },
    )

    // The settlement run gets the treasury at once: its three authorizations are recorded and broadcast, in one
    // AuthorizationBatcher transaction.
    const settleRun = svc.jobs.runNow('x402-settlement')
    await waitFor(
      () =>
        count(
          svc.sql`SELECT count(*)::int AS n FROM claims WHERE kind = 'eip3009' AND settlement_tx IS NOT NULL
                    AND settled_at IS NULL`,
        ).then((n) => n === 3),
      { what: 'the settlement batch broadcast beside the waiting payout batch', timeoutMs: 8_000 },
    )
    // Recorded first, then broadcast on the next nonce: the payout's transaction and the settlement batch wait
    // together for a block.
    await waitFor(
      async () => {
        const pending = (await rpc('eth_getBlockByNumber', ['pending', false])) as { transactions: string[] }
        return pending.transactions.length === 2
      },
      { what: 'the settlement batch broadcast beside the payout', timeoutMs: 8_000 },
    )
    expect(payoutDone).toBe(false)

    // Blocks again: both finish, and the books match the chain.
    await rpc('evm_mine')
    await rpc('evm_setAutomine', [true])
    await rpc('evm_mine')
    await Promise.all([payoutRun, settleRun])
    expect((await setup.settlementState()).settled).toBe(7)
    expect(await count(svc.sql`SELECT count(*)::int AS n FROM payouts WHERE status = 'confirmed'`)).toBe(1)
    expect(await setup.reconcileDifferences()).toEqual([])
  })
})
