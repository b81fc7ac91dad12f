// The settler's nonce gaps on a real anvil: a transaction the node dropped leaves every later nonce queued
// behind it (as a fee cap under the base fee did under the capacity bench); the watch fills the hole with an
// empty transfer and the queued ones are mined. One it still holds, merely unmined, is left alone.
import { type Hash, type Hex, keccak256 } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type AnvilProcess, spawnAnvil } from '../../src/chain/anvil-process.ts'
import { type ChainPublicClient, chainDefinition, createChainPublicClient } from '../../src/chain/client.ts'
import { broadcast, quoteFees } from '../../src/chain/payouts.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { NonceGaps } from '../../src/schemes/exact/nonce-gaps.ts'

// anvil's first default account (accounts: 1).
const account = privateKeyToAccount('0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80')
let anvil: AnvilProcess
let client: ChainPublicClient

beforeAll(async () => {
  anvil = await spawnAnvil({ chainId: 31_337, accounts: 1 })
  client = createChainPublicClient(chainDefinition('local', 31_337, anvil.rpcUrl), {
    rpcUrl: anvil.rpcUrl,
    timeoutMs: 5_000,
  })
  // Nothing is mined until the test says so: the pool is where the gap is made.
  await client.request({ method: 'evm_setAutomine' as never, params: [false] as never })
})
afterAll(async () => {
  await anvil?.stop()
})

async function send(nonce: number): Promise<Hash> {
  const fees = await quoteFees(client)
  const rawTx = await account.signTransaction({
    type: 'eip1559',
    chainId: 31_337,
    to: account.address,
    value: 1n,
    nonce,
    gas: 21_000n,
    ...fees,
  })
  const r = await broadcast(client, rawTx)
  expect(r).toEqual({ ok: true })
  return keccak256(rawTx as Hex)
}

const mine = () => client.request({ method: 'evm_mine' as never })
const minedNonce = () => client.getTransactionCount({ address: account.address, blockTag: 'latest' })

describe('the settler nonce watch', () => {
  it('fills a nonce the node dropped, so the later ones are mined; leaves one it still holds alone', async () => {
    const gaps = new NonceGaps({
      client,
      account,
      chainId: 31_337,
      quote: () => quoteFees(client),
      logger: createLogger({ level: 'silent' }),
      stallMs: 1_000,
    })
    const hashes: Hash[] = []
    for (let n = 0; n < 4; n++) {
      hashes.push(await send(n))
      gaps.sent(n, hashes[n]!)
    }
    await mine()
    expect(await minedNonce()).toBe(4)

    // Pooled and unmined for longer than the stall: still held by the node, so not a gap.
    const pooled: Hash[] = []
    for (let n = 4; n < 6; n++) {
      pooled.push(await send(n))
      gaps.sent(n, pooled.at(-1)!)
    }
    // Two looks a stall apart (the clock is passed in: no test waits out STALL_MS).
    await gaps.check(10)
    await gaps.check(2_010)
    expect(gaps.filled).toBe(0)

    // The node drops nonce 4 (and what depends on it); what is sent later queues behind the hole.
    await client.request({ method: 'anvil_dropTransaction' as never, params: [pooled[0]] as never })
    const later: Hash[] = []
    for (let n = 6; n < 8; n++) {
      later.push(await send(n))
      gaps.sent(n, later.at(-1)!)
    }
    await mine()
    expect(await minedNonce()).toBe(4)

    await gaps.check(2_020)
    await gaps.check(4_020)
    expect(gaps.filled).toBeGreaterThanOrEqual(1)
    await mine()
    expect(await minedNonce()).toBe(8)
    for (const hash of later) expect((await client.getTransactionReceipt({ hash })).status).toBe('success')
    await gaps.stop()
  }, 60_000)
})
