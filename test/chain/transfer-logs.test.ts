import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ChainPublicClient, ChainWalletClient } from '../../src/chain/client.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { scanTransfers } from '../../src/chain/transfer-logs.ts'
import { usdcAbi } from '../../src/chain/usdc.ts'
import { localPublicClient, localWalletClient, mine, startTestChain } from '../helpers/anvil.ts'
import { startRpcProxy } from '../helpers/rpc-proxy.ts'

let dev: DevChain
let client: ChainPublicClient
let payer: ChainWalletClient
beforeAll(async () => {
  dev = await startTestChain()
  client = localPublicClient(dev)
  payer = localWalletClient(dev, dev.payers[0]!.privateKey)
})
afterAll(() => dev?.stop())

describe('scanTransfers', () => {
  it('reads every transfer of the range once, asking again in halves where the node refuses the span', async () => {
    const fromBlock = (await client.getBlockNumber({ cacheTime: 0 })) + 1n
    const sent: Array<[string, bigint]> = []
    for (let i = 0; i < 5; i++) {
      const hash = await payer.writeContract({
        address: dev.usdcAddress,
        abi: usdcAbi,
        functionName: 'transfer',
        args: [dev.treasury.address, 30n + BigInt(i)],
      })
      await client.waitForTransactionReceipt({ hash })
      sent.push([hash, 30n + BigInt(i)])
      await mine(dev.rpcUrl, 2)
    }
    const toBlock = await client.getBlockNumber({ cacheTime: 0 })
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const narrow = localPublicClient(dev, proxy.url)
      proxy.maxLogRange = 3
      const q = { usdc: dev.usdcAddress, to: dev.treasury.address, fromBlock, toBlock, chunk: 1000n }
      const read = await scanTransfers(narrow, q)
      expect(read.map((t) => [t.hash, t.value])).toEqual(sent)
      expect(read.every((t) => t.to === dev.treasury.address && t.from === payer.account.address)).toBe(true)
      expect(proxy.refused).toBeGreaterThan(0)
      // The same scan from the node directly (no limit) reads the same transfers.
      expect(await scanTransfers(client, q)).toEqual(read)

      // A node that is down is not asked in halves (ten of them, from 1,000 blocks to one): the scan fails at
      // its first request (its kept-alive connection, dropped by the switch, may fail before reaching it).
      await proxy.setMode('unavailable')
      const before = proxy.requests
      await expect(scanTransfers(narrow, q)).rejects.toThrow()
      expect(proxy.requests - before).toBeLessThanOrEqual(1)
    } finally {
      await proxy.close()
    }
  })
})
