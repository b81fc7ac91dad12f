// What became of a payout's nonce, while the node fails receipt look-ups (seen on a CI run on a loaded
// machine: a receipt look-up timed out, the payout was marked "nonce used by another transaction" although
// its transfer was mined, and its entries went back to be paid again). A failed look-up must leave the
// payout open; only a receipt the node says it does not have, with the nonce used, is nonce_taken.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { chainDefinition, createChainPublicClient } from '../../src/chain/client.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { broadcast, lookupPayoutTx, quoteFees, signTransfer } from '../../src/chain/payouts.ts'
import { signingAccount } from '../../src/chain/signing-account.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'

let dev: DevChain
let proxy: RpcProxy

beforeAll(async () => {
  dev = await startTestChain({ treasuryFunding: 10_000_000n })
  proxy = await startRpcProxy(dev.rpcUrl)
})
afterAll(async () => {
  await proxy?.close()
  await dev?.stop()
})

it('a mined payout whose receipt cannot be read stays open, and is final once it can', async () => {
  const client = createChainPublicClient(chainDefinition('local', dev.chainId, proxy.url), {
    rpcUrl: proxy.url,
    timeoutMs: 2_000,
  })
  const account = signingAccount(dev.treasury.privateKey)
  const nonce = await client.getTransactionCount({ address: account.address, blockTag: 'pending' })
  const signed = await signTransfer(account, {
    chainId: dev.chainId,
    usdc: dev.usdcAddress,
    to: dev.payers[0]!.address,
    amountAtomic: 1_000n,
    nonce,
    gas: 100_000n,
    fees: await quoteFees(client),
  })
  expect(await broadcast(client, signed.rawTx as `0x${string}`)).toEqual({ ok: true })
  await client.waitForTransactionReceipt({ hash: signed.hash as `0x${string}` })
  const lookup = (hashes: string[]) =>
    lookupPayoutTx(client, {
      treasury: account.address,
      nonce,
      hashes: hashes as `0x${string}`[],
      confirmations: 1,
    })

  proxy.failMethods = ['eth_getTransactionReceipt']
  await expect(lookup([signed.hash])).rejects.toThrow()
  proxy.failMethods = []
  expect(await lookup([signed.hash])).toMatchObject({ state: 'final', hash: signed.hash, success: true })
  // The nonce used by a transaction the node knows, none of ours: that is nonce_taken.
  expect(await lookup([`0x${'ab'.repeat(32)}`])).toEqual({ state: 'nonce_taken' })
})
