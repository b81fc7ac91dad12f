// Each answer of the transaction-hash verifier, produced by a real transaction on a real anvil.
import { createServer } from 'node:net'
import { type Address, encodeFunctionData, type Hash, keccak256, toHex } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type ChainPublicClient,
  type ChainWalletClient,
  chainDefinition,
  createChainPublicClient,
} from '../../src/chain/client.ts'
import { testUsdcArtifact } from '../../src/chain/contracts/artifacts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { usdcAbi } from '../../src/chain/usdc.ts'
import {
  createTransferVerifier,
  type VerifyTransferOptions,
  verifyTransfer,
} from '../../src/chain/verify-transfer.ts'
import {
  clientOptions,
  localPublicClient,
  localWalletClient,
  mine,
  rpc,
  setAutomine,
  startTestChain,
} from '../helpers/anvil.ts'
import { startRpcProxy } from '../helpers/rpc-proxy.ts'

let dev: DevChain
let client: ChainPublicClient
let payers: ChainWalletClient[]
let options: VerifyTransferOptions

beforeAll(async () => {
  dev = await startTestChain()
  client = localPublicClient(dev)
  payers = dev.payers.map((p) => localWalletClient(dev, p.privateKey))
  options = {
    usdc: dev.usdcAddress,
    treasury: dev.treasury.address,
    confirmations: 1,
    maxAgeMs: 60_000,
    waitMs: 0,
    pollIntervalMs: 50,
  }
})

afterAll(async () => {
  await dev?.stop()
})

const payUsdc = (payer: ChainWalletClient, to: Address, value: bigint, gas?: bigint) =>
  payer.writeContract({
    address: dev.usdcAddress,
    abi: usdcAbi,
    functionName: 'transfer',
    args: [to, value],
    gas,
  })

const mined = async (hash: Hash) => {
  await client.waitForTransactionReceipt({ hash })
  return hash
}

describe('verifyTransfer', () => {
  it('proves a USDC transfer to the treasury: payer, value, block and time', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.treasury.address, 2_500_000n))
    const receipt = await client.getTransactionReceipt({ hash })
    const result = await verifyTransfer(client, { ...options, hash })
    expect(result).toEqual({
      ok: true,
      transfer: {
        hash,
        from: dev.payers[0]!.address,
        // The transaction's sender: here the payer itself (a relayer's, or tollgate's own settlement, else).
        sender: dev.payers[0]!.address,
        value: 2_500_000n,
        // A plain transfer: no EIP-3009 authorization made it.
        authorizations: [],
        blockNumber: receipt.blockNumber,
        timestampMs: expect.any(Number),
      },
    })
    if (result.ok) expect(Math.abs(result.transfer.timestampMs - Date.now())).toBeLessThan(10_000)
  })

  it('answers transaction_failed for a reverted transaction', async () => {
    // More than the payer holds, with gas given so viem sends it instead of refusing at estimation.
    const hash = await mined(await payUsdc(payers[1]!, dev.treasury.address, 10n ** 15n, 100_000n))
    expect(await verifyTransfer(client, { ...options, hash })).toEqual({
      ok: false,
      reason: 'transaction_failed',
    })
  })

  it('answers wrong_asset for another ERC-20 sent to the treasury', async () => {
    const other = payers[2]!
    const deployed = await other.deployContract({
      abi: testUsdcArtifact.abi,
      bytecode: testUsdcArtifact.bytecode,
    })
    const token = (await client.waitForTransactionReceipt({ hash: deployed })).contractAddress!
    const me = other.account.address
    await mined(
      await other.writeContract({ address: token, abi: mintAbi, functionName: 'mint', args: [me, 5n] }),
    )
    const hash = await mined(
      await other.writeContract({
        address: token,
        abi: usdcAbi,
        functionName: 'transfer',
        args: [dev.treasury.address, 5n],
      }),
    )
    expect(await verifyTransfer(client, { ...options, hash })).toEqual({ ok: false, reason: 'wrong_asset' })
  })

  it('answers wrong_recipient for USDC sent to someone else', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.payers[3]!.address, 1_000_000n))
    expect(await verifyTransfer(client, { ...options, hash })).toEqual({
      ok: false,
      reason: 'wrong_recipient',
    })
  })

  it('answers no_transfer for a plain ETH payment', async () => {
    const hash = await mined(
      await payers[0]!.sendTransaction({ to: dev.treasury.address, value: 10n ** 15n }),
    )
    expect(await verifyTransfer(client, { ...options, hash })).toEqual({ ok: false, reason: 'no_transfer' })
  })

  it('waits waitMs for a hash the node does not know, then answers transaction_not_found, final', async () => {
    const hash = keccak256(toHex(`unknown ${Math.random()}`))
    const started = performance.now()
    const result = await verifyTransfer(client, { ...options, hash, waitMs: 300 })
    expect(performance.now() - started).toBeGreaterThanOrEqual(290)
    expect(result).toMatchObject({ ok: false, reason: 'transaction_not_found' })
    // No retry hint: retrying a hash the chain does not know cannot help.
    expect(result).not.toHaveProperty('retryAfterMs')
  })

  it('asks about a hash the node never saw less and less often', async () => {
    const hash = keccak256(toHex(`unseen ${Math.random()}`))
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const counted = localPublicClient(dev, proxy.url)
      const result = await verifyTransfer(counted, { ...options, hash, waitMs: 3000, pollIntervalMs: 250 })
      expect(result).toMatchObject({ ok: false, reason: 'transaction_not_found' })
      // Pauses 250, 500, 1000, 1000, 1000 ms: 6 looks in 3 s, not the 13 a fixed 250 ms poll takes.
      expect(proxy.counts.get('eth_getTransactionByHash')).toBeLessThanOrEqual(7)
    } finally {
      await proxy.close()
    }
  })

  it('an unknown hash costs at most 7 receipt and 7 mempool look-ups and one head, in unseenWaitMs', async () => {
    const hash = keccak256(toHex(`never ${Math.random()}`))
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const counted = localPublicClient(dev, proxy.url)
      const started = performance.now()
      // The defaults of config/default.json: verify.wait_ms 10 s, verify.unseen_wait_ms 4 s.
      const result = await verifyTransfer(counted, {
        ...options,
        hash,
        waitMs: 10_000,
        unseenWaitMs: 4_000,
        pollIntervalMs: 250,
      })
      const elapsed = performance.now() - started
      expect(result).toMatchObject({ ok: false, reason: 'transaction_not_found' })
      expect(result).not.toHaveProperty('retryAfterMs')
      expect(elapsed).toBeGreaterThanOrEqual(3990)
      expect(elapsed).toBeLessThan(5000)
      // Looks at 0, 0.25, 0.75, 1.75, 2.75, 3.75 and 4 s. The head is asked only with the first look; the
      // others batch the receipt and the mempool: 15 calls in 8 HTTP requests (was 13 + 13 + 13 in 26).
      const receipts = proxy.counts.get('eth_getTransactionReceipt') ?? 0
      const mempool = proxy.counts.get('eth_getTransactionByHash') ?? 0
      expect(receipts).toBeLessThanOrEqual(7)
      expect(mempool).toBe(receipts)
      expect(proxy.counts.get('eth_blockNumber')).toBe(1)
      expect(proxy.requests).toBeLessThanOrEqual(8)
      expect([...proxy.counts.keys()].sort()).toEqual([
        'eth_blockNumber',
        'eth_getTransactionByHash',
        'eth_getTransactionReceipt',
      ])
    } finally {
      await proxy.close()
    }
  })

  it('a transaction that reaches the node during the unseen wait is waited for to waitMs', async () => {
    await setAutomine(dev.rpcUrl, false)
    try {
      const payer = payers[1]!
      const request = await payer.prepareTransactionRequest({
        to: dev.usdcAddress,
        data: encodeFunctionData({
          abi: usdcAbi,
          functionName: 'transfer',
          args: [dev.treasury.address, 420_000n],
        }),
        gas: 100_000n,
      })
      const signed = await payer.signTransaction(request)
      const hash = keccak256(signed)
      const started = performance.now()
      const verifying = verifyTransfer(client, { ...options, hash, waitMs: 5000, unseenWaitMs: 800 })
      // Unseen for 300 ms (broadcast elsewhere, still propagating), then pending, mined at 1.5 s: past the
      // unseen wait, within the whole one.
      await new Promise((resolve) => setTimeout(resolve, 300))
      await rpc(dev.rpcUrl, 'eth_sendRawTransaction', [signed])
      await new Promise((resolve) => setTimeout(resolve, 1200))
      await mine(dev.rpcUrl)
      const result = await verifying
      expect(result).toMatchObject({ ok: true, transfer: { hash, value: 420_000n } })
      expect(performance.now() - started).toBeGreaterThanOrEqual(1400)
    } finally {
      await setAutomine(dev.rpcUrl, true)
    }
  })

  it('a pending transaction outlasts unseenWaitMs: payment_pending at waitMs, not transaction_not_found', async () => {
    await setAutomine(dev.rpcUrl, false)
    try {
      const hash = await payUsdc(payers[2]!, dev.treasury.address, 430_000n)
      const started = performance.now()
      const result = await verifyTransfer(client, { ...options, hash, waitMs: 1200, unseenWaitMs: 200 })
      expect(result).toMatchObject({
        ok: false,
        reason: 'payment_pending',
        detail: 'transaction not mined yet',
      })
      expect(performance.now() - started).toBeGreaterThanOrEqual(1190)
      await mine(dev.rpcUrl)
    } finally {
      await setAutomine(dev.rpcUrl, true)
    }
  })

  it('waits for a broadcast transaction and answers ok once it is mined', async () => {
    await setAutomine(dev.rpcUrl, false)
    try {
      const hash = await payUsdc(payers[0]!, dev.treasury.address, 750_000n)
      expect(await verifyTransfer(client, { ...options, hash, waitMs: 100 })).toMatchObject({
        ok: false,
        reason: 'payment_pending',
        detail: 'transaction not mined yet',
      })
      const started = performance.now()
      // Mined 300 ms into the wait: that the wait wakes on the block, not at its end, is the thing under test.
      const mining = new Promise((resolve) => setTimeout(resolve, 300)).then(() => mine(dev.rpcUrl))
      const result = await verifyTransfer(client, { ...options, hash, waitMs: 5000 })
      await mining
      const elapsed = performance.now() - started
      expect(result).toMatchObject({ ok: true, transfer: { hash, value: 750_000n } })
      expect(elapsed).toBeGreaterThanOrEqual(280)
      expect(elapsed).toBeLessThan(2000)
    } finally {
      await setAutomine(dev.rpcUrl, true)
    }
  })

  it('answers payment_pending until the transaction has the required confirmations', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.treasury.address, 100_000n))
    const three = { ...options, hash, confirmations: 3 }
    expect(await verifyTransfer(client, three)).toMatchObject({
      ok: false,
      reason: 'payment_pending',
      retryAfterMs: 4000, // two more blocks at the default 2 s hint
    })
    await mine(dev.rpcUrl, 2)
    expect(await verifyTransfer(client, three)).toMatchObject({ ok: true, transfer: { value: 100_000n } })
  })

  it('answers proof_too_old when the block is older than maxAgeMs', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.treasury.address, 100_000n))
    const later = () => Date.now() + 61_000
    expect(await verifyTransfer(client, { ...options, hash, now: later })).toEqual({
      ok: false,
      reason: 'proof_too_old',
    })
  })

  it('answers rpc_unavailable, never a verdict, when the node cannot be reached', async () => {
    const closed = createChainPublicClient(
      chainDefinition('local', dev.chainId, dev.rpcUrl),
      clientOptions(`http://127.0.0.1:${await closedPort()}`),
    )
    const hash = keccak256(toHex('any'))
    expect(await verifyTransfer(closed, { ...options, hash, waitMs: 1000 })).toMatchObject({
      ok: false,
      reason: 'rpc_unavailable',
    })
  })
})

describe('verifyTransfer round trips', () => {
  it('costs one batched request (receipt and head) when the node puts block times on logs', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.treasury.address, 310_000n))
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const counted = localPublicClient(dev, proxy.url)
      const result = await verifyTransfer(counted, { ...options, hash })
      expect(result).toMatchObject({ ok: true, transfer: { value: 310_000n } })
      expect(proxy.requests).toBe(1)
      expect(proxy.counts.get('eth_getBlockByNumber')).toBeUndefined()
    } finally {
      await proxy.close()
    }
  })

  it('asks for the block when the node leaves block times off its logs, and gets the same time', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.treasury.address, 320_000n))
    const proxy = await startRpcProxy(dev.rpcUrl)
    proxy.stripLogTimestamps = true
    try {
      const counted = localPublicClient(dev, proxy.url)
      const result = await verifyTransfer(counted, { ...options, hash })
      const direct = await verifyTransfer(client, { ...options, hash })
      expect(result).toEqual(direct)
      expect(proxy.counts.get('eth_getBlockByNumber')).toBe(1)
      expect(proxy.requests).toBe(2)
    } finally {
      await proxy.close()
    }
  })
})

describe('createTransferVerifier', () => {
  it('shares one receipt fetch among concurrent verifications of a hash', async () => {
    const hash = await mined(await payUsdc(payers[0]!, dev.treasury.address, 300_000n))
    const proxy = await startRpcProxy(dev.rpcUrl)
    try {
      const counted = localPublicClient(dev, proxy.url)
      const verify = createTransferVerifier(counted, options)
      const results = await Promise.all(Array.from({ length: 20 }, () => verify(hash)))
      expect(new Set(results).size).toBe(1)
      expect(results[0]).toMatchObject({ ok: true, transfer: { value: 300_000n } })
      expect(proxy.counts.get('eth_getTransactionReceipt')).toBe(1)
      // Settled entries are dropped: a later verification asks the chain again.
      await verify(hash)
      expect(proxy.counts.get('eth_getTransactionReceipt')).toBe(2)
    } finally {
      await proxy.close()
    }
  })
})

const mintAbi = [
  {
    type: 'function',
    name: 'mint',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'to', type: 'address' },
      { name: 'amount', type: 'uint256' },
    ],
    outputs: [{ name: '', type: 'bool' }],
  },
] as const

/** A port nothing listens on: bound, read, released. */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}
