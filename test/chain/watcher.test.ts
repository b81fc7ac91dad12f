// The treasury watcher reports every paying transaction once, with its total, and nothing else.
import { setTimeout as sleep } from 'node:timers/promises'
import { type Address, type Hash, parseAbi } from 'viem'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import type { ChainPublicClient, ChainWalletClient } from '../../src/chain/client.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { TreasuryTransfer } from '../../src/chain/transfer.ts'
import { usdcAbi } from '../../src/chain/usdc.ts'
import { type TransferWatcher, watchTreasuryTransfers } from '../../src/chain/watcher.ts'
import { localPublicClient, localWalletClient, mine, startTestChain } from '../helpers/anvil.ts'
import { startRpcProxy } from '../helpers/rpc-proxy.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { disperseArtifact } from './contracts/disperse.ts'

const disperseAbi = parseAbi([
  'function disperseToken(address token, address[] recipients, uint256[] values)',
])

let dev: DevChain
let client: ChainPublicClient
let payers: ChainWalletClient[]
const watchers: TransferWatcher[] = []

beforeAll(async () => {
  dev = await startTestChain()
  client = localPublicClient(dev)
  payers = dev.payers.map((p) => localWalletClient(dev, p.privateKey))
})

afterEach(async () => {
  await Promise.all(watchers.splice(0).map((w) => w.stop()))
})

afterAll(async () => {
  await dev?.stop()
})

/** Starts after the current head, so transfers of earlier tests stay out of sight. */
async function watch(over: Partial<Parameters<typeof watchTreasuryTransfers>[1]> = {}, on = client) {
  const fromBlock = (await client.getBlockNumber({ cacheTime: 0 })) + 1n
  const seen: TreasuryTransfer[] = []
  const errors: unknown[] = []
  const scanned: bigint[] = []
  const watcher = watchTreasuryTransfers(on, {
    usdc: dev.usdcAddress,
    treasury: dev.treasury.address,
    confirmations: 1,
    pollIntervalMs: 50,
    onTransfer: (t) => {
      seen.push(t)
    },
    onError: (err) => errors.push(err),
    onProgress: (next) => {
      scanned.push(next)
    },
    fromBlock,
    ...over,
  })
  watchers.push(watcher)
  return { seen, errors, scanned }
}

const pay = async (payer: ChainWalletClient, to: Address, value: bigint): Promise<Hash> => {
  const hash = await payer.writeContract({
    address: dev.usdcAddress,
    abi: usdcAbi,
    functionName: 'transfer',
    args: [to, value],
  })
  await client.waitForTransactionReceipt({ hash })
  return hash
}

/** A few more polls, so a duplicate or a late report would have time to show up: a fixed wait on purpose,
 * what follows it checks that nothing more happened. */
const settle = () => sleep(250)

describe('watchTreasuryTransfers', () => {
  it('reports each transfer to the treasury once with its value, and nothing sent elsewhere', async () => {
    // The default start: the newest confirmed block when it starts (only set-up mints, never reported).
    const { seen, errors, scanned } = await watch({ fromBlock: undefined })
    // Its start is the head it read on its first poll: pay only after that.
    await waitFor(() => scanned.length > 0, { what: 'the first scanned range' })
    const first = await pay(payers[0]!, dev.treasury.address, 1_000_000n)
    await pay(payers[0]!, dev.payers[2]!.address, 5_000_000n)
    await payers[1]!.sendTransaction({ to: dev.treasury.address, value: 10n ** 15n })
    const second = await pay(payers[1]!, dev.treasury.address, 2_000_000n)

    await vi.waitFor(() => expect(seen).toHaveLength(2), { timeout: 3000, interval: 25 })
    await settle()
    expect(seen).toHaveLength(2)
    expect(seen).toEqual([
      expect.objectContaining({ hash: first, from: dev.payers[0]!.address, value: 1_000_000n }),
      expect.objectContaining({ hash: second, from: dev.payers[1]!.address, value: 2_000_000n }),
    ])
    // Who sent each transaction (tollgate's own settlements are told apart by it): here the payers.
    expect(seen.map((t) => t.sender)).toEqual([dev.payers[0]!.address, dev.payers[1]!.address])
    // Plain transfers: no authorization made them (test/x402/self-submitted-authorization.test.ts has one).
    expect(seen.map((t) => t.authorizations)).toEqual([[], []])
    const block = await client.getBlock({ blockNumber: seen[0]!.blockNumber })
    expect(seen[0]!.timestampMs).toBe(Number(block.timestamp) * 1000)
    expect(errors).toEqual([])
  })

  it('sums several transfers to the treasury in one transaction (a Disperse batch)', async () => {
    const payer = payers[3]!
    const deploy = await payer.deployContract({
      abi: disperseArtifact.abi,
      bytecode: disperseArtifact.bytecode,
    })
    const disperseAddress = (await client.waitForTransactionReceipt({ hash: deploy })).contractAddress!
    const approve = await payer.writeContract({
      address: dev.usdcAddress,
      abi: usdcAbi,
      functionName: 'approve',
      args: [disperseAddress, 10_000_000n],
    })
    await client.waitForTransactionReceipt({ hash: approve })
    const { seen } = await watch()
    const hash = await payer.writeContract({
      address: disperseAddress,
      abi: disperseAbi,
      functionName: 'disperseToken',
      args: [
        dev.usdcAddress,
        [dev.treasury.address, dev.payers[0]!.address, dev.treasury.address],
        [1n, 2n, 3n],
      ],
    })
    await client.waitForTransactionReceipt({ hash })
    await vi.waitFor(() => expect(seen).toHaveLength(1), { timeout: 3000, interval: 25 })
    await settle()
    expect(seen).toEqual([expect.objectContaining({ hash, from: dev.payers[3]!.address, value: 4n })])
  })

  it('waits for the configured confirmations before reporting', async () => {
    const { seen } = await watch({ confirmations: 3 })
    const hash = await pay(payers[0]!, dev.treasury.address, 42n)
    await settle()
    expect(seen).toEqual([])
    await mine(dev.rpcUrl, 1)
    await settle()
    expect(seen).toEqual([])
    await mine(dev.rpcUrl, 1)
    await vi.waitFor(() => expect(seen).toHaveLength(1), { timeout: 3000, interval: 25 })
    expect(seen[0]).toMatchObject({ hash, value: 42n })
  })

  it('reports what was paid while the RPC was down once it is back, without gaps or duplicates', async () => {
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const flaky = localPublicClient(dev, proxy.url)
      const { seen, errors } = await watch({}, flaky)
      const before = await pay(payers[4]!, dev.treasury.address, 11n)
      await vi.waitFor(() => expect(seen).toHaveLength(1), { timeout: 3000, interval: 25 })

      await proxy.setMode('unavailable')
      const during = [
        await pay(payers[4]!, dev.treasury.address, 12n),
        await pay(payers[4]!, dev.treasury.address, 13n),
      ]
      await vi.waitFor(() => expect(errors.length).toBeGreaterThan(0), { timeout: 3000, interval: 25 })
      await proxy.setMode('pass')

      await vi.waitFor(() => expect(seen).toHaveLength(3), { timeout: 3000, interval: 25 })
      await settle()
      expect(seen.map((t) => [t.hash, t.value])).toEqual([
        [before, 11n],
        [during[0], 12n],
        [during[1], 13n],
      ])
    } finally {
      await proxy.close()
    }
  })

  it('a range the provider refuses as too wide is narrowed until it fits: everything reported, once', async () => {
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const narrow = localPublicClient(dev, proxy.url)
      // Paid while no watcher ran, between empty blocks: the first range asked for spans all of them.
      const fromBlock = (await client.getBlockNumber({ cacheTime: 0 })) + 1n
      const paid: Hash[] = []
      for (let i = 0; i < 4; i++) {
        paid.push(await pay(payers[3]!, dev.treasury.address, 20n + BigInt(i)))
        await mine(dev.rpcUrl, 3)
      }
      proxy.maxLogRange = 2
      const { seen, errors } = await watch({ fromBlock, maxBlockRange: 16n }, narrow)
      await vi.waitFor(() => expect(seen).toHaveLength(4), { timeout: 5000, interval: 25 })
      await settle()
      expect(seen.map((t) => [t.hash, t.value])).toEqual(paid.map((h, i) => [h, 20n + BigInt(i)]))
      // It was refused, and narrowed: 16 → 8 → 4 → 2 blocks.
      expect(errors.length).toBeGreaterThanOrEqual(3)
      expect(proxy.refused).toBe(errors.length)
    } finally {
      await proxy.close()
    }
  })

  it('stop() ends polling', async () => {
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const counted = localPublicClient(dev, proxy.url)
      const { seen } = await watch({}, counted)
      await waitFor(() => proxy.requests >= 2, { what: 'two polls through the proxy' })
      await watchers.pop()!.stop()
      const requests = proxy.requests
      await pay(payers[0]!, dev.treasury.address, 7n)
      await settle()
      expect(proxy.requests).toBe(requests)
      expect(seen).toEqual([])
    } finally {
      await proxy.close()
    }
  })
})
