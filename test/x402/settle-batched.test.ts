// x402 settlement through the AuthorizationBatcher: settlement.per_transaction authorizations per treasury
// transaction, a payer who empties their wallet after being served fails only their own authorizations (the
// rest of each batch settles), and a chain without the contract gets one transaction per authorization. The
// settled calls are booked per settlement statement: one owner share and one fee entry per batch, which
// reconcile holds to the sum of the calls that name it.
import { type Chain, createWalletClient, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { anvilSetCode } from '../../src/chain/anvil-process.ts'
import { AUTHORIZATION_BATCHER_ADDRESS } from '../../src/chain/settle-batch.ts'
import { startX402Setup, type X402Setup } from './harness.ts'

// Jobs run by hand: a run's transactions are counted by the treasury's nonce. The leader's batches are what
// is measured, so calls settle after (an explicit choice; the default settles before the answer).
const manualJobs = {
  settlement: { interval_ms: 3_600_000, per_transaction: 50, before_answer: { enabled: false } },
  payouts: { interval_ms: 3_600_000 },
}

async function treasuryNonce(setup: X402Setup): Promise<number> {
  return setup.svc.chain.publicClient.getTransactionCount({
    address: setup.chain.treasury.address,
    blockTag: 'pending',
  })
}

async function serve(setup: X402Setup, n: number): Promise<Array<{ header: string; payer: number }>> {
  const signed = await setup.sign(n)
  for (const s of signed) expect((await setup.pay(s.header)).status).toBe(200)
  await setup.svc.flushCaptures()
  return signed
}

describe('x402 settlement in batches', () => {
  let setup: X402Setup
  beforeAll(async () => {
    setup = await startX402Setup({ overrides: manualJobs, logLevel: 'error' })
  })
  afterAll(() => setup?.stop())

  it('sends 120 authorizations in 3 transactions; an emptied wallet fails only its own', async () => {
    const signed = await serve(setup, 120)
    // Payer 3 moves all its USDC away after being served: its 30 authorizations can no longer be collected.
    const drained = setup.chain.payers[3]!
    const wallet = createWalletClient({
      account: privateKeyToAccount(drained.privateKey),
      chain: baseSepolia as Chain,
      transport: http(setup.chain.rpcUrl),
    })
    const balance = await setup.balanceOf(drained.address)
    const hash = await wallet.writeContract({
      address: setup.chain.usdcAddress,
      abi: parseAbi(['function transfer(address to, uint256 value) returns (bool)']),
      functionName: 'transfer',
      args: [setup.chain.payers[4]!.address, balance],
    })
    await setup.svc.chain.publicClient.waitForTransactionReceipt({ hash })

    const before = await treasuryNonce(setup)
    await setup.svc.jobs.runNow('x402-settlement')
    expect((await treasuryNonce(setup)) - before).toBe(3)

    const drainedCount = signed.filter((s) => s.payer === 3).length
    const s = await setup.settlementState()
    expect(s).toMatchObject({ settled: 120 - drainedCount, reverted: drainedCount, expired: 0, backlog: 0 })
    const share = (setup.priceAtomic * BigInt(setup.svc.config.fees.owner_share_bps)) / 10_000n
    expect(s.ownerShareAtomic).toBe(BigInt(120 - drainedCount) * share)
    expect(s.unsettledBookedEntries).toBe(0)
    expect(await setup.reconcileDifferences()).toEqual([])
  })

  it('books the settled calls per settlement batch, each entry the sum of its calls, to the base unit', async () => {
    const [shape] = await setup.svc.sql<
      { booked: number; batches: number; entries: number; own_entries: number; unmarked_settled: number }[]
    >`
      SELECT (SELECT count(*) FROM calls WHERE ledger_batch_id < 0)::int AS booked,
             (SELECT count(DISTINCT ledger_batch_id) FROM calls WHERE ledger_batch_id < 0)::int AS batches,
             (SELECT count(*) FROM ledger_entries WHERE source_type = 'settlement_batch')::int AS entries,
             (SELECT count(*) FROM ledger_entries WHERE source_type = 'call')::int AS own_entries,
             (SELECT count(*) FROM calls c JOIN claims k ON k.call_id = c.id
              WHERE k.settled_at IS NOT NULL AND c.ledger_batch_id IS NULL)::int AS unmarked_settled`
    // One owner share and one fee per settlement statement (one merchant), not a pair per call.
    expect(shape!.booked).toBeGreaterThan(60)
    expect(shape!.entries).toBe(2 * shape!.batches)
    expect(shape!.batches).toBeLessThan(shape!.booked / 10)
    expect(shape!.own_entries).toBe(0)
    expect(shape!.unmarked_settled).toBe(0)
    const sums = await setup.svc.sql<{ entry: bigint; calls: bigint }[]>`
      SELECT e.amount_atomic AS entry,
             (SELECT sum(CASE WHEN e.kind = 'fee' THEN c.fee_atomic ELSE c.owner_share_atomic END)
              FROM calls c WHERE c.ledger_batch_id::text = e.source_id AND c.account_id = e.account_id)::bigint
               AS calls
      FROM ledger_entries e WHERE e.source_type = 'settlement_batch'`
    for (const x of sums) expect(x.entry).toBe(x.calls)

    // A booked call's charge one base unit off, and a call naming a batch that booked nothing: both reported.
    const [call] = await setup.svc.sql<{ id: string; batch: string }[]>`
      SELECT id, ledger_batch_id::text AS batch FROM calls WHERE ledger_batch_id < 0 LIMIT 1`
    await setup.svc.sql`
      UPDATE calls SET amount_atomic = amount_atomic + 1, fee_atomic = fee_atomic + 1 WHERE id = ${call!.id}`
    let differences = (await setup.reconcileDifferences()).join('\n')
    expect(differences).toContain(`settlement batch ${call!.batch} of account`)
    await setup.svc.sql`
      UPDATE calls SET amount_atomic = amount_atomic - 1, fee_atomic = fee_atomic - 1 WHERE id = ${call!.id}`
    await setup.svc.sql`UPDATE calls SET ledger_batch_id = -999999 WHERE id = ${call!.id}`
    differences = (await setup.reconcileDifferences()).join('\n')
    expect(differences).toContain('settlement batch -999999 of account')
    expect(differences).toContain(`settlement batch ${call!.batch} of account`)
    await setup.svc.sql`UPDATE calls SET ledger_batch_id = ${call!.batch}::bigint WHERE id = ${call!.id}`
    expect(await setup.reconcileDifferences()).toEqual([])
  })
})

describe('x402 settlement on a chain without the AuthorizationBatcher', () => {
  let setup: X402Setup
  beforeAll(async () => {
    setup = await startX402Setup({ overrides: manualJobs, logLevel: 'error' })
    // As on a network where nobody deployed it yet: the service looks for it on its first run.
    await anvilSetCode(setup.chain.rpcUrl, AUTHORIZATION_BATCHER_ADDRESS, '0x')
  })
  afterAll(() => setup?.stop())

  it('sends one transferWithAuthorization per authorization', async () => {
    await serve(setup, 6)
    const before = await treasuryNonce(setup)
    await setup.svc.jobs.runNow('x402-settlement')
    expect((await treasuryNonce(setup)) - before).toBe(6)
    expect(await setup.settlementState()).toMatchObject({ settled: 6, reverted: 0, backlog: 0 })
    expect(await setup.reconcileDifferences()).toEqual([])
  })
})
