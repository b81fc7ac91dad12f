// x402 settlement through the AuthorizationBatcher: settlement.per_transaction authorizations per treasury
// transaction, a payer who empties their wallet after being served fails only their own authorizations (the
// rest of each batch settles), and a chain without the contract gets one transaction per authorization.
import { type Chain, createWalletClient, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { anvilSetCode } from '../../src/chain/anvil-process.ts'
import { AUTHORIZATION_BATCHER_ADDRESS } from '../../src/chain/settle-batch.ts'
import { startX402Setup, type X402Setup } from './harness.ts'

// Jobs run by hand: a run's transactions are counted by the treasury's nonce.
const manualJobs = {
  settlement: { interval_ms: 3_600_000, per_transaction: 50 },
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
