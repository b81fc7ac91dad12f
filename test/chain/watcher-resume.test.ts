// The watcher as the checkout's attribution uses it: a range whose batch handler fails is reported again
// (nothing skipped), progress is reported for the caller to persist, and a saved start block beyond the
// chain's head (a reset dev chain) falls back to the head instead of waiting forever.
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterEach, describe, expect, it } from 'vitest'
import type { TreasuryTransfer } from '../../src/chain/transfer.ts'
import { type TransferWatcher, watchTreasuryTransfers } from '../../src/chain/watcher.ts'
import { chainClients, type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { waitFor } from '../helpers/wait-for.ts'

const watchers: TransferWatcher[] = []
afterEach(async () => {
  await Promise.all(watchers.splice(0).map((w) => w.stop()))
})

function start(treasury: `0x${string}`, over: Partial<Parameters<typeof watchTreasuryTransfers>[1]>) {
  const { publicClient, usdc } = chainClients()
  const w = watchTreasuryTransfers(publicClient, {
    usdc,
    treasury,
    confirmations: 1,
    pollIntervalMs: 50,
    onTransfer: () => {},
    ...over,
  })
  watchers.push(w)
  return w
}

describe('treasury watcher: batches, progress, resume', () => {
  it('a failed batch is reported again on the next poll, and progress moves only past it after', async () => {
    const payer: Funded = await fundedAccount(10_000_000n)
    const treasury = privateKeyToAccount(generatePrivateKey()).address
    const { publicClient } = chainClients()
    const fromBlock = (await publicClient.getBlockNumber({ cacheTime: 0 })) + 1n
    const batches: TreasuryTransfer[][] = []
    const progress: bigint[] = []
    let failOnce = true
    let passedBeforeRetry = false
    start(treasury, {
      fromBlock,
      onTransfers: async (transfers) => {
        batches.push(transfers)
        if (failOnce) {
          failOnce = false
          passedBeforeRetry = progress.some((p) => p > transfers[0]!.blockNumber)
          throw new Error('database down')
        }
        passedBeforeRetry ||= progress.some((p) => p > transfers[0]!.blockNumber)
      },
      onProgress: (next) => {
        progress.push(next)
      },
      onError: () => {},
    })
    const hash = await payUsdc(payer, treasury, 1_000_001n)
    await waitFor(() => batches.length >= 2, { what: 'the batch twice', timeoutMs: 10_000 })
    expect(batches[0]!.map((t) => t.hash)).toEqual([hash])
    expect(batches[1]!.map((t) => t.hash)).toEqual([hash])
    const [block] = batches[0]!.map((t) => t.blockNumber)
    await waitFor(() => progress.some((p) => p > block!), {
      what: 'progress past the block',
      timeoutMs: 10_000,
    })
    expect(passedBeforeRetry).toBe(false)
  })

  it('a start block beyond the head falls back to the head and still reports new transfers', async () => {
    const payer: Funded = await fundedAccount(10_000_000n)
    const treasury = privateKeyToAccount(generatePrivateKey()).address
    const seen: string[] = []
    const progress: bigint[] = []
    start(treasury, {
      fromBlock: 10n ** 12n,
      onTransfers: async (transfers) => {
        seen.push(...transfers.map((t) => t.hash))
      },
      onProgress: (next) => {
        progress.push(next)
      },
    })
    // The first poll has placed the cursor at the head once it reports progress; then pay.
    await waitFor(() => progress.length > 0, { what: 'first progress', timeoutMs: 10_000 })
    expect(progress[0]!).toBeLessThan(10n ** 12n)
    const hash = await payUsdc(payer, treasury, 2_000_000n)
    await waitFor(() => seen.includes(hash), { what: 'the transfer reported', timeoutMs: 10_000 })
  })
})
