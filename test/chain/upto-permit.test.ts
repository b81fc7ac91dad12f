// tollgate's own Permit2, x402 upto proxy and settlement batcher on a real anvil, checked against the
// published x402 upto client: what it signs is accepted by the contracts at the canonical addresses and by
// the local verifier, settles for any amount up to the signed maximum and never above, once; a permit whose
// amount or witness was changed after signing is refused on chain and locally; and the published upto
// facilitator itself verifies (simulating the proxy) and settles on these contracts.
import {
  PERMIT2_ADDRESS as publishedPermit2,
  x402UptoPermit2ProxyABI as publishedProxyAbi,
  toFacilitatorEvmSigner,
  uptoPermit2WitnessTypes,
  x402UptoPermit2ProxyAddress,
} from '@x402/evm'
import { UptoEvmScheme } from '@x402/evm/upto/client'
import { UptoEvmScheme as UptoFacilitator } from '@x402/evm/upto/facilitator'
import { type Address, createWalletClient, domainSeparator, http, publicActions, zeroAddress } from 'viem'
import { foundry } from 'viem/chains'
import { formatAbiItem } from 'viem/utils'
import { beforeAll, describe, expect, inject, it } from 'vitest'
import {
  permit2Artifact,
  uptoSettlementBatcherArtifact,
  x402UptoPermit2ProxyArtifact,
} from '../../src/chain/contracts/artifacts.ts'
import { quoteFees } from '../../src/chain/payouts.ts'
import { createTokenReads } from '../../src/chain/token-reads.ts'
import {
  checkUptoOnChain,
  createUptoChainChecker,
  isPermit2NonceUsed,
  PERMIT2_ADDRESS,
  permit2Abi,
  type StoredUptoPermit,
  UPTO_PROXY_ADDRESS,
  uptoPermitFromStored,
  uptoPermitTypes,
  verifyUptoPermit,
} from '../../src/chain/upto-permit.ts'
import {
  hasUptoBatcher,
  installUptoContracts,
  signUptoSettlement,
  type UptoSettlementItem,
  uptoBatcherAddress,
  uptoBatchGas,
  uptoSettlementOutcomes,
} from '../../src/chain/upto-settle.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { approvedPayer, publishedUptoPermit } from '../helpers/upto-payer.ts'

const { rpcUrl, publicClient, usdc } = chainClients()
const chainId = inject('chainId')
const MAX = 500_000n // 0.50 USDC signed as the ceiling

let settler: Funded
let treasury: Address
let batcher: Address
let lastGasUsed = 0n

beforeAll(async () => {
  settler = await fundedAccount(0n)
  treasury = (await fundedAccount(0n)).address
  batcher = uptoBatcherAddress(settler.address)
  await installUptoContracts(rpcUrl, settler.address)
})

function publishedPermit(payer: Funded, facilitator: Address): Promise<StoredUptoPermit> {
  return publishedUptoPermit(payer, { max: MAX, payTo: treasury, facilitator })
}

async function settle(items: UptoSettlementItem[]) {
  const [fees, nonce] = await Promise.all([
    quoteFees(publicClient as never),
    publicClient.getTransactionCount({ address: settler.address, blockTag: 'pending' }),
  ])
  const { rawTx } = await signUptoSettlement(settler.account, { chainId, items, nonce, fees })
  const hash = await publicClient.sendRawTransaction({ serializedTransaction: rawTx })
  const receipt = await publicClient.waitForTransactionReceipt({ hash })
  lastGasUsed = receipt.gasUsed
  return uptoSettlementOutcomes(receipt, { items })
}

function verify(stored: StoredUptoPermit) {
  return verifyUptoPermit({
    chainId,
    permit: uptoPermitFromStored(stored),
    signature: stored.signature,
    usdc,
    treasury,
    facilitators: [batcher, settler.address],
    maxAmount: MAX,
  })
}

describe('x402 upto contracts on the dev chain', () => {
  it('sit at the addresses, domain, types and interface the published client uses', async () => {
    expect(PERMIT2_ADDRESS).toBe(publishedPermit2)
    expect(UPTO_PROXY_ADDRESS).toBe(x402UptoPermit2ProxyAddress)
    expect(uptoPermitTypes).toEqual(uptoPermit2WitnessTypes)
    const separator = await publicClient.readContract({
      address: PERMIT2_ADDRESS,
      abi: permit2Abi,
      functionName: 'DOMAIN_SEPARATOR',
    })
    expect(separator).toBe(
      domainSeparator({ domain: { name: 'Permit2', chainId, verifyingContract: PERMIT2_ADDRESS } }),
    )
    // Every function, event and error of the published proxy ABI is in ours, same types in the same order.
    const ours = new Set(x402UptoPermit2ProxyArtifact.abi.map((x) => formatAbiItem(x as never)))
    for (const item of publishedProxyAbi) expect(ours).toContain(formatAbiItem(item as never))
    expect(permit2Artifact.abi.some((x) => 'name' in x && x.name === 'permitWitnessTransferFrom')).toBe(true)
    expect(await hasUptoBatcher(publicClient, settler.address)).toBe(true)
    expect(await hasUptoBatcher(publicClient, treasury)).toBe(false)
  })

  it("accepts the published client's permit and settles less than the maximum, exactly", async () => {
    const payer = await approvedPayer()
    const stored = await publishedPermit(payer, batcher)
    expect(await verify(stored)).toEqual({ ok: true, payer: payer.address, signature: stored.signature })
    expect(
      await checkUptoOnChain(publicClient, { usdc, permit: uptoPermitFromStored(stored) }),
    ).toMatchObject({
      ok: true,
      balance: { atomic: await usdcBalance(payer.address) },
    })
    const before = [await usdcBalance(payer.address), await usdcBalance(treasury)]
    const outcomes = await settle([{ permit: stored, amount: 123_457n }])
    expect(outcomes).toEqual([{ status: 'settled', amount: 123_457n }])
    expect(await usdcBalance(payer.address)).toBe(before[0]! - 123_457n)
    expect(await usdcBalance(treasury)).toBe(before[1]! + 123_457n)
    // Spent once: the nonce is used, and the same permit again moves nothing.
    expect(
      await isPermit2NonceUsed(publicClient, { owner: payer.address, nonce: BigInt(stored.nonce) }),
    ).toBe(true)
    expect(await checkUptoOnChain(publicClient, { usdc, permit: uptoPermitFromStored(stored) })).toEqual({
      ok: false,
      reason: 'proof_already_used',
    })
    // The hot path's reads (hand-encoded eth_calls to the token and to Permit2) say the same.
    const reads = createTokenReads({ rpcUrl, token: usdc, timeoutMs: 10_000 })
    expect(await createUptoChainChecker(reads)(uptoPermitFromStored(stored))).toEqual({
      ok: false,
      reason: 'proof_already_used',
    })
    await reads.close()
    expect(await settle([{ permit: stored, amount: 1n }])).toEqual([{ status: 'failed' }])
    expect(await usdcBalance(payer.address)).toBe(before[0]! - 123_457n)
  })

  it('settles many permits in one batch; a tampered amount or witness fails alone', async () => {
    // One after another: concurrent mints from the shared deployer can race for its nonce.
    const payers: Funded[] = []
    for (let i = 0; i < 4; i++) payers.push(await approvedPayer())
    const permits = await Promise.all(payers.map((p) => publishedPermit(p, batcher)))
    const raisedMax = { ...permits[1]!, amount: (MAX * 2n).toString() }
    const redirected = { ...permits[2]!, to: settler.address }
    expect(await verify(raisedMax)).toEqual({ ok: false, reason: 'max_amount_mismatch' })
    expect(
      await verifyUptoPermit({
        chainId,
        permit: uptoPermitFromStored(raisedMax),
        signature: raisedMax.signature,
        usdc,
        treasury,
        facilitators: [batcher],
        maxAmount: MAX * 2n,
      }),
    ).toEqual({ ok: false, reason: 'invalid_signature' })
    expect(
      await verifyUptoPermit({
        chainId,
        permit: uptoPermitFromStored(redirected),
        signature: redirected.signature,
        usdc,
        treasury: settler.address,
        facilitators: [batcher],
        maxAmount: MAX,
      }),
    ).toEqual({ ok: false, reason: 'invalid_signature' })
    const before = await Promise.all(payers.map((p) => usdcBalance(p.address)))
    const outcomes = await settle([
      { permit: permits[0]!, amount: 1n },
      { permit: raisedMax, amount: MAX + 1n },
      { permit: redirected, amount: 10n },
      { permit: permits[3]!, amount: MAX },
    ])
    expect(outcomes).toEqual([
      { status: 'settled', amount: 1n },
      { status: 'failed' },
      { status: 'failed' },
      { status: 'settled', amount: MAX },
    ])
    // The gas limit signed for a batch covers what it used (printed: the figure the limit is budgeted from).
    process.stdout.write(`upto batch of 4 (2 settled): ${lastGasUsed} gas\n`)
    expect(lastGasUsed).toBeLessThan(uptoBatchGas(4))
    const after = await Promise.all(payers.map((p) => usdcBalance(p.address)))
    expect(after.map((a, i) => before[i]! - a)).toEqual([1n, 0n, 0n, MAX])
    // The refused ones are still unspent: only a valid settlement uses a nonce.
    expect(
      await isPermit2NonceUsed(publicClient, { owner: payers[1]!.address, nonce: BigInt(permits[1]!.nonce) }),
    ).toBe(false)
  })

  it('never settles above the signed maximum, and only its facilitator settles', async () => {
    const payer = await approvedPayer()
    const stored = await publishedPermit(payer, batcher)
    await expect(
      signUptoSettlement(settler.account, {
        chainId,
        items: [{ permit: stored, amount: MAX + 1n }],
        nonce: 0,
        fees: { maxFeePerGas: 1n, maxPriorityFeePerGas: 1n },
      }),
    ).rejects.toThrow(RangeError)
    const proxy = x402UptoPermit2ProxyArtifact.abi
    const p = uptoPermitFromStored(stored)
    const args = [
      { permitted: { token: p.token, amount: p.amount }, nonce: p.nonce, deadline: p.deadline },
      MAX + 1n,
      p.from,
      { to: p.to, facilitator: p.facilitator, validAfter: p.validAfter },
      stored.signature,
    ] as const
    // The proxy itself refuses above the maximum even from the facilitator…
    await expect(
      publicClient.simulateContract({
        address: UPTO_PROXY_ADDRESS,
        abi: proxy,
        functionName: 'settle',
        args,
        account: batcher,
      }),
    ).rejects.toThrow(/AmountExceedsPermitted/)
    // …and anyone but the facilitator, at any amount; the batcher lets only its settler in.
    await expect(
      publicClient.simulateContract({
        address: UPTO_PROXY_ADDRESS,
        abi: proxy,
        functionName: 'settle',
        args: [args[0], 1n, args[2], args[3], args[4]],
        account: settler.address,
      }),
    ).rejects.toThrow(/UnauthorizedFacilitator/)
    const outsider = await fundedAccount(0n)
    const wallet = createWalletClient({ account: outsider.account, transport: http(rpcUrl) })
    await expect(
      wallet.writeContract({
        address: batcher,
        abi: uptoSettlementBatcherArtifact.abi,
        functionName: 'settle',
        args: [
          [{ permit: args[0], amount: 1n, owner: p.from, witness: args[3], signature: stored.signature }],
        ],
        chain: null,
      }),
    ).rejects.toThrow(/NotSettler/)
    expect(await isPermit2NonceUsed(publicClient, { owner: payer.address, nonce: p.nonce })).toBe(false)
  })

  it('settles directly from the facilitator account when the permit names it (no batcher)', async () => {
    const payer = await approvedPayer()
    const stored = await publishedPermit(payer, settler.address)
    expect(await verify(stored)).toEqual({ ok: true, payer: payer.address, signature: stored.signature })
    const before = await usdcBalance(payer.address)
    expect(await settle([{ permit: stored, amount: 42n }])).toEqual([{ status: 'settled', amount: 42n }])
    expect(await usdcBalance(payer.address)).toBe(before - 42n)
  })

  it('checks concurrent permits of one payer against what the wallet holds together', async () => {
    const payer = await approvedPayer(MAX * 2n)
    const reads = createTokenReads({ rpcUrl, token: usdc, timeoutMs: 10_000 })
    const check = createUptoChainChecker(reads)
    const results = await Promise.all(
      [1n, 2n, 3n].map((nonce) => check({ from: payer.address, nonce, amount: MAX })),
    )
    expect(results.filter((r) => r.ok)).toHaveLength(2)
    expect(results.filter((r) => !r.ok)).toEqual([{ ok: false, reason: 'insufficient_funds' }])
    // A check after those reads sees the chain afresh (nothing settled: all three fit one at a time).
    expect(await check({ from: payer.address, nonce: 4n, amount: MAX })).toMatchObject({ ok: true })
    await reads.close()
  })

  it("the published facilitator verifies and settles the published client's permit on these contracts", async () => {
    const facilitatorKey = await fundedAccount(0n)
    const wallet = createWalletClient({
      account: facilitatorKey.account,
      chain: { ...foundry, id: chainId },
      transport: http(rpcUrl),
      pollingInterval: 50,
    }).extend(publicActions)
    const facilitator = new UptoFacilitator(
      toFacilitatorEvmSigner({ ...wallet, address: facilitatorKey.address } as never),
    )
    const payer = await approvedPayer()
    const requirements = {
      scheme: 'upto',
      network: `eip155:${chainId}` as const,
      asset: usdc,
      amount: MAX.toString(),
      payTo: treasury,
      maxTimeoutSeconds: 300,
      extra: {
        facilitatorAddress: facilitatorKey.address,
        name: 'USD Coin',
        version: '2',
        assetTransferMethod: 'permit2',
      },
    }
    const client = new UptoEvmScheme(payer.account)
    const created = await client.createPaymentPayload(2, requirements)
    const payload = { ...created, accepted: requirements, resource: { url: 'http://x/' } }
    // Its verify simulates the proxy's settle against our Permit2 and proxy.
    expect(await facilitator.verify(payload as never, requirements as never)).toMatchObject({ isValid: true })
    const before = await usdcBalance(payer.address)
    const settled = await facilitator.settle(payload as never, { ...requirements, amount: '31337' } as never)
    expect(settled).toMatchObject({ success: true })
    expect(before - (await usdcBalance(payer.address))).toBe(31_337n)
  })

  it('refuses locally what does not match the offer', async () => {
    const payer = await approvedPayer()
    const stored = await publishedPermit(payer, batcher)
    const now = BigInt(Math.floor(Date.now() / 1000))
    const base = {
      chainId,
      permit: uptoPermitFromStored(stored),
      signature: stored.signature,
      usdc,
      treasury,
      facilitators: [batcher],
      maxAmount: MAX,
    }
    expect(await verifyUptoPermit({ ...base, treasury: zeroAddress })).toEqual({
      ok: false,
      reason: 'wrong_recipient',
    })
    expect(await verifyUptoPermit({ ...base, facilitators: [settler.address] })).toEqual({
      ok: false,
      reason: 'wrong_facilitator',
    })
    expect(await verifyUptoPermit({ ...base, usdc: zeroAddress })).toEqual({
      ok: false,
      reason: 'wrong_asset',
    })
    expect(await verifyUptoPermit({ ...base, maxAmount: MAX - 1n })).toEqual({
      ok: false,
      reason: 'max_amount_mismatch',
    })
    expect(await verifyUptoPermit({ ...base, nowSeconds: now + 600n })).toEqual({
      ok: false,
      reason: 'authorization_expired',
    })
    expect(await verifyUptoPermit({ ...base, permit: { ...base.permit, spender: batcher } })).toEqual({
      ok: false,
      reason: 'wrong_spender',
    })
    expect(await verifyUptoPermit({ ...base, chainId: chainId + 1 })).toEqual({
      ok: false,
      reason: 'invalid_signature',
    })
    // The chain's half: a payer without the Permit2 approval, or without the funds.
    const unapproved = await fundedAccount(10_000_000n)
    expect(
      await checkUptoOnChain(publicClient, {
        usdc,
        permit: { from: unapproved.address, nonce: 1n, amount: MAX },
      }),
    ).toEqual({ ok: false, reason: 'permit2_allowance_required' })
    expect(
      await checkUptoOnChain(publicClient, {
        usdc,
        permit: { from: payer.address, nonce: 1n, amount: 10n ** 12n },
      }),
    ).toEqual({ ok: false, reason: 'insufficient_funds' })
  })
})
