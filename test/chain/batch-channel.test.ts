// The project's BatchSettlement + ERC-3009 collector, installed at the fixed addresses, against the
// published @x402/evm batch-settlement client's own signatures: deposit, a batched claim, settle, refund.
import {
  computeChannelId,
  createBatchSettlementEIP3009DepositPayload,
  signVoucher,
} from '@x402/evm/batch-settlement/client'
import { createPublicClient, createWalletClient, type Hex, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  BATCH_SETTLEMENT_ADDRESS,
  type ChannelConfig,
  channelIdOf,
  claimAndRefundCalldata,
  claimAndSettleCalldata,
  depositCalldata,
  erc3009CollectorData,
  readChannel,
} from '../../src/chain/batch-channel.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { startTestChain } from '../helpers/anvil.ts'

const balanceAbi = parseAbi(['function balanceOf(address) view returns (uint256)'])
let dev: DevChain

beforeAll(async () => {
  dev = await startTestChain({ payers: 2 })
})
afterAll(async () => {
  await dev?.stop()
})

describe('batch-settlement contracts on anvil', () => {
  it('take a published-client deposit, claim two channels in one transaction, settle and refund', async () => {
    const chain = {
      id: dev.chainId,
      name: 'anvil',
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [dev.rpcUrl] } },
    } as const
    const publicClient = createPublicClient({ chain, transport: http(dev.rpcUrl) })
    const treasury = createWalletClient({
      chain,
      transport: http(dev.rpcUrl),
      account: privateKeyToAccount(dev.treasury.privateKey),
    })
    const network = `eip155:${dev.chainId}` as const
    const requirements = {
      scheme: 'batch-settlement',
      network,
      amount: '1000',
      asset: dev.usdcAddress,
      payTo: dev.treasury.address,
      maxTimeoutSeconds: 300,
      extra: { name: 'USD Coin', version: '2', receiverAuthorizer: dev.treasury.address, withdrawDelay: 900 },
    }
    const claims = []
    const configs: ChannelConfig[] = []
    for (const payer of dev.payers) {
      const account = privateKeyToAccount(payer.privateKey)
      const config: ChannelConfig = {
        payer: account.address,
        payerAuthorizer: account.address,
        receiver: dev.treasury.address,
        receiverAuthorizer: dev.treasury.address,
        token: dev.usdcAddress,
        withdrawDelay: 900,
        salt: `0x${'00'.repeat(32)}` as Hex,
      }
      const channelId = channelIdOf(config, dev.chainId)
      expect(computeChannelId(config, network)).toBe(channelId)
      const deposit = await createBatchSettlementEIP3009DepositPayload(
        account,
        2,
        requirements,
        config,
        '10000',
        '1000',
      )
      const p = deposit.payload as any
      const auth = p.deposit.authorization.erc3009Authorization
      const hash = await treasury.sendTransaction({
        to: BATCH_SETTLEMENT_ADDRESS,
        data: depositCalldata(config, 10_000n, erc3009CollectorData(auth)),
      })
      expect((await publicClient.waitForTransactionReceipt({ hash })).status).toBe('success')
      expect(await readChannel(publicClient, channelId)).toEqual({ balance: 10_000n, totalClaimed: 0n })
      const v = await signVoucher(account, channelId, '3000', network)
      claims.push({ config, maxClaimableAmount: 3000n, signature: v.signature, totalClaimed: 3000n })
      configs.push(config)
    }
    const before = await publicClient.readContract({
      address: dev.usdcAddress,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [dev.treasury.address],
    })
    const claimHash = await treasury.sendTransaction({
      to: BATCH_SETTLEMENT_ADDRESS,
      data: claimAndSettleCalldata(claims, dev.treasury.address, dev.usdcAddress),
    })
    expect((await publicClient.waitForTransactionReceipt({ hash: claimHash })).status).toBe('success')
    const after = await publicClient.readContract({
      address: dev.usdcAddress,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [dev.treasury.address],
    })
    expect(after - before).toBe(6000n)
    // A forged voucher (signed by someone else) is refused by the contract.
    const forged = await signVoucher(
      privateKeyToAccount(dev.treasury.privateKey),
      channelIdOf(configs[0]!, dev.chainId),
      '9000',
      network,
    )
    await expect(
      publicClient.call({
        account: dev.treasury.address,
        to: BATCH_SETTLEMENT_ADDRESS,
        data: claimAndSettleCalldata(
          [{ ...claims[0]!, maxClaimableAmount: 9000n, totalClaimed: 9000n, signature: forged.signature }],
          dev.treasury.address,
          dev.usdcAddress,
        ),
      }),
    ).rejects.toThrow(/invalid voucher signature/)
    // Cooperative refund of the rest: the payer gets 7000 back.
    const payerBefore = await publicClient.readContract({
      address: dev.usdcAddress,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [configs[0]!.payer],
    })
    const refundHash = await treasury.sendTransaction({
      to: BATCH_SETTLEMENT_ADDRESS,
      data: claimAndRefundCalldata(configs[0]!, null, 1_000_000n),
    })
    expect((await publicClient.waitForTransactionReceipt({ hash: refundHash })).status).toBe('success')
    const payerAfter = await publicClient.readContract({
      address: dev.usdcAddress,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [configs[0]!.payer],
    })
    expect(payerAfter - payerBefore).toBe(7000n)
    expect(await readChannel(publicClient, channelIdOf(configs[0]!, dev.chainId))).toEqual({
      balance: 3000n,
      totalClaimed: 3000n,
    })
  })
})
