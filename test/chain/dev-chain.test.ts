// The local dev chain and its test USDC behave like Circle's FiatTokenV2 where tollgate relies on it.
import { createPublicClient, domainSeparator, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  createAuthorizationNonce,
  readAuthorizationState,
  settleTransferAuthorization,
  signTransferAuthorization,
  type TransferAuthorization,
} from '../../src/chain/authorization.ts'
import {
  type ChainPublicClient,
  type ChainWalletClient,
  chainDefinition,
  createChainPublicClient,
  createChainWalletClient,
} from '../../src/chain/client.ts'
import { type DevChain, startDevChain } from '../../src/chain/dev-chain.ts'
import { readTokenInfo, usdcAbi } from '../../src/chain/usdc.ts'
import { startTestChain, TEST_PAYER_FUNDING } from '../helpers/anvil.ts'

const extraAbi = parseAbi([
  'function symbol() view returns (string)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
])

let dev: DevChain
let publicClient: ChainPublicClient
let relayer: ChainWalletClient

beforeAll(async () => {
  dev = await startTestChain()
  const chain = chainDefinition('local', dev.chainId, dev.rpcUrl)
  publicClient = createChainPublicClient(chain, {
    rpcUrl: dev.rpcUrl,
    timeoutMs: 5000,
    pollingIntervalMs: 50,
  })
  // A third party submits the authorizations, as a facilitator or tollgate's settlement batcher does.
  const account = privateKeyToAccount(dev.payers[4]!.privateKey)
  relayer = createChainWalletClient(chain, account, {
    rpcUrl: dev.rpcUrl,
    timeoutMs: 5000,
    pollingIntervalMs: 50,
  })
})

afterAll(async () => {
  await dev?.stop()
})

const balanceOf = (address: `0x${string}`) =>
  publicClient.readContract({
    address: dev.usdcAddress,
    abi: usdcAbi,
    functionName: 'balanceOf',
    args: [address],
  })

describe('test USDC', () => {
  it('is a 6-decimal "USD Coin" (USDC) with the FiatTokenV2 EIP-712 domain, version 2', async () => {
    expect(await readTokenInfo(publicClient, { address: dev.usdcAddress })).toEqual({
      decimals: 6,
      name: 'USD Coin',
      version: '2',
    })
    const symbol = await publicClient.readContract({
      address: dev.usdcAddress,
      abi: extraAbi,
      functionName: 'symbol',
    })
    expect(symbol).toBe('USDC')
    const separator = await publicClient.readContract({
      address: dev.usdcAddress,
      abi: extraAbi,
      functionName: 'DOMAIN_SEPARATOR',
    })
    expect(separator).toBe(
      domainSeparator({
        domain: { name: 'USD Coin', version: '2', chainId: dev.chainId, verifyingContract: dev.usdcAddress },
      }),
    )
  })

  it('funds each demo payer with the requested USDC and the treasury too', async () => {
    expect(dev.payers).toHaveLength(5)
    expect(dev.treasury.address).toBe('0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266')
    for (const payer of dev.payers) expect(await balanceOf(payer.address)).toBe(TEST_PAYER_FUNDING)
    expect(await balanceOf(dev.treasury.address)).toBeGreaterThan(0n)
  })
})

describe('EIP-3009 transferWithAuthorization', () => {
  const sign = async (value: bigint) => {
    const payer = privateKeyToAccount(dev.payers[0]!.privateKey)
    const now = BigInt(Math.floor(Date.now() / 1000))
    return signTransferAuthorization(payer, {
      usdc: { address: dev.usdcAddress, name: 'USD Coin', version: '2' },
      chainId: dev.chainId,
      to: dev.treasury.address,
      value,
      validAfter: now - 600n,
      validBefore: now + 600n,
      nonce: createAuthorizationNonce(),
    })
  }

  it('moves the signed amount from the payer to the recipient once, and never again with the same nonce', async () => {
    const { authorization, signature } = await sign(1_500_000n)
    const before = { payer: await balanceOf(authorization.from), treasury: await balanceOf(authorization.to) }

    const hash = await settleTransferAuthorization(relayer, {
      usdc: dev.usdcAddress,
      authorization,
      signature,
    })
    const receipt = await publicClient.waitForTransactionReceipt({ hash })
    expect(receipt.status).toBe('success')
    expect(await balanceOf(authorization.from)).toBe(before.payer - 1_500_000n)
    expect(await balanceOf(authorization.to)).toBe(before.treasury + 1_500_000n)
    expect(
      await readAuthorizationState(publicClient, {
        usdc: dev.usdcAddress,
        authorizer: authorization.from,
        nonce: authorization.nonce,
      }),
    ).toBe(true)

    await expect(replay(authorization, signature)).rejects.toThrow(/authorization is used or canceled/)
    // Sent anyway (gas given, so viem does not stop it at estimation): mined and reverted, nothing moves.
    const again = await settleTransferAuthorization(relayer, {
      usdc: dev.usdcAddress,
      authorization,
      signature,
      gas: 200_000n,
    })
    expect((await publicClient.waitForTransactionReceipt({ hash: again })).status).toBe('reverted')
    expect(await balanceOf(authorization.from)).toBe(before.payer - 1_500_000n)
  })

  it('accepts the bytes-signature overload that x402 facilitators call', async () => {
    const { authorization: a, signature } = await sign(250_000n)
    const before = await balanceOf(a.to)
    const hash = await relayer.writeContract({
      address: dev.usdcAddress,
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature],
    })
    expect((await publicClient.waitForTransactionReceipt({ hash })).status).toBe('success')
    expect(await balanceOf(a.to)).toBe(before + 250_000n)
  })

  it('refuses an authorization whose signed fields were altered', async () => {
    const { authorization, signature } = await sign(1_000_000n)
    await expect(replay({ ...authorization, value: 2_000_000n }, signature)).rejects.toThrow(
      /invalid signature/,
    )
  })

  const replay = (a: TransferAuthorization, signature: `0x${string}`) =>
    publicClient.simulateContract({
      account: relayer.account,
      address: dev.usdcAddress,
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature],
    })
})

describe('dev chain process', () => {
  it('serves on loopback and is gone after stop()', async () => {
    const chain = await startDevChain({ payers: 0, payerFunding: 0n, chainId: 1337 })
    expect(chain.rpcUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    const client = createPublicClient({ transport: http(chain.rpcUrl, { retryCount: 0 }) })
    expect(await client.getChainId()).toBe(1337)
    await chain.stop()
    expect(() => process.kill(chain.pid, 0)).toThrow()
    await expect(client.getChainId()).rejects.toThrow()
  })
})
