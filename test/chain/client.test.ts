// The chain client's RPC transport: concurrent calls share one HTTP request, and each request is reported.
import { getBlockNumber, getChainId } from 'viem/actions'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { chainDefinition, createChainPublicClient } from '../../src/chain/client.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { startRpcProxy } from '../helpers/rpc-proxy.ts'

let dev: DevChain

beforeAll(async () => {
  dev = await startTestChain()
})

afterAll(async () => {
  await dev?.stop()
})

describe('createRpcTransport', () => {
  it('reports each HTTP request to the node once, a batch with the calls it carries', async () => {
    const proxy = await startRpcProxy(dev.rpcUrl)
    const seen: Array<[string, string[]]> = []
    try {
      const client = createChainPublicClient(chainDefinition('local', dev.chainId, proxy.url), {
        rpcUrl: proxy.url,
        timeoutMs: 2000,
        onRpcRequest: (request, calls) => seen.push([request, calls]),
      })
      await Promise.all([getBlockNumber(client, { cacheTime: 0 }), getChainId(client)])
      await getChainId(client)
      expect(seen).toEqual([
        ['batch', ['eth_blockNumber', 'eth_chainId']],
        ['eth_chainId', ['eth_chainId']],
      ])
      expect(proxy.requests).toBe(seen.length)
    } finally {
      await proxy.close()
    }
  })
})
